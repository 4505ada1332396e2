"""The performance page's opening table: every target a benchmark record is held to, the value it measured,
whether the target is met, and the record's date (``scripts/performance_page.py`` renders it first).

A target is one row of ``TARGETS``: the record's name, the target in words, and a function of the record's
figures that returns (measured value in words, met: True / False / None where the record cannot say). A record
that is missing, or whose figures lack what a row reads, gives a row that says so instead of failing the page.
"""

from __future__ import annotations

from collections.abc import Callable


def _ratio(x: float) -> str:
    return f"{x:.3f}×"


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def _qc(key: str, limit_key: str):
    def get(f: dict):
        x = f["runs"][0][key]
        return _ratio(x), x <= f[limit_key]

    return get


def _memory(f: dict):
    d = f["runs"]["default"]["peak_rss_mib"]
    c = f["runs"]["ctx2048"]["peak_rss_mib"]
    g = f["growth_3_to_8_schemes_mib"]
    met = f["default_meets_target"] and f["ctx2048_meets_target"] and f["growth_meets_target"]
    return f"{d:,.0f} MiB; ctx 2048 {c:,.0f} MiB; +{g:,.0f} MiB", met


def _codec(f: dict):
    worst = max(
        max(t["targets"]["payload_over_ideal"], t["targets"]["file_over_ideal_plus_header"])
        for t in f["texts"].values()
    )
    return f"worst {_ratio(worst)} ideal", all(t["targets"]["within_0.1%"] for t in f["texts"].values())


def _mix(f: dict):
    r = f["runs"][0]
    return f"{r['ratio']:.2f}× uniform's KL", r["meets_target"]


def _standard_errors(f: dict):
    ratios = [row["batch/block256"] for c in f["corpora"].values() for row in c["rows"]]
    return f"{min(ratios):.2f}–{max(ratios):.2f}×", all(0.6 <= x <= 1.6 for x in ratios)


def _sequential(f: dict):
    good, bad = f["int8-channel"], f["int4-channel"]
    share, windows = good["sequential"]["tokens_share"], bad["sequential"]["windows_evaluated"]
    met = share <= 0.30 and good["wall_ratio"] <= 0.4 and windows <= 2 and bad["wall_ratio"] <= 0.15
    return (
        f"int8: {_pct(share)} of tokens, {_ratio(good['wall_ratio'])} wall; int4-channel: {windows} window(s), "
        f"{_ratio(bad['wall_ratio'])}",
        met,
    )


def _report(f: dict):
    t = f["targets"]
    return f"{sum(t.values())} of {len(t)} met", all(t.values())


def _methods(f: dict):
    ran = [s for s in f["compare"]["schemes"] if ":" in s]
    backends = {s.split(":")[0] for s in ran}
    calibrated = f["calibrated"][0]
    met = len(backends) >= 4 and calibrated["kl_ratio"] < 1
    return f"{len(backends)} backends; AutoRound {calibrated['kl_ratio']:.2f}× RTN's KL", met


def _checkpoints(f: dict):
    zs = [g["z"] for g in f["gated"].values() if "z" in g]
    return f"{len(f['gated'])} formats gated; z within ±{max(abs(z) for z in zs):.2f} in {len(zs)} pairs", all(
        abs(z) <= 2 for z in zs
    )


def _floor(f: dict):
    share = f["float32"]["floor_share_of_wall"]
    return _pct(share), share <= 0.10


def _many_variants(f: dict):
    share = f["paired_share_of_run"]
    return f"verdicts {_pct(share)} of the run", share < 0.05


def _mechanisms(f: dict):
    kept = {m: r for c in f["commands"].values() for m, r in c["mechanisms"].items() if r["pays"]}
    text = ", ".join(f"{m} {_pct(r['saves_wall'])}" for m, r in kept.items())
    return f"paying: {text}; the others removed", None


def _ranks(f: dict):
    return _ratio(f["ratio_ranks_vs_process"]), f["ratio_ranks_vs_process"] <= f["target_ratio"]


def _removals(f: dict):
    steps = [r for r in f["revisions"] if "removed" in r.get("label", "")]
    worst = max(r["wall_vs_previous"] for r in steps)
    same = all(r.get("numbers_equal_previous", False) for r in steps)
    return (
        f"{len(steps)} removals, worst {_ratio(worst)} wall, numbers {'equal' if same else '**changed**'}",
        worst <= 1.03 and same,
    )


def _against_old(f: dict):
    last = f["revisions"][-1]
    text = f"{_ratio(last['wall_vs_first'])} wall, {_ratio(last['peak_vs_first'])} peak (what it bought: design notes)"
    return text, last["wall_vs_first"] <= 1.02 and last["peak_vs_first"] <= 1.02


Getter = Callable[[dict], tuple[str, bool | None]]


def _scale_run(model: str, plan: str):
    def get(f: dict) -> dict:
        return {r["model"]: r for r in f["rows"]}[model]["runs"][plan]

    return get


def _scale_4b(f: dict):
    lock, auto = _scale_run("qwen3-4b", "lockstep")(f), _scale_run("qwen3-4b", "auto")(f)
    refused = lock.get("exit_code") == 2
    peak = auto["peak_rss_mib"] / 1024
    met = refused and auto["plan_taken"] == "reference-first" and peak <= 20
    return f"lockstep {'refused' if refused else 'ran'}; {auto['plan_taken']} peak {peak:.1f} GiB", met


def _scale_8b(f: dict):
    auto = _scale_run("qwen3-8b", "auto")(f)
    peak = auto["peak_rss_mib"] / 1024
    return f"{auto['plan_taken']} peak {peak:.1f} GiB", peak <= 20


def _scale_wall(f: dict):
    x = {r["model"]: r for r in f["rows"]}["qwen3-0.6b"]["reference_first_over_lockstep_wall"]
    return _ratio(x), x <= 1.15


def _scale_estimates(f: dict):
    ratios = [run["estimate_over_measured"] for r in f["rows"] for run in r["runs"].values() if "wall_s" in run]
    worst = max(ratios, key=lambda x: abs(x - 1))
    return f"{len(ratios)} runs, worst {_ratio(worst)}", all(0.85 <= x <= 1.15 for x in ratios)


def _hidden(f: dict):
    worst = max(v["relative"] for v in f["gate_vs_compare"].values())
    b = f["bytes_per_position"]
    return f"relative ≤ {worst:.1e}; {b['hidden_head_shared']:,.0f} B/position (4·d = {b['four_d']:,})", worst <= 1e-6


def _streaming_big(f: dict):
    b = f["big"]
    rss, read, storage = b["peak_rss_gib"], b["bytes_read_over_model"], b.get("storage_read_bytes_over_model")
    shown = f"peak {rss:.2f} GiB; read {read:.3f}× the model" + (f" (storage {storage:.3f}×)" if storage else "")
    # the tensors read once per pass; the storage's count is lower where the page cache held part of the file
    return shown, rss <= 4 and abs(read - 1) <= 0.05 and (storage is None or storage <= 1.05)


def _streaming_offload(f: dict):
    x = f["offload"]["stream_over_accelerate_wall"]
    return _ratio(x), x <= 0.75


def _streaming_small(f: dict):
    x = f["small"]["streamed_over_lockstep_wall"]
    return _ratio(x), x <= 1.3


def _new_user_ratio(key: str, most: float):
    def get(f: dict):
        x = f["peak_ratios"][key]
        return _ratio(x), x <= most

    return get


TARGETS: list[tuple[str, str, Getter]] = [
    (
        "quantize_compare",
        "quantize-compare wall ≤ 1.10 × four plain forwards",
        _qc("ratio_wall_vs_plain", "target_ratio_wall_vs_plain"),
    ),
    (
        "quantize_compare",
        "its evaluation loop ≤ 1.05 × plain",
        _qc("ratio_eval_vs_plain", "target_ratio_eval_vs_plain"),
    ),
    ("revisions", "each removal of issue 53 ≤ 1.03 × the wall before it", _removals),
    ("revisions", "default run against d8df1b8: wall ≤ 1.02×, peak ≤ 1.02×", _against_old),
    ("mechanisms", "a mechanism is kept where it saves ≥ 5 % wall or ≥ 10 % peak", _mechanisms),
    ("memory", "peak ≤ 1.7 GB default, ≤ 2.5 GB at ctx 2048, +≤ 0.4 GB for 3 → 8 schemes", _memory),
    ("ranks", "2 ranks ≤ 1.10 × one process's wall", _ranks),
    ("codec", "payload and file ≤ 1.001 × ideal", _codec),
    ("mix", "the mix's mean KL ≤ 0.7 × uniform int4-g128's", _mix),
    ("standard_errors", "batch-means SE within 0.6–1.6 × the block-256 SE", _standard_errors),
    (
        "sequential",
        "int8 passes on ≤ 30 % of tokens (≤ 0.4× wall); int4-channel fails in ≤ 2 windows (≤ 0.15×)",
        _sequential,
    ),
    ("report", "page ≤ 4 MB, written ≤ 3 s, painted ≤ 2 s; top-5 ≤ 5 % more", _report),
    ("methods", "≥ 4 backends besides RTN run; AutoRound below RTN in mean KL", _methods),
    ("checkpoints", "every installed format gates from its folder within 2 SE of in-process", _checkpoints),
    ("floor", "the noise floor ≤ 10 % of the default run's wall", _floor),
    ("many_variants", "paired verdicts < 5 % of a 12-variant run", _many_variants),
    ("scale", "Qwen3-4B float32: lockstep refused, auto runs reference-first, peak ≤ 20 GiB", _scale_4b),
    ("scale", "Qwen3-8B bfloat16 runs, peak ≤ 20 GiB", _scale_8b),
    ("scale", "reference-first at 0.6B ≤ 1.15 × the lockstep's wall", _scale_wall),
    ("scale", "every estimate within 15 % of the measured peak", _scale_estimates),
    ("hidden_reference", "the gate on hidden states = quantize-compare (≤ 1e-6 relative)", _hidden),
    (
        "streaming",
        "Qwen3-8B float32 (33 GB) streamed: peak ≤ 4 GiB, bytes read within 5 % of the model",
        _streaming_big,
    ),
    ("streaming", "the streamed reference pass ≤ 0.75 × accelerate's offload (wall)", _streaming_offload),
    ("streaming", "--stream layers at 0.6B ≤ 1.3 × the lockstep's wall", _streaming_small),
    (
        "new_user",
        "0.6B shape: sensitivity's peak ≤ 1.3 × quantize-compare's (512 tokens)",
        _new_user_ratio("sensitivity / quantize-compare (512 tokens)", 1.3),
    ),
    (
        "new_user",
        "0.6B shape: mix's peak ≤ 1.3 × quantize-compare's (512 tokens)",
        _new_user_ratio("mix / quantize-compare (512 tokens)", 1.3),
    ),
    (
        "new_user",
        "0.6B shape: the gate's peak ≤ quantize-compare's with its one scheme",
        _new_user_ratio("gate / quantize-compare (int8-channel)", 1.0),
    ),
]


def summary_rows(records: dict[str, dict]) -> list[list[str]]:
    """One row per target: benchmark, target, measured, met (yes / **no** / –), record date."""
    rows = []
    for name, target, get in TARGETS:
        rec = records.get(name)
        if rec is None:
            rows.append([f"`{name}`", target, "no record", "–", "–"])
            continue
        try:
            measured, met = get(rec["figures"])
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            measured, met = f"not in the record ({type(exc).__name__}: {exc})", None
        rows.append(
            [f"[`{name}`](#{name})", target, measured, {True: "yes", False: "**no**", None: "–"}[met], rec["date"][:10]]
        )
    return rows

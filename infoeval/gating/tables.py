"""Gate and reference results as rich tables, the lines printed under them, and the cells that JUnit XML and
markdown (``ci_summary``) share. No torch."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
from rich.table import Table

from infoeval.errors import counted
from infoeval.gating.limits import floor_line
from infoeval.output.llamacpp_table import print_block, scope_note
from infoeval.output.results import atomic_write_bytes
from infoeval.output.tables import report_table


def _num(x, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if isinstance(x, float) and (abs(x) >= 1e4 or (x != 0 and abs(x) < 1e-3)):
        return f"{x:.3e}"
    return f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def _value(v: dict) -> str:
    if v["se"] is None or v["metric"] == "ppl_ratio":
        return _num(v["value"])
    return f"{_num(v['value'])} ± {_num(v['se'])}"


def _rel(v: dict) -> str:
    return "≤" if v["side"] == "max" else "≥"


def verdict_rows(result: dict) -> list[tuple[str, str, str, str, str]]:
    """(check, value ± SE, judged value, limit, verdict) for every limit and baseline comparison."""
    rows = []
    for v in result["verdicts"]:
        rows.append(
            (
                v["metric"],
                _value(v),
                f"{_num(v['bound'])} ({v['judged']})",
                f"{_rel(v)} {_num(v['threshold'])}",
                "PASS" if v["passed"] else "FAIL",
            )
        )
    rows += [baseline_row(r) for r in (result.get("baseline") or {}).get("rows", [])]
    return rows


def baseline_row(r: dict) -> tuple[str, str, str, str, str]:
    """A baseline comparison's table row: paired (the difference ± SE and how much worse at least) or by tolerance."""
    verdict = "PASS" if r["passed"] else "FAIL"
    if r.get("form") == "paired":
        return (
            f"{r['metric']} vs baseline",
            f"Δ {_num(r['diff'])} ± {_num(r['se'])}",
            f"worse by ≥ {_num(r['worse_by_at_least'])} ({r['confidence']:.0%}, t {r['df']} df)",
            f"baseline {_num(r['baseline'])}: not worse beyond noise",
            verdict,
        )
    return (
        f"{r['metric']} vs baseline",
        _num(r["value"]),
        _num(r["value"]),
        f"baseline {_num(r['baseline'])} ± {r['tolerance']:.0%} ({r.get('note', 'tolerance')})",
        verdict,
    )


def _bound_text(r: dict) -> str:
    """A limit's bound at the stop, in words where it is not a bound on the metric itself."""
    if r.get("failed_by") and r["failed_by"] != "confidence sequence":
        return r["failed_by"]
    failed = r.get("failed_by") == "confidence sequence"
    b = r["fail_bound"] if failed else r["pass_bound"]
    if b is None:
        return "–"
    if r.get("bound_of") == "share":  # a quantile limit is judged by the share of positions above it
        return f"share > {_num(r['threshold'])}: {'≥' if failed else '≤'} {_num(b)} (limit {_num(r['stream_limit'])})"
    if r.get("bound_of") == "max":
        return f"max seen {_num(b)}"
    return f"{'≤' if (r['side'] == 'min') == failed else '≥'} {_num(b)}"


def sequential_rows(result: dict) -> list[tuple[str, str, str, str, str, str]]:
    """--sequential: (check, value ± SE on the positions used, the CS bound at the stop, limit, the sequential
    decision, the fixed-budget verdict on the positions used) per limit."""
    fixed = {v["limit"]: v for v in result["verdicts"]}
    rows = []
    for r in result["sequential"]["limits"]:
        v = fixed[r["limit"]]
        bound = _bound_text(r)
        rows.append(
            (
                r["metric"],
                _value(v),
                bound,
                f"{_rel(v)} {_num(r['threshold'])}",
                r["decision"].upper(),
                "PASS" if v["passed"] else "FAIL",
            )
        )
    return rows


def sequential_line(result: dict) -> str:
    """One sentence: the decision, the stopping window, tokens used of the budget and the saving."""
    q = result["sequential"]
    return (
        f"sequential: {q['decision']} at window {q['stopped_at_window']} of {q['windows_budget']} "
        f"({q['tokens_used']:,} of {q['tokens_budget']:,} positions, saving {100 * q['saving']:.0f} %; "
        f"α = {q['alpha']:g}: every limit at {q['alpha_pass']:g} to pass, {q['alpha_fail_per_limit']:g} each to fail)"
        + (
            ""
            if q.get("guarantee", True)
            else "; TEXT ORDER: the windows are not a random sample, the error bounds do not hold"
        )
    )


def _sequential_table(result: dict, verdict: str, cand: str) -> Table:
    t = report_table(
        f"Gate (sequential): {verdict}",
        ["check", "value ± SE", "CS bound at stop", "limit", "sequential", "fixed-budget"],
        f"candidate {cand}; {sequential_line(result)}",
    )
    for row in sequential_rows(result):
        t.add_row(*row, style="red" if row[4] == "FAIL" else None)
    return t


def candidate_label(result: dict, code: str = "") -> str:
    """The candidate as the tables name it: its spec, the scheme applied to it, or a shipped checkpoint's format
    and stored bits per weight."""
    c = result["candidate"]
    if c["scheme"]:
        return f"{c['spec']} + {code}{c['scheme']}{code}"
    q = c.get("quantization") or {}
    if q.get("source") == "checkpoint" or q.get("format") == "gguf":
        what = " ".join(str(x) for x in (q["format"], q.get("packing")) if x)
        bits = f", {q['bits_per_weight']:.3f} bits/weight" if q.get("bits_per_weight") else ""
        return f"{c['spec']} ({what}{bits})"
    return c["spec"]


def gate_table(result: dict) -> Table:
    verdict = "[bold green]PASS[/]" if result["passed"] else "[bold red]FAIL[/]"
    cand = candidate_label(result)
    if result.get("sequential"):
        return _sequential_table(result, verdict, cand)
    t = report_table(f"Gate: {verdict}", ["check", "value ± SE", "judged", "limit", "verdict"], f"candidate {cand}")
    for row in verdict_rows(result):
        style = None if row[-1] == "PASS" else "red"
        t.add_row(*row, style=style)
    return t


def floor_lines(result: dict) -> list[str]:
    """The noise floor under the tables: its numbers and the candidate against it, then one line per limit below it."""
    f = result.get("floor")
    if not f:
        return []
    if not f.get("metrics"):
        out = ["noise floor: it ran on no window the gate judged"]
    else:
        m, c = f["metrics"], f["candidate"]
        x = (
            ""
            if c["x_floor"] is None
            else f"; the candidate's mean KL is {c['x_floor']:.3g}× the floor's"
            + (", at floor" if c["at_floor"] else "")
        )
        out = [
            f"noise floor ({counted(len(f['windows']), 'window')}, {f['mode']}): mean KL {_num(m['kl_mean'])} ± "
            f"{_num(m['kl_se'])}, P99 {_num(m['kl_p99'])}, "
            f"top-1 disagreement {100 * m['top1_disagree']:.2f} %{x}"
        ]
    return out + [line for v in result["verdicts"] if (line := floor_line(v))]


def verdicts_frame(result: dict) -> pd.DataFrame:
    """The summary CSV of a gate: one row per verdict."""
    return pd.DataFrame(result["verdicts"])


def exact(result: dict) -> bool:
    """Whether the gate ran against a hidden-state reference (exact columns, no lower bound)."""
    return result["provenance"].get("reference_kind") == "hidden"


def summary_table(result: dict) -> Table:
    m, r, hidden = result["metrics"], result["reference"], exact(result)
    columns = ["PPL ref", "PPL cand", "KL mean (nats)", "KL lower bound", "KL P99", "top-1 agree", "TV mean"]
    t = report_table(
        "Candidate vs reference",
        [c for c in columns if not (hidden and c == "KL lower bound")] + ["Δ bits/byte"],
        "the candidate against the hidden-state reference (exact)"
        if hidden
        else "the candidate against the compact reference",
        left=0,
    )
    t.add_row(
        _num(r["ppl"], 3),
        _num(m["ppl"], 3),
        f"{_num(m['kl_mean'])} ± {_num(m['kl_se'])}",
        *(() if hidden else (_num(m["kl_lower_mean"]),)),
        _num(m["kl_p99"]),
        f"{100 * m['top1']:.2f} ± {100 * m['top1_se']:.2f} %",
        _num(m["tv_mean"]),
        _num(m["bits_per_byte_delta"]),
    )
    return t


def print_gate_llamacpp(console, result: dict) -> None:
    """--table llama.cpp: llama-perplexity --kl-divergence's block for the candidate, then the verdicts."""
    pv = result["provenance"]
    note = (
        "every figure is exact: the reference's logits from its stored last hidden states and head"
        if exact(result)
        else f"KLD per position is the tail-corrected estimate from the top-{pv['top_k']} + {pv['tail_samples']} "
        "tail samples "
        "(its mean is unbiased; its percentiles spread wider than the exact ones); PPL, Δp and same top p are exact."
    )
    print_block(
        console,
        f"### the candidate (Q) vs the {'hidden-state' if exact(result) else 'compact'} reference (base)",
        result["metrics"],
        result["reference"],
        (scope_note(result), note),
    )
    console.print(gate_table(result))


def reference_summary_table(info: dict) -> Table:
    r, hidden = info["reference"], info.get("hidden")
    kind = ["hidden size", "head"] if hidden else ["top-K", "tail samples"]
    t = report_table(
        "Hidden-state reference" if hidden else "Compact reference",
        ["positions", *kind, "bytes/position", "vs llama.cpp", "PPL", "bits/byte"],
        f"written to {info['file']}",
        left=0,
    )
    t.add_row(
        f"{r['tokens']:,}",
        *(
            (str(hidden["hidden_size"]), "in the file" if hidden["head_stored"] else "the candidate's (sha256)")
            if hidden
            else (str(info["top_k"]), str(info["tail_samples"]))
        ),
        f"{info['bytes_per_position']:.0f}",
        f"{100 * info['bytes_per_position'] / info['llama_cpp_bytes_per_position']:.2f} % of "
        f"{info['llama_cpp_bytes_per_position']:,} B",
        _num(r["ppl"], 3),
        _num(r["bits_per_byte"]),
    )
    return t


def write_text(path: Path, data: str | bytes) -> None:
    atomic_write_bytes(Path(path), data.encode("utf-8") if isinstance(data, str) else data)

"""The `reference` and `gate` pipelines: one pass of the reference model writes a compact reference; a gate
runs only the candidate, on exactly the reference's token ids, and judges it against limits."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np
import torch

from infoeval import engine
from infoeval.errors import UsageError, counted, spell
from infoeval.gating.baseline import judge_baseline, read_baseline
from infoeval.gating.candidate import load_candidate as _load_candidate  # under this name the tests replace it
from infoeval.gating.candidate import vocab_fingerprint
from infoeval.gating.columns import GATE_COLUMNS, gate_metrics, gate_reducer, reference_columns
from infoeval.gating.compact import CompactDist, compact
from infoeval.gating.floor import floor_roles, gate_floor
from infoeval.gating.hidden import HEAD_SOURCES, HIDDEN_KEYS, candidate_head, hidden_meta, hidden_pass
from infoeval.gating.limits import below_floor, judge
from infoeval.gating.positions import REFERENCE_TOP_COLUMNS, TOP_COLUMNS, check_top_k, row_columns
from infoeval.gating.reference_file import KINDS, Reference, read_reference, write_reference
from infoeval.gating.results import GateResult, ReferenceResult, gate_result
from infoeval.gating.settings import GateSettings  # noqa: F401  (re-exported)
from infoeval.input.prepare import Reporter, prepare, progress
from infoeval.input.settings import ModelSettings, TextSettings, WindowSettings
from infoeval.measure.column_metrics import reference_metrics
from infoeval.measure.floor import floor_windows
from infoeval.measure.infotheory import by_rows, chunk_rows, entropy, log_softmax
from infoeval.output.results import SCHEMA_VERSION, check_file_option
from infoeval.quant.floor import FLOOR

REFERENCE = "the reference model"
COMPACT_FIELDS = tuple(CompactDist.__dataclass_fields__)
REFERENCE_SCHEMA = {
    "top_ids": np.int64,
    "tail_ids": np.int64,
    "top_logp": np.float32,
    "tail_logmass": np.float32,
    "tail_logp": np.float32,
    "target_logp": np.float32,
    "entropy": np.float32,
}


def _compact_rows(z: torch.Tensor, targets: torch.Tensor, top_k: int, tail_samples: int, gen) -> dict:
    """The reference file's columns for some rows of the reference's logits ``z``."""
    lp = log_softmax(z)
    d = compact(lp, top_k, tail_samples, gen)
    return {
        **{f: getattr(d, f) for f in COMPACT_FIELDS},
        "target_logp": lp.gather(-1, targets[:, None])[:, 0],
        "entropy": entropy(lp),
    }


def window_seed(seed: int, window: int) -> int:
    """The tail-sampling seed of one window: the window index for seed 0 (as every seed-0 reference file was
    written), else 32 bits of numpy's SeedSequence((seed, window)). A CPU generator (mt19937) uses only the low 32
    bits of its seed, so the former seed · 2³² + window gave every seed seed 0's draws on a CPU.

    >>> window_seed(0, 3), window_seed(1, 0) != window_seed(2, 0), window_seed(1, 0) < 2**32
    (3, True, True)
    """
    return window if seed == 0 else int(np.random.SeedSequence([int(seed), int(window)]).generate_state(1)[0])


@torch.inference_mode()
def build_reference(
    model_settings: ModelSettings,
    text_settings: TextSettings,
    window_settings: WindowSettings,
    out: Path,
    top_k: int,
    tail_samples: int,
    seed: int = 0,
    reporter: Reporter | None = None,
    fmt: str = "topk",
    head: str = "stored",
) -> ReferenceResult:
    """One pass of the reference model over the windows → the reference file at ``out``: compact (``fmt`` "topk":
    top-K log-probs and tail samples) or exact (``fmt`` "hidden": the last hidden states, and the head unless
    ``head`` is "candidate": ``gating/hidden.py``)."""
    if fmt not in KINDS:
        raise UsageError(f"{spell('format')} {fmt} is not allowed; give one of {', '.join(KINDS)}")
    if top_k < 1 or tail_samples < 0:
        raise UsageError(
            f"{spell('top_k')} {top_k} / {spell('tail_samples')} {tail_samples} not allowed; top-k ≥ 1 and "
            "tail-samples ≥ 0"
        )
    if head not in HEAD_SOURCES:
        raise UsageError(f"{spell('head')} {head} is not allowed; give one of {', '.join(HEAD_SOURCES)}")
    if head != "stored" and fmt != "hidden":
        raise UsageError(f"{spell('head')} {head} needs {spell('format')} hidden (a top-K reference holds no head)")
    check_file_option(out, spell("out"))
    reporter = reporter or Reporter()
    p = prepare(model_settings, text_settings, window_settings, reporter)
    with progress(reporter, len(p.windows), f"reference: {counted(len(p.windows), 'window')}") as bar:
        if fmt == "hidden":
            cols, out_head = hidden_pass(p, bar.step)
            vocab, extra = out_head.vocab, hidden_meta(out_head, head, cols["hidden"])
            top_k, tail_samples = vocab, 0
        else:
            cols, vocab = _topk_pass(p, seed, top_k, tail_samples, bar.step)
            extra = {}
    prov = p.provenance("reference")
    ref = _reference(p, cols, prov, vocab, top_k, tail_samples, seed, extra)
    if fmt == "hidden":
        ref = dataclasses.replace(
            ref, hidden=torch.from_numpy(cols["hidden"]), head=out_head if head == "stored" else None
        )
    size = write_reference(out, ref, vocab)
    meta = ref.meta
    return ReferenceResult(
        prov,
        {**p.timings, "eval_s": bar.seconds},
        file=str(out),
        file_bytes=size,
        bytes_per_position=size / ref.n,
        llama_cpp_bytes_per_position=2 * vocab,
        vocab_size=vocab,
        tokenizer_fingerprint=meta["tokenizer_fingerprint"],
        top_k=meta["top_k"],
        tail_samples=tail_samples,
        seed=seed,
        reference=meta["reference"],
        hidden=None if fmt == "topk" else {k: meta[k] for k in HIDDEN_KEYS},
    )


def _topk_pass(p, seed: int, top_k: int, tail_samples: int, on_forward) -> tuple[dict, int]:
    """The reference pass of a top-K reference: its columns (``REFERENCE_SCHEMA``) and the vocabulary's size."""
    model, seen = p.loaded.model, {}
    gen = torch.Generator(device=engine.model_device(model)).manual_seed(seed)
    cols = engine.run(
        {REFERENCE: model},
        p.stream.ids,
        engine.plan(p.windows),
        p.protocol.prefix_id,
        _reference_reducer(gen, seed, top_k, tail_samples, seen),
        REFERENCE_SCHEMA,
        p.stream.nbytes,
        on_forward,
    )
    return cols, seen.get("vocab") or model.get_output_embeddings().weight.shape[0]  # a rank may have seen no window


def _reference_reducer(gen: torch.Generator, seed: int, top_k: int, tail_samples: int, seen: dict):
    """The engine's reducer of the reference pass: each window's rows → the reference file's columns, its tail
    samples drawn by ``gen`` reseeded per window; ``seen["vocab"]`` records the logits' width."""

    def reduce(step: engine.Step) -> dict:
        z, targets = step.logits[REFERENCE][0], step.targets[0]
        seen["vocab"] = z.shape[1]
        # each window's tail samples come from (seed, window index): the same however the windows are split
        gen.manual_seed(window_seed(seed, step.batch.windows[0].index))
        # a CPU generator's tail samples are drawn row after row, the same whatever the chunks; on a device they
        # depend on each call's shape, so there the window is one chunk (the draws of a seed stay the same)
        size = chunk_rows(z) if gen.device.type == "cpu" else z.shape[0]
        return by_rows(z.shape[0], lambda r: _compact_rows(z[r], targets[r], top_k, tail_samples, gen), size)

    return reduce


def _reference(p, cols: dict, prov, vocab: int, top_k: int, tail_samples: int, seed: int, extra: dict) -> Reference:
    """The reference to write from the pass's columns ``cols``: its metadata (provenance, the tokenizer's
    fingerprint, the sampling, the reference's own metrics) and the columns as tensors."""
    meta = {
        "schema": f"infoeval/reference/{SCHEMA_VERSION}",
        "provenance": prov.to_json(),
        "tokenizer_fingerprint": vocab_fingerprint(p.loaded.tokenizer),
        "top_k": min(top_k, vocab),
        "tail_samples": tail_samples,
        "seed": seed,
        "tail_seeding": "per window: the window index (seed 0), else SeedSequence(seed, window index), 32 bits",
        "reference": reference_metrics(
            {"nll": -cols["target_logp"], "bytes": cols["bytes"], "entropy": cols["entropy"]}
        ),
        **extra,
    }
    t = {k: torch.from_numpy(v) for k, v in cols.items() if k != "hidden"}
    dist = CompactDist(*(t[f] for f in COMPACT_FIELDS)) if not extra else None
    return Reference(dist, t["token_id"], t["target_logp"], t["entropy"], t["bytes"], p.stream.ids, p.windows, meta)


@torch.inference_mode()
def run_gate(
    gate_settings: GateSettings, model_settings: ModelSettings, reporter: Reporter | None = None
) -> tuple[GateResult, dict]:
    """Run the candidate on the reference's windows; returns (result dict, per-position columns)."""
    reporter = reporter or Reporter()
    ref, baseline, candidate, load_s = open_gate(gate_settings, model_settings, reporter)
    floor_at = (
        floor_windows([w.index for w in ref.windows], 1, gate_settings.floor, gate_settings.floor_seed)
        if candidate[3] is not None
        else ()
    )
    roles, only = floor_roles(candidate, floor_at)
    with progress(
        reporter,
        len(ref.windows) + len(floor_at),
        f"candidate: {counted(len(ref.windows), 'window')}" + (f", floor: {len(floor_at)}" if floor_at else ""),
    ) as bar:
        cols = engine.run(
            roles,
            ref.stream_ids,
            engine.plan(ref.windows),
            ref.meta["provenance"]["protocol"]["prefix_id"],
            gate_reducer(ref, gate_settings.top_k),
            {"top1": np.bool_, f"{FLOOR}/top1": np.bool_, **TOP_COLUMNS, **REFERENCE_TOP_COLUMNS},
            on_forward=bar.step,
            only=only,
        )
    var = {k: cols[k] for k in ("nll", *GATE_COLUMNS, *TOP_COLUMNS, *REFERENCE_TOP_COLUMNS) if k in cols}
    ref_cols = reference_columns(ref)
    metrics = gate_metrics(ref_cols, var)
    verdicts = judge(list(gate_settings.limits), metrics, gate_settings.confidence, gate_settings.point)
    floor = gate_floor(gate_settings, candidate, cols, ref_cols, var, floor_at, np.ones(ref.n, bool))
    verdicts = below_floor(verdicts, floor["metrics_all"] if floor else None)
    base_rows = judge_baseline(
        gate_settings, ref, baseline, metrics, [v.limit.metric for v in verdicts], var, ref_cols, np.ones(ref.n, bool)
    )
    passed = all(v.passed for v in verdicts) and all(r["passed"] for r in base_rows)
    result = gate_result(
        gate_settings,
        ref,
        candidate,
        {"load_s": load_s, "eval_s": bar.seconds},
        passed,
        tuple(v.as_dict() for v in verdicts),
        base_rows,
        metrics,
        floor=floor,
    )
    return result, {
        "reference": ref_cols,
        "variant": var,
        **row_columns(ref, np.arange(ref.n), var, gate_settings.top_k, candidate[1].tokenizer),
    }


def open_gate(gate_settings: GateSettings, model_settings: ModelSettings, reporter: Reporter, check=None):
    """The reference, the baseline's metrics and positions (or None), the loaded candidate (spec, loaded, quantization
    report) and its load time; ``check(ref)`` runs before the candidate is loaded (bad options fail fast)."""
    ref = read_reference(gate_settings.reference)
    baseline = read_baseline(gate_settings.baseline) if gate_settings.baseline else None
    check_top_k(gate_settings.top_k, ref.meta["top_k"])
    if check is not None:
        check(ref)
    reporter.stage("loading candidate")
    t0 = time.perf_counter()
    candidate = _load_candidate(gate_settings, model_settings, ref)
    if ref.hidden is not None:  # the head its logits are made with: the file's, or the candidate's if the same
        ref = dataclasses.replace(ref, head=candidate_head(ref, candidate[1].model))
    return ref, baseline, candidate, time.perf_counter() - t0

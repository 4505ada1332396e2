"""quantize-compare and compress-bits: the reference model, and each fake-quantized variant, on every window
(the lockstep: ``comparison/lockstep.py``; the noise floor beside them: ``comparison/floor.py``)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from infoeval import engine
from infoeval.comparison.floor import floor_block, noise_floor
from infoeval.comparison.frames import compress_frame, summary_frame
from infoeval.comparison.lockstep import (  # noqa: F401  (REFERENCE … VARIANT_COLUMNS, lockstep_reducer: re-exported)
    FLOOR_STATISTICS,
    REF_COLUMNS,
    REFERENCE,
    SHARED_TOKENS,
    TOP_COLUMNS,
    VARIANT_COLUMNS,
    CompareColumns,
    lockstep_reducer,
    run_lockstep,
)
from infoeval.comparison.until import UntilSettings, bpb_ses, budget_windows, check_protocol, evaluate_until, kl_ses
from infoeval.comparison.variants import build_planned, plan_variants
from infoeval.errors import RuntimeFailure, UsageError
from infoeval.input.prepare import Prepared, Reporter, prepare, progress
from infoeval.input.protocols import registered
from infoeval.input.settings import ModelSettings, TextSettings, VariantSettings, WindowSettings
from infoeval.input.tokens import token_texts
from infoeval.measure.column_metrics import reference_metrics, variant_metrics
from infoeval.measure.confidence import confidence_block
from infoeval.measure.frontier import frontier_block
from infoeval.measure.paired import PairedSettings, paired_block
from infoeval.measure.protocol_metrics import protocol_figures
from infoeval.models.objects import ModuleVariant
from infoeval.output.results import Result
from infoeval.quant.floor import FLOOR, FloorVariant

MAX_TOP_K = 100


@dataclass(frozen=True)
class VariantResult:
    name: str
    metrics: dict[str, float]
    quantization: dict  # the scheme and the per-layer report


@dataclass(frozen=True)
class CompareResult(Result):
    """quantize-compare: the reference's metrics and each variant's."""

    reference: dict[str, float]
    variants: tuple[VariantResult, ...]
    protocol_metrics: dict | None = None  # the lm-eval / gptq protocol's own figures, per model
    # --until-se: the target, whether it was reached, the tokens it took (comparison/until.py)
    until_se: dict | None = None
    floor: dict | None = None  # the noise floor: its windows, metrics, and each variant against it (measure/floor.py)
    paired: dict | None = None  # --baseline: every other variant against it, paired verdicts (measure/paired.py)
    # the bits-per-weight against KL frontier: the Pareto-optimal variants (measure/frontier.py)
    frontier: dict | None = None
    # each variant's mean KL and top-1 by the reference's top-1 probability (measure/confidence.py)
    by_confidence: dict | None = None
    FAMILY = "quantize-compare"
    SUMMARY = staticmethod(summary_frame)
    # without --until-se, with --floor off, without --baseline or a second variant
    OMITTED_WHEN_NONE = ("until_se", "floor", "paired", "frontier", "by_confidence")


@dataclass(frozen=True)
class CompressResult(Result):
    """compress-bits: the model's code length and each compressor's, on the same bytes."""

    reference: dict[str, float]
    compressors: tuple[dict, ...]
    model_over_xz: float | None
    protocol_metrics: dict | None = None  # the lm-eval / gptq protocol's own figures
    # --until-se: the target, whether it was reached, the tokens it took (comparison/until.py)
    until_se: dict | None = None
    FAMILY = "compress-bits"
    SUMMARY = staticmethod(compress_frame)
    OMITTED_WHEN_NONE = ("until_se",)  # without --until-se, the same record as before


def _protocol_metrics(p: Prepared, cols: CompareColumns) -> dict | None:
    """lm-eval's or GPTQ's figures for the reference and each variant (None for rolling and llama.cpp)."""
    nll = {REFERENCE: cols.reference["nll"], **{name: v["nll"] for name, v in cols.variants.items()}}
    return protocol_figures(registered(p.protocol.name), p.protocol.layout, p.documents, cols.reference, nll)


def _evaluate(
    p: Prepared,
    variants,
    reporter: Reporter,
    until: UntilSettings | None = None,
    se_of=None,
    top_k: int = 0,
    floor: FloorVariant | None = None,
    floor_at: tuple[int, ...] = (),
) -> tuple[CompareColumns, dict[str, float], Prepared, dict | None]:
    """The lockstep run under a progress bar; returns the columns, its timings (eval_s, and on a CPU how much of
    it the forward passes and the statistics took: ``engine.Clock``), and with ``until`` (a run to a precision:
    ``se_of(columns)`` the watched SEs) ``p`` restricted to the windows used and the ``until_se`` block. With
    ``floor`` the noise floor runs in the same lockstep on the windows ``floor_at``."""
    clock, models = engine.Clock(), 1 + len(variants)
    windows = len(p.windows) if until is None else budget_windows(p, until)
    steps = windows * models + (len(floor_at) if floor is not None else 0)
    label = f"{windows} windows × {models} models" + (
        f" + floor on {len(floor_at)}" if floor is not None and floor_at else ""
    )
    with progress(reporter, steps, label + ("" if until is None else ", until the SE is reached")) as bar:

        def run(windows):
            return run_lockstep(
                p.loaded.model,
                p.stream,
                windows,
                variants,
                p.protocol.prefix_id,
                bar.step,
                clock,
                top_k,
                floor,
                floor_at,
            )

        cols, p, block = (
            (run(p.windows), p, None) if until is None else evaluate_until(p, run, until, se_of, CompareColumns.concat)
        )
    floor_s = (
        {"floor_s": clock.roles.get(FLOOR, 0.0) + clock.roles.get(FLOOR_STATISTICS, 0.0)}
        if floor is not None and clock.measured
        else {}
    )
    return cols, {"eval_s": bar.seconds, **clock.timings(), **floor_s}, p, block


def _vocab(p: Prepared, cols: CompareColumns) -> dict[int, str]:
    """The text of every token the columns name: the scored tokens and every model's top-K."""
    ids = [
        cols.reference["token_id"],
        cols.reference["top_ids"].ravel(),
        *(v["top_ids"].ravel() for v in cols.variants.values()),
    ]
    return token_texts(p.loaded.tokenizer, np.concatenate(ids))


def _checked_text(
    text_settings: TextSettings, window_settings: WindowSettings, until: UntilSettings | None, top_k: int
) -> TextSettings:
    """Before anything loads: --topk in range, and for a run to a precision a protocol that allows it and the
    whole text (its budget is ``until.max_tokens``, not the text's --max-tokens)."""
    if not 0 <= top_k <= MAX_TOP_K:
        raise UsageError(f"--topk {top_k} is not allowed; give 0 (none) to {MAX_TOP_K} tokens per position")
    if until is None:
        return text_settings
    check_protocol(window_settings.protocol)
    return dataclasses.replace(text_settings, max_tokens=None)


def _paired_view(cols: CompareColumns, paired: PairedSettings | None, timings: dict[str, float]) -> dict | None:
    """--baseline: every other variant against it (None without one); its seconds go into ``timings`` as paired_s,
    the verdicts' own cost (the P99's bootstrap most of it)."""
    if not paired:
        return None
    t0 = time.perf_counter()
    view = paired_block(cols.variants, paired, cols.reference["window"])
    timings["paired_s"] = time.perf_counter() - t0
    return view


def quantize_compare(
    model_settings: ModelSettings,
    text_settings: TextSettings,
    window_settings: WindowSettings,
    variant_settings: VariantSettings,
    reporter: Reporter | None = None,
    until: UntilSettings | None = None,
    top_k: int = 0,
    modules: Sequence[ModuleVariant] = (),
    paired: PairedSettings | None = None,
) -> tuple[CompareResult, CompareColumns]:
    """The reference and every variant on the text's windows (``until``: in a seeded order, until every variant's
    mean-KL SE is ≤ the target; then ``text_settings.max_tokens`` is not used: the budget is ``until.max_tokens``;
    ``top_k``: the columns also hold every model's k most likely tokens and their probabilities; ``modules``:
    variants the caller built, run after the schemes' and recipes'; ``paired``: every other variant against the
    baseline it names)."""
    reporter = reporter or Reporter()
    text_settings = _checked_text(text_settings, window_settings, until, top_k)
    plan = plan_variants(variant_settings, modules, paired)  # fail on a bad scheme, name or baseline before loading
    p = prepare(model_settings, text_settings, window_settings, reporter)
    variants, calibration, build_s = build_planned(
        p, plan, variant_settings, modules, model_settings.device_map, reporter
    )
    floor, floor_at = noise_floor(p, variant_settings, 1 + len(variants), until)
    cols, eval_timings, p, block = _evaluate(p, variants, reporter, until, kl_ses, top_k, floor, floor_at)
    if top_k:
        cols.vocab = _vocab(p, cols)
    timings = {**p.timings, **build_s, **eval_timings}
    records = tuple(
        VariantResult(v.name, variant_metrics(cols.reference, cols.variants[v.name]), v.summary()) for v in variants
    )
    paired_view = _paired_view(cols, paired, timings)
    result = CompareResult(
        p.provenance(
            "quantize-compare",
            **({"top_k": top_k} if top_k else {}),
            **({"calibration": calibration.provenance} if calibration else {}),
        ),
        timings,
        reference=reference_metrics(cols.reference),
        variants=records,
        protocol_metrics=_protocol_metrics(p, cols),
        until_se=block,
        floor=floor_block(cols, floor, variant_settings.floor, floor_at, 1 + len(variants)) if floor else None,
        paired=paired_view,
        frontier=frontier_block(
            [{"name": r.name, "metrics": r.metrics, "quantization": r.quantization} for r in records]
        ),
        by_confidence=confidence_block(cols.reference["p_top1"], cols.variants) if cols.variants else None,
    )
    return result, cols


def scored_bytes(p: Prepared) -> bytes:
    """The UTF-8 bytes covered by the scored tokens, in order (the whole scored span for rolling windows)."""
    raw = p.text.text.encode("utf-8")
    starts = np.cumsum(p.stream.nbytes) - p.stream.nbytes
    pieces = []
    for w in p.windows:
        a, b = w.first_target, w.first_target + w.n_scored
        lo = int(starts[a])
        hi = int(starts[b - 1] + p.stream.nbytes[b - 1])
        pieces.append(raw[lo:hi])
    return b"".join(pieces)


def compress_bits(
    model_settings: ModelSettings,
    text_settings: TextSettings,
    window_settings: WindowSettings,
    reporter: Reporter | None = None,
    verify_coding: bool = False,
    until: UntilSettings | None = None,
    top_k: int = 0,
) -> tuple[CompressResult, CompareColumns]:
    """The model's code length and each compressor's on the scored bytes; with ``verify_coding`` also the size of
    a real arithmetic-coded file of those bytes, measured by a round trip (``codec.verify``); with ``until`` the
    windows in a seeded order until the bits/byte SE is ≤ the target (the compressors then get those windows'
    bytes, in text order)."""
    from infoeval.comparison.compressors import compress_all

    reporter = reporter or Reporter()
    text_settings = _checked_text(text_settings, window_settings, until, top_k)
    p = prepare(model_settings, text_settings, window_settings, reporter)
    cols, eval_timings, p, block = _evaluate(p, [], reporter, until, bpb_ses, top_k)
    if top_k:
        cols.vocab = _vocab(p, cols)
    ref = reference_metrics(cols.reference)
    data = scored_bytes(p)
    if len(data) != ref["bytes"]:
        raise RuntimeFailure(f"internal error: {len(data)} scored bytes gathered, {ref['bytes']} counted")
    reporter.stage("compressing")
    rows = compress_all(data)
    if verify_coding:
        from infoeval.codec.verify import arithmetic_coded_row

        reporter.stage("arithmetic coding (round trip)")
        rows.append(arithmetic_coded_row(p.loaded, data, window_settings.ctx, reporter))
    xz_bits = next(r["bits"] for r in rows if r["method"] == "xz -9")
    result = CompressResult(
        p.provenance("compress-bits", **({"top_k": top_k} if top_k else {})),
        {**p.timings, **eval_timings},
        reference=ref,
        compressors=tuple(rows),
        model_over_xz=ref["total_bits"] / xz_bits if xz_bits else None,
        protocol_metrics=_protocol_metrics(p, cols),
        until_se=block,
    )
    return result, cols

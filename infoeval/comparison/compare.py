"""quantize-compare and compress-bits: the reference model, and each fake-quantized variant, on every window
(the lockstep: ``comparison/lockstep.py``; the noise floor beside them: ``comparison/floor.py``)."""

from __future__ import annotations

import dataclasses
import functools
import time

import numpy as np

from infoeval import engine
from infoeval.comparison.floor import floor_block, noise_floor
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
from infoeval.comparison.plans import PlanSettings, choose
from infoeval.comparison.reference_first import evaluate_reference_first
from infoeval.comparison.results import CompareResult, CompressBitsResult, VariantResult
from infoeval.comparison.streamed import evaluate_streamed
from infoeval.comparison.until import UntilSettings, bpb_ses, budget_windows, check_protocol, evaluate_until, kl_ses
from infoeval.comparison.variants import build_planned, plan_variants
from infoeval.engine.stream_layout import FASTEST
from infoeval.errors import RuntimeFailure, UsageError, counted, spell
from infoeval.input.prepare import Prepared, Reporter, prepare, progress
from infoeval.input.protocols import registered
from infoeval.input.request import MAX_TOP_K
from infoeval.input.settings import ModelSettings, TextSettings, WindowSettings
from infoeval.input.tokens import token_texts
from infoeval.measure.column_metrics import reference_metrics, variant_metrics
from infoeval.measure.compressors import scored_bytes  # noqa: F401  (re-exported)
from infoeval.measure.confidence import confidence_block
from infoeval.measure.frontier import frontier_block
from infoeval.measure.paired import PairedSettings, paired_block
from infoeval.measure.protocol_metrics import protocol_figures
from infoeval.quant.floor import FLOOR, FloorVariant
from infoeval.quant.variant_settings import VariantSettings


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
    """The lockstep under a progress bar: the columns, timings (eval_s; on a CPU the forwards' and statistics'),
    with ``until`` (``se_of(columns)``: the watched SEs) ``p`` cut to the windows used and the ``until_se`` block;
    with ``floor`` the noise floor in the same lockstep on the windows ``floor_at``."""
    clock, models = engine.Clock(), 1 + len(variants)
    windows = len(p.windows) if until is None else budget_windows(p, until)
    steps = windows * models + (len(floor_at) if floor is not None else 0)
    label = f"{counted(windows, 'window')} × {counted(models, 'model')}" + (
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
        raise UsageError(f"{spell('top_k')} {top_k} is not allowed; give 0 (none) to {MAX_TOP_K} tokens per position")
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


def _lockstep(p, plan, settings, device_map, reporter, until, top_k) -> tuple:
    """The lockstep's variants, built, and its evaluation: every model at once."""
    variants, calibration, build_s = build_planned(p, plan, settings, device_map, reporter)
    floor, floor_at = noise_floor(p, settings, 1 + len(variants), until)
    cols, eval_timings, p, block = _evaluate(p, variants, reporter, until, kl_ses, top_k, floor, floor_at)
    return p, cols, variants, calibration, {**p.timings, **build_s, **eval_timings}, floor, floor_at, block, {}


def _reference_first(p, plan, settings, device_map, reporter, until, top_k) -> tuple:
    """reference-first's evaluation (``until``: refused before, by ``plans.choose``)."""
    out = evaluate_reference_first(p, plan, settings, device_map, reporter, top_k)
    return p, *out[:3], {**p.timings, **out[3]}, *out[4:], None, {}


def _streamed(p, plan, settings, device_map, reporter, until, top_k, layout=FASTEST) -> tuple:
    """The streamed plan's evaluation (``until``: refused before, by ``plans.choose``); its reads go into the
    memory plan's record."""
    cols, done, calibration, timings, floor, at, reads = evaluate_streamed(p, plan, settings, reporter, top_k, layout)
    return p, cols, done, calibration, {**p.timings, **timings}, floor, at, None, {"stream": reads}


def quantize_compare(
    model_settings: ModelSettings,
    text_settings: TextSettings,
    window_settings: WindowSettings,
    variant_settings: VariantSettings,
    reporter: Reporter | None = None,
    until: UntilSettings | None = None,
    top_k: int = 0,
    paired: PairedSettings | None = None,
    plan_settings: PlanSettings | None = None,
) -> tuple[CompareResult, CompareColumns]:
    """The reference and every variant on the text's windows (``until``: in a seeded order until every variant's
    mean-KL SE is ≤ the target, within ``until.max_tokens``; ``top_k``: also every model's k most likely tokens;
    ``paired``: every other variant against the baseline it names;
    ``plan_settings``: lockstep or reference-first, chosen against a memory budget before loading: ``plans.py``)."""
    reporter = reporter or Reporter()
    text_settings = _checked_text(text_settings, window_settings, until, top_k)
    plan = plan_variants(variant_settings, paired)  # fail on a baseline that names no variant before loading
    tokens = until.max_tokens if until is not None else text_settings.max_tokens
    choice = choose(
        plan_settings or PlanSettings(), model_settings, variant_settings, window_settings.ctx, tokens, until
    )
    p = prepare(model_settings, text_settings, window_settings, reporter, skeleton=choice.plan == "streamed")
    reporter.note(choice.line())
    streamed = functools.partial(_streamed, layout=choice.layout)
    run = {"reference-first": _reference_first, "streamed": streamed}.get(choice.plan, _lockstep)
    p, cols, variants, calibration, timings, floor, floor_at, block, notes = run(
        p, plan, variant_settings, model_settings.device_map, reporter, until, top_k
    )
    if top_k:
        cols.vocab = _vocab(p, cols)
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
        memory_plan=choice.to_json() | notes,
    )
    return result, cols


def compress_bits(
    model_settings: ModelSettings,
    text_settings: TextSettings,
    window_settings: WindowSettings,
    reporter: Reporter | None = None,
    verify_coding: bool = False,
    until: UntilSettings | None = None,
    top_k: int = 0,
) -> tuple[CompressBitsResult, CompareColumns]:
    """The model's code length and each compressor's on the scored bytes; with ``verify_coding`` also the size of
    a real arithmetic-coded file of those bytes, measured by a round trip (``codec.verify``); with ``until`` the
    windows in a seeded order until the bits/byte SE is ≤ the target (the compressors then get those windows'
    bytes, in text order)."""
    from infoeval.measure.compressors import compress_all

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
    result = CompressBitsResult(
        p.provenance("compress-bits", **({"top_k": top_k} if top_k else {})),
        {**p.timings, **eval_timings},
        reference=ref,
        compressors=tuple(rows),
        model_over_xz=ref["total_bits"] / xz_bits if xz_bits else None,
        protocol_metrics=_protocol_metrics(p, cols),
        until_se=block,
    )
    return result, cols

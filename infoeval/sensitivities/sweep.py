"""The sensitivity sweep: every unit quantized alone, measured against the reference on the same windows.

Window by window (through ``engine.run``): the reference's forward pass captures the inputs of the decoder
blocks where units start (``blocks.Capturing``) and its per-row statistics (``infotheory.reference_stats``);
then, for each unit × scheme, the unit's quantized weights are swapped in and the forward runs from the
captured input of the unit's first block (``blocks.FromBlock``; the whole model with ``block_cache=False``),
and ``infotheory.compare`` turns its logits into per-position KL, top-1 and NLL. Only one window's reference
logits and block inputs are alive at a time: memory ≈ (n × V) logits + blocks × (T × hidden) × 4 B
(SmolLM2, ctx 512: 100 MB + at most 30 × 1.2 MB).

Each layer is quantized once per scheme (its integer codes shared by the linear, block and type units that
hold it); a unit's variant is those codes for its layers only.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import torch

from infoeval import engine, switches
from infoeval.engine import blocks
from infoeval.errors import RuntimeFailure, counted
from infoeval.input.prepare import Prepared, Reporter, prepare, progress
from infoeval.input.settings import ModelSettings, TextSettings, WindowSettings
from infoeval.measure.column_metrics import reference_metrics
from infoeval.measure.infotheory import Workspace, chunk_rows, compare, reference_stats
from infoeval.quant import codes
from infoeval.quant.apply import LayerReport, QuantizedVariant, WithVariant
from infoeval.quant.schemes import Scheme
from infoeval.quant.selection import decoder_prefix
from infoeval.sensitivities import proxy as fisher
from infoeval.sensitivities.ranking import spearman
from infoeval.sensitivities.result import SensitivityResult, unit_metrics
from infoeval.sensitivities.units import Unit, enumerate_units

REFERENCE = "reference"
CHECK = "check"  # the last block alone, from its captured input, on the first window: must equal the reference
CHECK_TOL = 1e-4


def pack_layers(model, units: Sequence[Unit], schemes: Sequence[Scheme]) -> dict[str, dict[str, codes.PackedWeight]]:
    """scheme name → layer → its integer codes, every layer of every unit once per scheme."""
    modules = dict(model.named_modules())
    names = list(dict.fromkeys(n for u in units for n in u.layers))
    with torch.no_grad():
        return {s.name: {n: codes.encode(modules[n].weight.data, s) for n in names} for s in schemes}


def unit_variant(model, unit: Unit, scheme: Scheme, packed: dict[str, codes.PackedWeight]) -> QuantizedVariant:
    modules = dict(model.named_modules())
    reports = tuple(LayerReport(n, tuple(modules[n].weight.shape), True, f"unit {unit.name}") for n in unit.layers)
    return QuantizedVariant(scheme, {n: packed[n] for n in unit.layers}, reports)


def _roles(model, jobs, block_cache: bool, n_layers: int) -> dict:
    """The engine roles: the reference (capturing block inputs), one per (unit, scheme) job, and the check."""
    if not block_cache:
        return {REFERENCE: model, **{key: WithVariant(model, v) for key, (u, v) in jobs.items()}}
    ref = blocks.Capturing(model, {u.start for u, _ in jobs.values()} | {n_layers - 1})
    return {
        REFERENCE: ref,
        **{key: blocks.FromBlock(ref, v, u.start) for key, (u, v) in jobs.items()},
        CHECK: blocks.FromBlock(ref, None, n_layers - 1),
    }


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    """``torch.allclose`` (CHECK_TOL) a chunk of rows at a time: its temporaries are each as large as the logits."""
    size = chunk_rows(a)
    return all(
        torch.allclose(a[i : i + size], b[i : i + size], rtol=CHECK_TOL, atol=CHECK_TOL) for i in range(0, len(a), size)
    )


def reducer(keys: Sequence[str], check: bool) -> engine.Reducer:
    """Reference statistics, then each job against them; on the first batch the block path is checked."""
    workspace = Workspace()
    first = []

    def reduce(step: engine.Step) -> dict:
        t = step.targets[0]
        ref_logits = step.logits[REFERENCE]
        if check and not first:
            first.append(True)
            if not _close(step.logits[CHECK][0], ref_logits[0]):
                raise RuntimeFailure(
                    "the forward from a captured block input differs from the model's own forward "
                    "for this architecture; run with --no-block-cache"
                )
        ref = reference_stats(ref_logits[0], t, workspace)
        out = {"ref/nll": ref.nll, "ref/entropy": ref.entropy}
        for key in keys:
            c = compare(ref, step.logits[key][0], t, workspace)
            out |= {f"{key}/kl": c["kl"], f"{key}/top1": c["top1"], f"{key}/nll": c["nll"]}
        return out

    return reduce


def measure(p: Prepared, jobs: dict, block_cache: bool, reporter: Reporter) -> tuple[dict[str, np.ndarray], float]:
    """Per-position columns of the reference and of every job; the seconds the sweep took."""
    model = p.loaded.model
    n_layers = len(blocks.decoder(model).layers) if block_cache else 0
    roles = _roles(model, jobs, block_cache, n_layers)
    batches = engine.plan(p.windows)
    total = len(batches) * (1 + len(jobs)) + block_cache  # + the check of the block path on the first window
    with progress(reporter, total, f"{counted(len(batches), 'window')} × {counted(1 + len(jobs), 'forward')}") as bar:
        cols = engine.run(
            roles,
            p.stream.ids,
            batches,
            p.protocol.prefix_id,
            reducer(list(jobs), block_cache),
            nbytes=p.stream.nbytes,
            on_forward=bar.step,
        )
    return cols, bar.seconds


def _proxy(p: Prepared, units, packed, seed: int, reporter: Reporter) -> tuple[dict, float]:
    batches = engine.plan(p.windows)
    with progress(reporter, len(batches), f"proxy: {len(batches)} backward passes") as bar:
        sums = fisher.fisher_sums(p.loaded.model, p.stream.ids, p.windows, p.protocol.prefix_id, packed, seed, bar.step)
    return sums, bar.seconds


def layers_run_fraction(units: Sequence[Unit], n_layers: int) -> float:
    """Decoder blocks the cached sweep runs, as a fraction of the plain sweep's (every unit from block 0)."""
    return sum(n_layers - u.start for u in units) / max(1, len(units) * n_layers)


def sweep_prepared(
    p: Prepared,
    schemes: Sequence[Scheme],
    by: str = "type",
    units: Sequence[str] = (),
    block_cache: bool = True,
    proxy: bool = True,
    seed: int = 0,
    reporter: Reporter | None = None,
) -> SensitivityResult:
    """The sweep on an already prepared model and text (see ``sweep``)."""
    reporter = reporter or Reporter()
    block_cache = block_cache and not switches.off("blocks")
    schemes = list(schemes)
    model = p.loaded.model
    chosen = enumerate_units(model, by, units)
    reporter.stage("quantizing")
    t0 = time.perf_counter()
    packed = pack_layers(model, chosen, schemes)
    jobs = {
        f"u{i}": (u, unit_variant(model, u, s, packed[s.name]))
        for i, (u, s) in enumerate((u, s) for u in chosen for s in schemes)
    }
    quantize_s = time.perf_counter() - t0
    cpu0 = time.process_time()
    cols, sweep_s = measure(p, jobs, block_cache, reporter)
    sweep_cpu_s = time.process_time() - cpu0  # all threads' CPU seconds: steadier than wall time on a busy machine
    sums, proxy_s = _proxy(p, chosen, packed, seed, reporter) if proxy else (None, 0.0)
    n = int(cols["ref/nll"].size)
    rows = [
        unit_metrics(u, v, cols, key, n, fisher.unit_proxy(sums[v.name], u.layers, n) if sums else None)
        for key, (u, v) in jobs.items()
    ]
    n_layers = len(blocks.decoder(model).layers) if block_cache else None
    return SensitivityResult(
        p.provenance("sensitivity", by=by, units_globs=list(units), block_cache=block_cache, seed=seed),
        {
            **p.timings,
            "quantize_s": quantize_s,
            "sweep_s": sweep_s,
            "sweep_cpu_s": sweep_cpu_s,
            "proxy_s": proxy_s,
            "sweep_s_per_unit": sweep_s / max(1, len(jobs)),
        },
        by=by,
        decoder_prefix=decoder_prefix(model) or "",
        schemes=[s.name for s in schemes],
        block_cache=block_cache,
        layers_run_fraction=layers_run_fraction(chosen, n_layers) if n_layers else 1.0,
        reference=reference_metrics({"nll": cols["ref/nll"], "entropy": cols["ref/entropy"], "bytes": cols["bytes"]}),
        units=tuple(rows),
        proxy=proxy_summary(rows, schemes) if proxy else None,
    )


def proxy_summary(rows: Sequence[dict], schemes: Sequence[Scheme]) -> dict:
    """How well the proxy ranks the units: Spearman's ρ against the direct mean KL, per scheme and overall."""
    per = {}
    for s in schemes:
        mine = [r for r in rows if r["scheme"] == s.name]
        rho, n = spearman([r["proxy"] for r in mine], [r["kl_mean"] for r in mine])
        per[s.name] = {"spearman": rho, "n": n}
    rho, n = spearman([r["proxy"] for r in rows], [r["kl_mean"] for r in rows])
    ratios = [r["proxy"] / r["kl_mean"] for r in rows if r["kl_mean"] > 0]
    return {
        "method": fisher.METHOD,
        "spearman": rho,
        "n": n,
        "per_scheme": per,
        "median_ratio": float(np.median(ratios)) if ratios else None,
    }  # proxy / direct KL: its calibration


def sweep(
    model_settings: ModelSettings,
    text_settings: TextSettings,
    window_settings: WindowSettings,
    schemes: Sequence[Scheme],
    by: str = "type",
    units: Sequence[str] = (),
    block_cache: bool = True,
    proxy: bool = True,
    seed: int = 0,
    reporter: Reporter | None = None,
) -> SensitivityResult:
    """One model load; every unit (``by`` linear, block or type; ``units`` globs keep some) quantized alone with
    each scheme and measured on the windows of the text: mean KL ± SE, P99, top-1 agreement, Δ ln PPL ± SE, and
    (``proxy``) the diagonal-Fisher proxy with its Spearman ρ against the direct KL. Bad options fail before the
    model is loaded."""
    if by not in ("linear", "block", "type"):
        enumerate_units(None, by)  # raises the usage error
    parsed = list(schemes)
    p = prepare(model_settings, text_settings, window_settings, reporter or Reporter())
    return sweep_prepared(p, parsed, by, units, block_cache, proxy, seed, reporter)

"""--plan reference-first: quantize-compare with one model's memory at a time.

    1. the reference alone over every window, keeping its last hidden states (d floats a scored position, in memory,
       or in a temporary file past SPILL_BYTES): its logits are its head applied to them (``gating/hidden.py``)
    2. the variants made from the reference's own weights (schemes, recipes) and the noise floor, lazily
       (``quant/lazy.py``: no codes stored, each layer fake-quantized when a pass needs it), together, window by
       window, against the reference's logits made again from the stored states (``lockstep.stored_logits``)
    3. each variant that is a model of its own (a library method's, a saved checkpoint, a module passed in) alone:
       built, evaluated against the same stored states, let go before the next is built

Every column is computed by the lockstep's own reducer on the same batches, so the numbers are the lockstep's
(float32 rounding at most). The reference's weights stay in memory: the lazy variants, the floor and the methods
are made from them, and a checkpoint shares the tensors equal to them; what the plan saves is every variant's codes
and all but one separate model at a time.
"""

from __future__ import annotations

import gc
import tempfile
import time
from collections.abc import Callable, Sequence

import numpy as np
import torch

from infoeval import distributed, engine, heap
from infoeval.comparison.floor import noise_floor
from infoeval.comparison.lockstep import REFERENCE, CompareColumns, run_lockstep
from infoeval.engine.roles import Headless
from infoeval.engine.states import check_head
from infoeval.errors import counted, spell
from infoeval.input.prepare import progress
from infoeval.input.windows import window_inputs
from infoeval.models.checkpoints import load_checkpoints
from infoeval.models.head import head_of
from infoeval.models.objects import check_variants
from infoeval.quant.apply import build_variants
from infoeval.quant.methods.calibration import for_methods
from infoeval.quant.methods.variant import build_method_variant

STATES = "the reference's last hidden states"
PROBE = 32  # tokens of the first window the head is checked on
SPILL_BYTES = 2 << 30  # states past this size go to a temporary file (memory-mapped) instead of memory


def _store(n: int, d: int, folder: str) -> np.ndarray:
    """An (n, d) float32 array for the states: in memory, or memory-mapped in ``folder`` past SPILL_BYTES."""
    if n * d * 4 <= SPILL_BYTES or distributed.launched():
        return np.empty((n, d), np.float32)
    return np.lib.format.open_memmap(f"{folder}/states.npy", "w+", np.float32, (n, d))


def reference_states(p, on_forward, clock, folder: str) -> np.ndarray:
    """Step 1: the reference's last hidden state of every scored row of ``p``, window by window (each rank its
    windows under a launcher, then gathered: every rank holds them all), its head first checked on the first PROBE
    tokens (``engine.states.check_head``)."""
    model, windows, bos_id = p.loaded.model, p.windows, p.protocol.prefix_id
    probe = window_inputs(p.stream.ids, windows[0], bos_id)[:, :PROBE]
    check_head(
        model,
        head_of(model),
        probe,
        p.loaded.info.architecture,
        f"{spell('plan')} reference-first",
        f"{spell('plan')} lockstep",
    )
    batches = engine.plan(windows)
    n, d = batches[-1].rows.stop if batches else 0, model.get_output_embeddings().weight.shape[1]
    store, launched = _store(n, d, folder), distributed.launched()

    def reduce(step):
        h = step.logits[STATES][0]
        if launched:  # the rows of every rank, through the engine's gather
            return {"hidden": h.float()}
        store[step.batch.rows] = h.float().cpu().numpy()
        return {}

    roles, schema = {STATES: Headless(model)}, {"hidden": np.float32}
    cols = engine.run(roles, p.stream.ids, batches, bos_id, reduce, schema, None, on_forward, clock=clock)
    return cols["hidden"] if launched else store


def run_reference_first(
    p,
    light: Sequence,
    heavy: Sequence[Callable[[], object]],
    on_forward,
    clock,
    top_k: int = 0,
    floor=None,
    floor_at=(),
) -> tuple[CompareColumns, list]:
    """Steps 1–3 over ``p``'s windows: ``light`` the lazy variants (run together, with the floor on ``floor_at``),
    ``heavy`` builders of the other variants (each called, evaluated and let go in turn). Returns the columns and
    the variants as evaluated, in order (a heavy one's model dropped after its pass; its summary kept)."""
    model = p.loaded.model
    with tempfile.TemporaryDirectory(prefix="infoeval-states-") as folder:
        states = (
            reference_states(p, on_forward, clock, folder),
            head_of(model),
        )

        def evaluate(variants, with_floor: bool) -> CompareColumns:
            return run_lockstep(
                model,
                p.stream,
                p.windows,
                variants,
                p.protocol.prefix_id,
                on_forward,
                clock,
                top_k,
                floor if with_floor else None,
                floor_at if with_floor else (),
                stored={REFERENCE: states},
            )

        parts, done = [], list(light)
        if light or floor is not None or not heavy:
            parts.append(evaluate(list(light), True))
        for build in heavy:
            variant = build()
            parts.append(evaluate([variant], False))
            done.append(Evaluated(variant.name, variant.summary()))
            del variant
            gc.collect()
            heap.release_freed_memory()
            if torch.cuda.is_available():  # the next model's placement reads the free memory
                torch.cuda.empty_cache()
    return merged(parts), done


class Evaluated:
    """A variant after its pass: its name and summary (the model it was is gone)."""

    def __init__(self, name: str, summary: dict):
        self.name, self._summary = name, summary

    def summary(self) -> dict:
        return self._summary


def merged(parts: Sequence[CompareColumns]) -> CompareColumns:
    """One set of columns from passes over the same rows: the first's reference and floor, every pass's variants."""
    first = parts[0]
    variants = {name: cols for part in parts for name, cols in part.variants.items()}
    return CompareColumns(first.reference, variants, floor=first.floor)


def _heavy(p, plan, settings, device_map, calibration, seconds: dict) -> list[Callable[[], object]]:
    """Builders of the variants that are models of their own, in the lockstep's order: the methods', the caller's
    modules, the checkpoints (each loaded when its turn comes; their seconds summed into ``checkpoints_load_s``)."""
    model = p.loaded.model

    def method(m):
        return lambda: build_method_variant(
            model, m, settings.include, settings.exclude, p.loaded.tokenizer, calibration
        )

    def checkpoint(c):
        def load():
            t0 = time.perf_counter()
            variant = load_checkpoints([c], p.loaded, device_map)[0]
            seconds["checkpoints_load_s"] = seconds.get("checkpoints_load_s", 0.0) + time.perf_counter() - t0
            return variant

        return load

    return (
        [method(m) for m in plan.methods]
        + [(lambda m=m: m) for m in plan.modules]
        + [checkpoint(c) for c in plan.checkpoints]
    )


def evaluate_reference_first(p, plan, settings, device_map, reporter, top_k: int = 0):
    """quantize-compare's evaluation under reference-first: the lazy variants built (their ``quantize_s``), the
    floor, the three steps under one progress bar. Returns (columns, variants as evaluated, calibration, timings,
    floor, floor_at)."""
    reporter.stage("quantizing")
    t0 = time.perf_counter()
    light = build_variants(p.loaded.model, plan.schemes, plan.recipes, settings.include, settings.exclude, lazy=True)
    calibration = for_methods(plan.methods, settings.calibration, p.text, p.stream, p.loaded.tokenizer)
    seconds = {"quantize_s": time.perf_counter() - t0}
    check_variants(p.loaded, plan.modules)  # before any forward pass
    heavy = _heavy(p, plan, settings, device_map, calibration, seconds)
    models = 1 + len(light) + len(heavy)
    floor, floor_at = noise_floor(p, settings, models, None)
    clock, windows = engine.Clock(), len(p.windows)
    steps = windows * models + (len(floor_at) if floor is not None else 0)
    label = f"{counted(windows, 'window')} × {counted(models, 'model')}, reference first" + (
        f" + floor on {len(floor_at)}" if floor_at else ""
    )
    with progress(reporter, steps, label) as bar:
        cols, done = run_reference_first(p, light, heavy, bar.step, clock, top_k, floor, floor_at)
    timings = {**seconds, "eval_s": bar.seconds, **clock.timings()}
    return cols, done, calibration, timings, floor, floor_at

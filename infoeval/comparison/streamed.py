"""--stream layers (the plan ``streamed``): quantize-compare with no model in memory, each read one decoder layer at a
time from its folder's safetensors (``engine/streaming.py``):

    1. one layer-major pass: every window's inputs captured, then each layer read once and run over every window
       for the reference, each scheme's and recipe's variant (that layer quantized as it is read:
       ``quant/layerwise.py``) and the noise floor (on its windows); then each model's last hidden states
    2. the lockstep's own reducer over every window, each model's logits made again from its stored states by its
       head (``lockstep.run_lockstep(stored=…)``): the same columns, metrics and reports as the lockstep's

Memory: one layer and its quantized copy, every model's hidden states (tokens × hidden), the head; the checkpoint is
read once. A library's method that quantizes one Linear at a time runs its modules in each loaded layer; a method that
calibrates over the whole model, a saved checkpoint and a module passed in (models of their own) are refused with
one line.
"""

from __future__ import annotations

import time

import torch

from infoeval import engine
from infoeval.comparison.floor import floor_at
from infoeval.comparison.lockstep import FLOOR, REFERENCE, run_lockstep
from infoeval.engine.stream_layout import FASTEST
from infoeval.engine.streaming import Role, StreamedModel, last_states
from infoeval.errors import UsageError, counted, spell
from infoeval.input.prepare import progress
from infoeval.quant.layerwise import LayerwiseFloor, LayerwiseMethod, LayerwiseVariant
from infoeval.quant.variant_settings import VariantSettings


def unstreamable(settings: VariantSettings) -> str | None:
    """Why the settings' variants cannot be streamed (a model of their own, or a method that calibrates over the
    whole model), or None."""
    own = [*(c.name for c in settings.checkpoints), *(m.name for m in settings.modules)]
    if own:
        return (
            f"{spell('stream')} layers quantizes each layer as it is read; {', '.join(own)} "
            f"{'is a model' if len(own) == 1 else 'are models'} of its own (use {spell('plan')} reference-first)"
        )
    calibrated = [m.name for m in settings.methods if getattr(m.adapter(), "CALIBRATED", False)]
    if calibrated:
        return (
            f"{spell('stream')} layers cannot run {', '.join(calibrated)}: it calibrates over the whole model (use "
            f"{spell('plan')} reference-first)"
        )
    return None


def evaluate_streamed(p, plan, settings: VariantSettings, reporter, top_k: int = 0, layout=FASTEST):
    """quantize-compare's evaluation under the streamed plan: (columns, the variants as evaluated, no calibration,
    timings, the floor, its windows; ``layout``: the memory plan's, ``engine/stream_layout.py``)."""
    why = unstreamable(settings)
    if why is not None:
        raise UsageError(why)
    loaded = p.loaded
    dtype = next(loaded.model.parameters()).dtype
    streamed = StreamedModel(loaded.info.path, dtype, torch.device(loaded.info.device), loaded.model, layout)
    variants = [LayerwiseVariant(loaded.model, s, settings.include, settings.exclude) for s in plan.schemes]
    variants += [LayerwiseVariant(loaded.model, r, settings.include, settings.exclude) for r in plan.recipes]
    variants += [LayerwiseMethod(loaded.model, m, settings.include, settings.exclude) for m in plan.methods]
    batches = engine.plan(p.windows)
    everything = range(len(batches))
    roles = [Role(REFERENCE, None, everything), *(Role(v.name, v, everything) for v in variants)]
    floor, at = None, ()
    if settings.floor != "off":
        floor = LayerwiseFloor(loaded.model, settings.include, settings.exclude, settings.floor_seed)
        at = floor_at(p, 1 + len(variants), None, settings.floor, settings.floor_seed)
        on = set(at)
        roles.append(Role(FLOOR, floor, [i for i, b in enumerate(batches) if b.windows[0].index in on]))
    layers, clock = len(streamed.decoder.layers), engine.Clock()
    label = (
        f"{counted(len(p.windows), 'window')} × {counted(len(roles), 'model')}, "
        f"{counted(layers, 'layer')} read one at a time"
    )
    with progress(reporter, layers, label) as bar:
        stored = last_states(streamed, p.stream.ids, batches, p.protocol.prefix_id, roles, on_layer=bar.step)
    reporter.stage("statistics")
    t0 = time.perf_counter()
    done = [v.finished() for v in variants]
    cols = run_lockstep(None, p.stream, p.windows, done, p.protocol.prefix_id, None, clock, top_k, floor, at, stored)
    statistics_s = time.perf_counter() - t0
    reads = streamed.reads
    timings = {
        "eval_s": bar.seconds,
        "stream_read_s": reads.read_s,
        "stream_wait_s": reads.wait_s,
        "stream_compute_s": reads.compute_s,
        "statistics_s": statistics_s,
        **clock.timings(),
    }
    record = {"bytes_read": reads.bytes, "storage_read_bytes": reads.storage_bytes, "layers": layers}
    return cols, done, None, timings, floor, at, record

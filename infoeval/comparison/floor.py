"""quantize-compare's noise floor: the floor built on the reference, the windows it runs on and the result's
block (``measure/floor.py`` holds the maths, ``quant/floor.py`` the definition)."""

from __future__ import annotations

import numpy as np

from infoeval.comparison.lockstep import CompareColumns
from infoeval.comparison.until import UntilSettings, budget_windows
from infoeval.input.prepare import Prepared
from infoeval.measure import floor as floor_measure
from infoeval.measure.stopping import visit_order
from infoeval.quant.floor import FloorVariant, build_floor
from infoeval.quant.variant_settings import VariantSettings


def floor_at(p: Prepared, n_models: int, until: UntilSettings | None, mode: str, seed: int) -> tuple[int, ...]:
    """The floor's windows: a seeded share of the run's (``measure/floor.py``), or with ``until`` the first windows
    of its visiting order, which it always evaluates."""
    if until is None:
        return floor_measure.floor_windows([w.index for w in p.windows], n_models, mode, seed)
    order = visit_order(len(p.windows), until.seed, until.order)[: budget_windows(p, until)]
    return floor_measure.floor_windows([p.windows[i].index for i in order], n_models, mode, seed, first=True)


def noise_floor(
    p: Prepared, settings: VariantSettings, n_models: int, until: UntilSettings | None
) -> tuple[FloorVariant | None, tuple[int, ...]]:
    """The noise floor built on the reference (None with --floor off) and the windows it runs on (``floor_at``)."""
    if settings.floor == "off":
        return None, ()
    floor = build_floor(p.loaded.model, settings.include, settings.exclude, settings.floor_seed)
    return floor, floor_at(p, n_models, until, settings.floor, settings.floor_seed)


def floor_block(cols: CompareColumns, floor: FloorVariant, mode: str, floor_at: tuple[int, ...], n_models: int) -> dict:
    """The result's floor: how it was made, the windows and positions it ran on, its metrics, and every variant
    read against it (× floor, the paired difference, at floor)."""
    rows = floor_measure.floor_rows(cols.reference["window"], floor_at)
    visited = sorted({int(w) for w in np.unique(cols.reference["window"][rows])})
    block = {
        "mode": mode,
        **floor.summary(),
        "windows": visited,
        "windows_of_run": int(np.unique(cols.reference["window"]).size),
        "models_of_run": n_models,
    }
    if not rows.any():
        return block | {"metrics": None, "variants": {}}
    windows = cols.reference["window"]
    m = floor_measure.floor_metrics(cols.floor, rows, windows)
    versus = {
        name: floor_measure.versus_floor(v["kl"], cols.floor["kl"], rows, m["kl_mean"], windows)
        for name, v in cols.variants.items()
    }
    return block | {"metrics": m, "variants": versus}

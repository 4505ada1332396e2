"""The gate's noise floor: the reference's model with its weights moved by one bfloat16 rounding step
(``quant/floor.py``, made by ``candidate.load_candidate``), run beside the candidate on a seeded share of the
reference's windows and held against the reference file exactly as the candidate is; its block in the result,
whose every-metric figures (``metrics_all``) the limits are held against (``limits.below_floor``)."""

from __future__ import annotations

import numpy as np

from infoeval.gating.columns import CANDIDATE, GATE_COLUMNS, gate_metrics
from infoeval.measure.floor import floor_metrics, floor_rows, versus_floor
from infoeval.quant.floor import FLOOR


def floor_roles(candidate: tuple, floor_at) -> tuple[dict, dict]:
    """The engine's roles of a gate (the candidate, and the noise floor where there is one) and ``only``."""
    roles = {CANDIDATE: candidate[1].model}
    if candidate[3] is None or not len(floor_at):
        return roles, {}
    return {**roles, FLOOR: candidate[3]}, {FLOOR: frozenset(int(i) for i in floor_at)}


def gate_floor(
    gate_settings, candidate: tuple, cols: dict, ref_cols: dict, var: dict, floor_at, used: np.ndarray
) -> dict | None:
    """The result's floor block (None with --floor off): how it was made, the windows it ran on, its metrics
    (``metrics``: mean KL ± SE, P99, top-1 disagreement; ``metrics_all``: every gate metric of the floor, which
    the limits are held against), and the candidate against it (× floor, the paired difference, at floor).
    ``used``: the rows the gate judged (a sequential gate's windows used)."""
    if candidate[3] is None:
        return None
    rows = floor_rows(cols["window"], floor_at) & used
    block = {
        "mode": gate_settings.floor,
        **candidate[3].variant.summary(),
        "windows": sorted({int(w) for w in cols["window"][rows]}),
    }
    if not rows.any() or f"{FLOOR}/kl" not in cols:
        return block | {"metrics": None, "metrics_all": None, "candidate": None}
    fcols = {k: cols[f"{FLOOR}/{k}"][rows] for k in ("nll", *GATE_COLUMNS)}
    m = floor_metrics({"kl": cols[f"{FLOOR}/kl"], "top1": cols[f"{FLOOR}/top1"]}, rows, cols["window"])
    all_metrics = gate_metrics({k: v[rows] for k, v in ref_cols.items()}, fcols)
    versus = versus_floor(var["kl"][used], cols[f"{FLOOR}/kl"][used], rows[used], m["kl_mean"], cols["window"][used])
    return block | {"metrics": m, "metrics_all": all_metrics, "candidate": versus}

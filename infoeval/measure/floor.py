"""The noise floor's numbers: which windows it runs on, its metrics, and each variant read against it.

The floor is a variant no user could tell from the reference (``quant/floor.py`` states it); its KL is the
resolution of the run: what a change that cannot matter shows, in this run's dtype, device and text.

Windows (``floor_windows``): ``full`` every window; ``sampled`` (the default) a seeded share of them, at least
``MIN_WINDOWS``, as many as keep the floor's forward passes within ``FORWARD_SHARE`` (8 %) of the run's, so that
with its weights made at each pass and its statistics it stays within 10 % of the run's wall time: with M models
in the run (the reference and its variants) and the floor on k of n windows, its share of the forward passes is
k / (n·M + k) ≤ 0.08 when k ≤ n·M · 2/23; ``off`` none.

Against the floor (``versus_floor``): "× floor" is the variant's mean KL over the floor's mean KL (both on all
their positions); "at floor" holds where the variant's mean paired difference from the floor, on the floor's
positions, is within ``AT_FLOOR_SE`` batch-means standard errors of 0 (d̄ ≤ 2·SE(d)): there the run cannot tell
the variant from a checkpoint no user could tell from the reference.
"""

from __future__ import annotations

import numpy as np

from infoeval.measure.stats import mean_se, quantile

MIN_WINDOWS = 2
FORWARD_SHARE = 0.08  # the floor's largest share of the run's forward passes in the default mode (10 % of the wall
# time with the rest of its cost: SmolLM2's default run measured 11 % at a 10 % share of the forward passes)
AT_FLOOR_SE = 2.0


def sampled_count(n_windows: int, n_models: int) -> int:
    """Windows of a sampled floor: ⌊n·M · 2/23⌋ (its share of the forward passes ≤ 8 %), at least 2, at most n.

    >>> sampled_count(16, 4), sampled_count(100, 2), sampled_count(3, 1), sampled_count(1, 4)
    (5, 17, 2, 1)
    """
    k = int(n_windows * n_models * FORWARD_SHARE / (1 - FORWARD_SHARE) + 1e-9)
    return min(n_windows, max(MIN_WINDOWS, k))


def floor_windows(indices, n_models: int, mode: str, seed: int = 0, first: bool = False) -> tuple[int, ...]:
    """The window indices the floor runs on (sorted), out of ``indices`` (the run's windows); ``n_models``: the
    run's models without the floor. The sample depends on the seed and the windows only, so every rank draws the
    same one. ``first``: take the first ones of ``indices`` as given (a run to a precision's seeded visiting
    order, whose first windows it always evaluates) instead of drawing them.

    >>> floor_windows(range(8), 4, "full"), floor_windows(range(8), 4, "off")
    ((0, 1, 2, 3, 4, 5, 6, 7), ())
    >>> floor_windows(range(8), 4, "sampled", seed=0) == floor_windows(range(8), 4, "sampled", seed=0)
    True
    """
    indices = [int(i) for i in indices]
    if mode == "off" or not indices:
        return ()
    if mode == "full":
        return tuple(sorted(indices))
    k = sampled_count(len(indices), n_models)
    picked = range(k) if first else np.random.default_rng(seed).choice(len(indices), size=k, replace=False)
    return tuple(sorted(indices[i] for i in picked))


def floor_rows(window_column: np.ndarray, windows) -> np.ndarray:
    """The rows (positions) of the columns that belong to the floor's windows: a boolean mask."""
    return np.isin(window_column, np.asarray(list(windows), dtype=np.int64))


def floor_metrics(floor_cols: dict, rows: np.ndarray, windows: np.ndarray) -> dict:
    """The floor's mean KL ± SE, P99 and top-1 disagreement ± SE on its rows (``windows``: every row's window, the
    SEs' batches)."""
    kl = floor_cols["kl"][rows].astype(np.float64)
    disagree = 1.0 - floor_cols["top1"][rows].astype(np.float64)
    kl_mean, kl_se = mean_se(kl, windows[rows])
    d_mean, d_se = mean_se(disagree, windows[rows])
    return {
        "kl_mean": kl_mean,
        "kl_se": kl_se,
        "kl_p99": quantile(kl, 0.99),
        "top1_disagree": d_mean,
        "top1_disagree_se": d_se,
        "positions": int(rows.sum()),
    }


def versus_floor(
    variant_kl: np.ndarray, floor_kl: np.ndarray, rows: np.ndarray, floor_mean: float, windows: np.ndarray
) -> dict:
    """A variant read against the floor: "× floor" (its mean KL over the floor's), and its paired difference from
    the floor on the floor's rows, d = KL_variant − KL_floor: mean, SE (batches of whole ``windows``), and "at
    floor" (d̄ ≤ 2·SE(d))."""
    d_mean, d_se = mean_se(variant_kl[rows].astype(np.float64) - floor_kl[rows].astype(np.float64), windows[rows])
    ratio = float(variant_kl.astype(np.float64).mean() / floor_mean) if floor_mean > 0 else None
    return {
        "x_floor": ratio,
        "floor_diff": d_mean,
        "floor_diff_se": d_se,
        "at_floor": bool(d_mean <= AT_FLOOR_SE * d_se),
    }

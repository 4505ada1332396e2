"""The numbers behind the page's plots, from per-position columns: the empirical CDF at a few hundred points, a
histogram on log-spaced bins, means of y in quantile bins of x, and means per group (window, context length).
Pure numpy; each is checked against a brute-force count in the tests."""

from __future__ import annotations

import numpy as np


def ecdf_points(x, points: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """(values, F(values)) of the empirical CDF F(v) = #{x ≤ v} / n at up to ``points`` of the sorted values
    (the smallest and the largest among them), exact where ties are."""
    s = np.sort(np.asarray(x, dtype=np.float64))
    if not len(s):
        return s, s
    idx = np.unique(np.round(np.linspace(0, len(s) - 1, min(points, len(s)))).astype(np.int64))
    v = s[idx]
    return v, np.searchsorted(s, v, side="right") / len(s)


def log_histogram(x, bins: int = 40, floor: float = 1e-6) -> tuple[np.ndarray, np.ndarray]:
    """(edges, share of the values per bin) on ``bins`` log-spaced bins from the smallest value above ``floor``
    (values below go to the first bin) to the largest; the shares sum to 1."""
    x = np.asarray(x, dtype=np.float64)
    if not len(x):
        return np.array([floor, 10 * floor]), np.zeros(1)
    lo = max(floor, float(x[x > floor].min()) if (x > floor).any() else floor)
    hi = max(float(x.max()), lo * 10)
    edges = np.geomspace(lo, hi, bins + 1)
    counts, _ = np.histogram(np.clip(x, lo, hi), edges)
    return edges, counts / len(x)


def binned_stats(x, y, bins: int = 20) -> dict[str, np.ndarray]:
    """Means of x and y, y's 90th percentile and the count in each of up to ``bins`` quantile bins of x (bins
    that equal quantiles make empty are left out)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    edges = np.unique(np.quantile(x, np.linspace(0, 1, bins + 1))) if len(x) else np.zeros(1)
    which = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, max(len(edges) - 2, 0))
    out = {"x": [], "mean": [], "p90": [], "count": []}
    for b in np.unique(which):
        sel = which == b
        out["x"].append(x[sel].mean())
        out["mean"].append(y[sel].mean())
        out["p90"].append(np.quantile(y[sel], 0.9))
        out["count"].append(int(sel.sum()))
    return {k: np.asarray(v) for k, v in out.items()}


def group_means(groups, y) -> tuple[np.ndarray, np.ndarray]:
    """(each group id in order, the mean of y over its rows) for integer ids such as the window index."""
    groups, y = np.asarray(groups, dtype=np.int64), np.asarray(y, dtype=np.float64)
    ids, inverse = np.unique(groups, return_inverse=True)
    return ids, np.bincount(inverse, weights=y, minlength=len(ids)) / np.bincount(inverse, minlength=len(ids))

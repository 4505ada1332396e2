"""Rank statistics, pure numpy: average ranks with ties and Spearman's rank correlation.

Spearman's ρ is Pearson's r of the two variables' ranks; tied values share the mean of the ranks they span
(``average_ranks([10, 20, 20, 30]) = [1, 2.5, 2.5, 4]``), so ρ is defined with ties too (the 1 − 6Σd²/(n(n²−1))
shortcut is not, and is not used). Pairs where either value is NaN are dropped.
"""

from __future__ import annotations

import numpy as np

from infoeval.measure.stats import pearson


def average_ranks(x) -> np.ndarray:
    """Ranks 1 … n of ``x`` (ascending), ties sharing the mean of their ranks.

    >>> average_ranks([30.0, 10.0, 20.0, 20.0]).tolist()
    [4.0, 1.0, 2.5, 2.5]
    """
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="mergesort")
    s = x[order]
    ranks = np.empty(x.size, dtype=np.float64)
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])  # first index of each run of equal values
    ends = np.r_[starts[1:], x.size]
    for a, b in zip(starts, ends):
        ranks[order[a:b]] = (a + b + 1) / 2.0  # mean of ranks a+1 … b
    return ranks


def spearman(x, y) -> tuple[float, int]:
    """Spearman's ρ of ``x`` and ``y`` and the number of pairs used (NaN when fewer than 2 or a constant side).

    >>> spearman([1.0, 2.0, 3.0, 4.0], [10.0, 30.0, 20.0, 40.0])[0]  # doctest: +ELLIPSIS
    0.8...
    """
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    ok = ~(np.isnan(x) | np.isnan(y))
    return pearson(average_ranks(x[ok]), average_ranks(y[ok]))

"""Aggregates of per-position numbers: mean ± standard error, quantiles, Pinsker's check, Pearson's r, and
Pearson's χ² goodness-of-fit test; Student's t quantile; the one ``LN2`` (nats → bits).

Standard errors of a mean over a text's positions (``se``, ``mean_se``, ``mean_cov``) allow for the
correlation of neighbouring positions (a hard passage raises the KL of many consecutive tokens): they are
**batch means** over consecutive batches in the columns' order (Flegal & Jones 2010; the non-overlapping
batch-means estimator of MCMC output analysis), with the variance of the mean the cluster-robust one with the
batches as clusters, G/(G−1) · Σ_g (S_g − n_g·x̄)² / n². A batch is a run of **whole windows** (``windows``:
each position's window) of at least ⌊√n⌋ positions, never shorter than a window: every window restarts its
context, so a per-position series has a window-periodic structure and stays correlated for a few hundred tokens,
and batches of ⌊√n⌋ positions inside a window (what the SEs used before) underestimate its SE by about a quarter
on the default run (docs/metrics.md). Intervals and bounds from these SEs use Student's t with G − 1 degrees of
freedom. Without windows (or when they make fewer than two batches), batches are ⌊√n⌋ consecutive positions. On
independent positions either is the plain sd/√n within sampling noise (√(2/G) relative). ``iid_se`` /
``iid_mean_se`` are the plain sd/√n that treats positions as independent: llama.cpp's figures keep it
(``llamacpp_*`` keys), and means over independent units (mutual-info's text blocks) use it. Quantiles
interpolate linearly between order statistics (NumPy's default). docs/metrics.md says why this estimator and what
it assumes.
"""

from __future__ import annotations

import math

import numpy as np

LN2 = math.log(2.0)
PINSKER_TOL = 1e-6  # nats: float32 rounding of KL summed over a 49k vocabulary is ~1e-7
MIN_BLOCKS = 10  # below this many blocks the SE is itself too uncertain for a normal quantile: Student's t

# what every result's JSON records about its standard errors (``standard_errors``)
SE_METHOD = {
    "estimator": "batch means",
    "blocks": "runs of whole consecutive windows, each of at least floor(sqrt(n)) positions (the last, short run "
    "joins the one before); with fewer than two windows, floor(sqrt(n)) consecutive positions",
    "variance": "G/(G-1) * sum_g (S_g - n_g*mean)^2 / n^2 (cluster-robust, the batches as clusters)",
    "small_sample": "the gate's bounds use Student's t with G-1 degrees of freedom; every metrics record gives its "
    "se_block (mean positions per batch) and se_blocks (G)",
    "llamacpp": "keys named llamacpp_*_se and same_top_se are llama.cpp's own sd/sqrt(n) (positions as independent)",
}


def block_length(n: int) -> int:
    """The least positions per batch of the batch-means SE: ⌊√n⌋ (1 for n < 4).

    >>> block_length(8192), block_length(100), block_length(3)
    (90, 10, 1)
    """
    return max(1, math.isqrt(max(int(n), 0)))


def block_labels(n: int, windows: np.ndarray | None = None) -> np.ndarray:
    """The batch of each of n positions (module docstring). With ``windows`` (each position's window, in the
    columns' order): runs of whole consecutive windows of at least ⌊√n⌋ positions, the last, short run joined to
    the one before. Without windows, or when they make fewer than two batches: G = ⌊n/B⌋ consecutive blocks whose
    lengths differ by at most one.

    >>> block_labels(10).tolist()  # B = 3, G = 3 blocks of 4, 3, 3
    [0, 0, 0, 0, 1, 1, 1, 2, 2, 2]
    >>> block_labels(10, np.array([0, 0, 1, 1, 1, 1, 2, 2, 3, 3])).tolist()  # B = 3: windows {0, 1}, {2, 3}
    [0, 0, 0, 0, 0, 0, 1, 1, 1, 1]
    """
    if windows is not None:
        windows = np.asarray(windows).ravel()
        if windows.size != n:
            raise ValueError(f"{n} positions but {windows.size} window labels")
        starts = np.flatnonzero(np.r_[True, windows[1:] != windows[:-1]]) if n else np.zeros(0, dtype=np.int64)
        labels = _window_batches(n, starts) if starts.size >= 2 else None
        if labels is not None and labels[-1] >= 1:  # at least two batches
            return labels
    g = max(1, n // block_length(n)) if n else 0
    return (np.arange(n, dtype=np.int64) * g) // max(n, 1)


def _window_batches(n: int, starts: np.ndarray) -> np.ndarray:
    """Batch labels from the first position of each window run: whole runs gathered until a batch holds ⌊√n⌋."""
    least, lengths = block_length(n), np.diff(np.r_[starts, n])
    batch_of_run, batch, held = np.empty(lengths.size, dtype=np.int64), 0, 0
    for i, length in enumerate(lengths):
        batch_of_run[i], held = batch, held + int(length)
        if held >= least:
            batch, held = batch + 1, 0
    if held and batch > 0:  # the last, short run joins the one before
        batch_of_run[batch_of_run == batch] = batch - 1
    return np.repeat(batch_of_run, lengths)


def mean_cov(x: np.ndarray, y: np.ndarray, windows: np.ndarray | None = None) -> float:
    """Covariance of the two means x̄ and ȳ of paired per-position series (the columns' order), by batch means
    over the batches of ``block_labels(n, windows)``: G/(G−1) · Σ_g (S^x_g − n_g·x̄)(S^y_g − n_g·ȳ) / n². NaN for
    n < 2. ``mean_cov(x, x)`` is SE(x̄)².

    >>> round(mean_cov(np.array([1.0, 2.0, 3.0, 4.0]), np.array([1.0, 2.0, 3.0, 4.0])), 4)  # blocks {1,2}, {3,4}
    1.0
    """
    x = np.asarray(x, dtype=np.float64).ravel()
    y = np.asarray(y, dtype=np.float64).ravel()
    if x.shape != y.shape:
        raise ValueError(f"paired series differ in length: {x.size} vs {y.size}")
    return _grouped_cov(x, y, block_labels(x.size, windows)) if x.size >= 2 else float("nan")


def _grouped_cov(x: np.ndarray, y: np.ndarray, labels: np.ndarray) -> float:
    """G/(G−1) · Σ_g (S^x_g − n_g·x̄)(S^y_g − n_g·ȳ) / n² over the groups ``labels`` (0 … G−1); NaN for G < 2."""
    n, g = x.size, int(labels.max()) + 1 if labels.size else 0
    if g < 2:
        return float("nan")
    sizes = np.bincount(labels, minlength=g).astype(np.float64)
    rx = np.bincount(labels, weights=x, minlength=g) - sizes * (x.sum() / n)
    ry = np.bincount(labels, weights=y, minlength=g) - sizes * (y.sum() / n)
    return float(g / (g - 1) * float(rx @ ry) / (n * n))


def cluster_se(x: np.ndarray, clusters: np.ndarray) -> float:
    """SE of the mean over whole clusters (e.g. windows drawn at random): the cluster-robust G/(G−1) · Σ_g (S_g −
    n_g·x̄)² / n², with positions correlated in any way inside a cluster. Equal clusters: sd of their means / √G.
    NaN with fewer than 2 clusters.

    >>> round(cluster_se(np.array([1.0, 2.0, 3.0, 4.0, 10.0, 12.0]), np.array([0, 0, 0, 1, 1, 1])), 4)  # means 2, 8.67
    3.3333
    """
    x = np.asarray(x, dtype=np.float64).ravel()
    _, labels = np.unique(np.asarray(clusters).ravel(), return_inverse=True)
    v = _grouped_cov(x, x, labels)
    return math.sqrt(max(v, 0.0)) if v == v else float("nan")


def se(x: np.ndarray, windows: np.ndarray | None = None) -> float:
    """Standard error of the mean of a per-position series, by batch means over whole ``windows`` (module
    docstring); NaN for n < 2. On 4 positions: blocks of 2, and the SE of the two block means.

    >>> round(se(np.array([1.0, 2.0, 3.0, 4.0])), 4)  # block means 1.5 and 3.5: sd/√2 = √2/√2
    1.0
    """
    v = mean_cov(x, x, windows)
    return math.sqrt(max(v, 0.0)) if v == v else float("nan")


def se_blocks(n: int, windows: np.ndarray | None = None) -> dict[str, int]:
    """The mean positions per batch and the batch count G behind the SE of a mean over n positions (for the
    metrics records; bounds use Student's t with G − 1 degrees of freedom).

    >>> se_blocks(8192), se_blocks(8192, np.repeat(np.arange(16), 512))
    ({'se_block': 90, 'se_blocks': 91}, {'se_block': 512, 'se_blocks': 16})
    """
    labels = block_labels(n, windows)
    g = int(labels.max()) + 1 if n else 0
    by_windows = windows is not None and g >= 2 and not np.array_equal(labels, block_labels(n))
    return {"se_block": round(n / g) if by_windows else block_length(n) if n else 0, "se_blocks": g}


def iid_se(x: np.ndarray) -> float:
    """Standard error of the mean with positions treated as independent, sd/√n (NaN for n < 2).

    >>> round(iid_se(np.array([1.0, 2.0, 3.0])), 4)
    0.5774
    """
    x = np.asarray(x, dtype=np.float64)
    return float(np.std(x, ddof=1) / math.sqrt(x.size)) if x.size > 1 else float("nan")


def quantile(x: np.ndarray, q: float) -> float:
    return float(np.quantile(x, q))


def mean_se(x: np.ndarray, windows: np.ndarray | None = None) -> tuple[float, float]:
    """Mean and its batch-means standard error ``se`` over whole ``windows`` (NaN SE for n < 2; NaN mean for n = 0)."""
    x = np.asarray(x, dtype=np.float64).ravel()
    if x.size == 0:
        return float("nan"), float("nan")
    return float(x.mean()), se(x, windows)


def iid_mean_se(x: np.ndarray) -> tuple[float, float]:
    """Mean and sd/√n, the SE of a mean over independent units (llama.cpp's, or mutual-info's blocks)."""
    x = np.asarray(x, dtype=np.float64).ravel()
    if x.size == 0:
        return float("nan"), float("nan")
    return float(x.mean()), iid_se(x)


def t_quantile(p: float, df: float) -> float:
    """Student's t quantile: the t with P(T_df ≤ t) = p (df > 0, 0 < p < 1), by bisection on the CDF
    I_{df/(df+t²)}(df/2, ½) (the regularized incomplete beta, as a continued fraction).

    >>> round(t_quantile(0.95, 1), 4), round(t_quantile(0.95, 10), 4), round(t_quantile(0.975, 30), 4)
    (6.3138, 1.8125, 2.0423)
    """
    if not (0.0 < p < 1.0) or not df > 0:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df > 0, got p={p}, df={df}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while _t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _t_cdf(mid, df) < p else (lo, mid)
        if hi - lo <= 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


def _t_cdf(t: float, df: float) -> float:
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b) (Numerical Recipes' betai/betacf, modified Lentz)."""
    if x <= 0.0 or x >= 1.0:
        return 0.0 if x <= 0.0 else 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x > (a + 1.0) / (a + b + 2.0):
        return 1.0 - _betainc(b, a, 1.0 - x)
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    f = d
    for m in range(1, 500):
        for num in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            f *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return front * f / a


def pinsker(tv: np.ndarray, kl: np.ndarray, tol: float = PINSKER_TOL) -> dict:
    """Check TV ≤ √(KL/2) at every position, as 2·TV² ≤ KL + tol (tol absorbs float32 rounding of KL).

    Returns the number of violations, the tolerance, and the largest ratio TV / √(KL/2) among positions with
    KL > 1e-4 (how tight the bound gets; ≤ 1 always).

    >>> pinsker(np.array([0.4]), np.array([0.5108]))["violations"]
    0
    """
    tv = np.asarray(tv, dtype=np.float64)
    kl = np.asarray(kl, dtype=np.float64)
    bad = 2.0 * tv**2 > kl + tol
    big = kl > 1e-4
    ratio = float((tv[big] / np.sqrt(kl[big] / 2.0)).max()) if big.any() else float("nan")
    return {"violations": int(bad.sum()), "checked": int(tv.size), "tol_nats": tol, "max_ratio": ratio}


def pearson(x: np.ndarray, y: np.ndarray) -> tuple[float, int]:
    """Pearson correlation r of x and y and the number of pairs n (NaN when either is constant or n < 2).

    >>> pearson(np.array([1.0, 2.0, 3.0]), np.array([2.0, 4.0, 7.0]))[0]  # doctest: +ELLIPSIS
    0.9933...
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n = int(x.size)
    if n < 2:
        return float("nan"), n
    dx, dy = x - x.mean(), y - y.mean()
    den = math.sqrt(float((dx * dx).sum()) * float((dy * dy).sum()))
    return (float((dx * dy).sum()) / den if den > 0 else float("nan")), n


def chi2_sf(stat: float, df: int) -> float:
    """P(χ²_df ≥ stat) = Q(df/2, stat/2), the regularized upper incomplete gamma function (torch.special.gammaincc).

    >>> round(chi2_sf(3.841458820694124, 1), 6)  # the 95th percentile of χ²₁
    0.05
    """
    if df < 1:
        return float("nan")  # a single cell: nothing to test
    if not math.isfinite(stat):
        return 0.0
    import torch  # here, so that the aggregates (and the no-torch reports that read them) load without torch

    q = torch.special.gammaincc(
        torch.tensor(df / 2.0, dtype=torch.float64), torch.tensor(stat / 2.0, dtype=torch.float64)
    )
    return float(q)


def chi_square(observed: np.ndarray, probs: np.ndarray) -> dict:
    """Pearson's goodness-of-fit test of counts ``observed`` against cell probabilities ``probs`` (summing to 1):
    χ² = Σ (O − E)² / E with E = N·prob, df = cells − 1, p = P(χ²_df ≥ χ²). A cell with E = 0 and O > 0 gives
    χ² = ∞ and p = 0.

    >>> r = chi_square(np.array([30, 70]), np.array([0.5, 0.5]))
    >>> r["stat"], r["df"], round(r["p_value"], 6)  # (30−50)²/50 · 2 = 16
    (16.0, 1, 6.3e-05)
    """
    o = np.asarray(observed, dtype=np.float64)
    e = np.asarray(probs, dtype=np.float64) * o.sum()
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(e > 0, (o - e) ** 2 / np.where(e > 0, e, 1.0), np.where(o > 0, np.inf, 0.0))
    stat = float(terms.sum())
    df = int(o.size - 1)
    return {"stat": stat, "df": df, "p_value": chi2_sf(stat, df)}

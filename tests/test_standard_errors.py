"""The standard error of a mean over a text's positions (``infoeval.measure.stats``: batch means over blocks of ⌊√n⌋
consecutive positions, or whole windows of at least as many) against brute force and closed forms: the formula written
out with loops, equal blocks = the SE of the block means, coverage of 95 % intervals on AR(1) series with a known
long-run variance (where sd/√n under-covers), i.i.d. series (where it equals sd/√n), Student's t quantiles, and the
gate's switch to t with few blocks. Seeded, no model, a few seconds."""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest

from infoeval.gating.limits import Limit, judge
from infoeval.measure import stats
from infoeval.measure.stats import block_labels, block_length, iid_se, mean_cov, mean_se, se, se_blocks, t_quantile


def _brute_mean_cov(x, y):
    """Batch means written out: G = ⌊n/⌊√n⌋⌋ blocks, position i in block ⌊i·G/n⌋, the cluster formula."""
    n = len(x)
    b = int(math.floor(math.sqrt(n)))
    g = n // b
    blocks: dict[int, list[int]] = {}
    for i in range(n):
        blocks.setdefault(i * g // n, []).append(i)
    mx, my = sum(x) / n, sum(y) / n
    total = 0.0
    for idx in blocks.values():
        total += (sum(x[i] for i in idx) - len(idx) * mx) * (sum(y[i] for i in idx) - len(idx) * my)
    return g / (g - 1) * total / n**2


def _ar1(rho: float, n: int, reps: int, seed: int) -> np.ndarray:
    """``reps`` stationary AR(1) series of length n, mean 0, unit innovation variance."""
    rng = np.random.default_rng(seed)
    e = rng.standard_normal((n, reps))
    x = np.empty_like(e)
    x[0] = e[0] / math.sqrt(1.0 - rho * rho)
    for i in range(1, n):
        x[i] = rho * x[i - 1] + e[i]
    return x.T


def _long_run_se(rho: float, n: int) -> float:
    """SE of the mean of a long AR(1) series: √(σ²(1+ρ)/(1−ρ)/n), σ² = 1/(1−ρ²) the marginal variance."""
    return math.sqrt(1.0 / (1.0 - rho * rho) * (1.0 + rho) / (1.0 - rho) / n)


def test_doctests():
    assert doctest.testmod(stats, raise_on_error=False).failed == 0


@pytest.mark.parametrize("n", [2, 3, 10, 37, 100, 1000])
def test_mean_cov_equals_the_formula_written_out(n):
    rng = np.random.default_rng(n)
    x = rng.lognormal(size=n)
    y = 0.5 * x + rng.normal(size=n)
    assert mean_cov(x, y) == pytest.approx(_brute_mean_cov(x.tolist(), y.tolist()), rel=1e-10)
    assert se(x) == pytest.approx(math.sqrt(_brute_mean_cov(x.tolist(), x.tolist())), rel=1e-10)
    assert mean_se(x) == (pytest.approx(x.mean(), rel=1e-12), se(x))


def test_blocks_are_consecutive_and_equal_within_one():
    for n in (2, 5, 99, 100, 101, 8192, 113108):
        labels = block_labels(n)
        sizes = np.bincount(labels)
        assert (np.diff(labels) >= 0).all() and labels[0] == 0  # consecutive, in text order
        assert sizes.max() - sizes.min() <= 1 and sizes.size == n // block_length(n) == se_blocks(n)["se_blocks"]
        assert block_length(n) == math.isqrt(n) == se_blocks(n)["se_block"]
    assert block_labels(0).size == 0 and math.isnan(se(np.array([1.0]))) and math.isnan(mean_se(np.array([]))[0])


def test_equal_blocks_give_the_se_of_the_block_means():
    x = np.random.default_rng(1).normal(size=(64, 64))  # n = 4096: 64 blocks of 64
    assert se(x.ravel()) == pytest.approx(iid_se(x.mean(axis=1)), rel=1e-12)


def test_a_constant_series_and_a_constant_shift():
    assert se(np.full(500, 3.0)) == 0.0
    x = np.random.default_rng(2).normal(size=500)
    assert se(x + 100.0) == pytest.approx(se(x), rel=1e-9)  # centred: no cancellation from a large mean
    assert se(3.0 * x) == pytest.approx(3.0 * se(x), rel=1e-12)


def test_iid_series_give_the_plain_se_within_a_few_percent():
    # over 400 series of 8,192 i.i.d. values (90 blocks), the batch-means SE² averages the plain SE² (both are
    # unbiased for σ²/n); a single series differs by its sampling noise, √(2/90) ≈ 15 % in SE², 7.5 % in SE
    x = np.random.default_rng(3).exponential(size=(400, 8192))
    ratio2 = np.array([se(row) ** 2 / iid_se(row) ** 2 for row in x])
    assert ratio2.mean() == pytest.approx(1.0, abs=0.03)
    assert np.median(np.sqrt(ratio2)) == pytest.approx(1.0, abs=0.03)


@pytest.mark.parametrize(("rho", "n"), [(0.5, 4096), (0.7, 8192)])
def test_ar1_intervals_cover_the_true_mean_95_percent_and_the_plain_se_does_not(rho, n):
    x = _ar1(rho, n, 2000, seed=int(rho * 10))  # covered: 94.7 % (ρ 0.5), 94.5 % (ρ 0.7); plain: 75 %, 59 %
    means = x.mean(axis=1)
    honest = np.array([se(row) for row in x])
    plain = np.array([iid_se(row) for row in x])
    z = 1.959963984540054
    covered = float(np.mean(np.abs(means) <= z * honest))  # the true mean is 0
    assert 0.93 <= covered <= 0.97, covered
    naive = float(np.mean(np.abs(means) <= z * plain))
    assert naive < 0.80, naive  # sd/√n misses the correlation: √((1−ρ)/(1+ρ)) of the true SE
    assert np.sqrt(np.mean(honest**2)) / _long_run_se(rho, n) == pytest.approx(1.0, abs=0.05)
    assert np.sqrt(np.mean(plain**2)) / _long_run_se(rho, n) == pytest.approx(
        math.sqrt((1 - rho) / (1 + rho)), rel=0.03
    )


def test_the_se_does_not_depend_on_how_the_series_was_cut():
    # the estimator sees the positions in text order only: the columns of windows (of any batch) joined
    x = _ar1(0.6, 3000, 1, seed=9)[0]
    pieces = np.split(x, [100, 612, 1500, 2999])
    assert se(np.concatenate(pieces)) == se(x)


@pytest.mark.parametrize(
    ("p", "df", "want"),
    [
        (0.95, 1, 6.313751514675),
        (0.95, 2, 2.919985580354),
        (0.95, 5, 2.015048373333),
        (0.95, 9, 1.833112932653),
        (0.975, 10, 2.228138851986),
        (0.99, 30, 2.457261542401),
        (0.5, 7, 0.0),
        (0.05, 4, -2.131846786326),
    ],
)  # (values: mpmath, the t density integrated to 30 digits)
def test_t_quantile_against_tables(p, df, want):
    assert t_quantile(p, df) == pytest.approx(want, abs=1e-9)


def test_t_quantile_tends_to_the_normal_and_rejects_bad_input():
    assert t_quantile(0.95, 1e7) == pytest.approx(1.6448536269514722, abs=1e-6)
    for p, df in ((0.0, 3), (1.0, 3), (0.9, 0)):
        with pytest.raises(ValueError):
            t_quantile(p, df)


def test_the_gate_bounds_use_t_on_the_batches_degrees_of_freedom():
    lim = [Limit("max_kl_mean", "kl_mean", "max", 0.05)]
    many = judge(lim, {"kl_mean": 0.040, "kl_se": 0.005, "se_blocks": 90})[0]
    window = judge(lim, {"kl_mean": 0.040, "kl_se": 0.005, "se_blocks": 16})[0]
    few = judge(lim, {"kl_mean": 0.040, "kl_se": 0.005, "se_blocks": 6})[0]
    unknown = judge(lim, {"kl_mean": 0.040, "kl_se": 0.005})[0]
    assert many.bound == pytest.approx(0.040 + t_quantile(0.95, 89) * 0.005) and many.passed
    assert window.bound == pytest.approx(0.040 + 1.753050355692 * 0.005) and window.passed  # t with 15 df
    assert few.bound == pytest.approx(0.040 + 2.015048373333 * 0.005) and not few.passed  # t with 5 df
    assert unknown.bound == pytest.approx(0.040 + 1.6448536269514722 * 0.005)  # z when the batches are not known
    assert few.judged == "95% one-sided bound (t, 5 df)" and window.judged == "95% one-sided bound (t, 15 df)"


def _brute_window_batches(windows: list, least: int) -> list[int]:
    """Whole windows gathered in order until a batch holds ``least`` positions; a short remainder joins the last."""
    runs, batches = [], []
    for w in windows:
        if runs and runs[-1][0] == w:
            runs[-1][1] += 1
        else:
            runs.append([w, 1])
    current, held = [], 0
    for _, length in runs:
        current.append(length)
        held += length
        if held >= least:
            batches.append(current)
            current, held = [], 0
    if current:
        batches[-1].extend(current) if batches else batches.append(current)
    if len(batches) < 2:  # fewer than two batches: ⌊√n⌋ blocks instead (position i in block ⌊i·G/n⌋)
        n = len(windows)
        return [i * (n // max(1, math.isqrt(n))) // n for i in range(n)]
    return [b for b, lengths in enumerate(batches) for length in lengths for _ in range(length)]


def brute_se(x, windows) -> float:
    """The SE of a mean over positions written out with loops: the batches of whole ``windows`` gathered by hand,
    then G/(G−1) · Σ_g (S_g − n_g·x̄)² / n²."""
    n = len(x)
    labels = _brute_window_batches(list(windows), math.isqrt(n))
    mean, sums, sizes = sum(x) / n, {}, {}
    for label, value in zip(labels, x):
        sums[label] = sums.get(label, 0.0) + value
        sizes[label] = sizes.get(label, 0) + 1
    g = len(sums)
    return math.sqrt(g / (g - 1) * sum((sums[k] - sizes[k] * mean) ** 2 for k in sums) / n**2)


@pytest.mark.parametrize(
    "lengths", [[512] * 16, [64] * 40, [3, 200, 7, 7, 150, 1, 90, 2], [100, 5], [30, 30, 30, 30, 1]]
)
def test_batches_are_whole_windows_of_at_least_root_n_positions(lengths):
    windows = np.repeat(np.arange(len(lengths)), lengths)
    n = windows.size
    labels = block_labels(n, windows)
    assert labels.tolist() == _brute_window_batches(windows.tolist(), math.isqrt(n))
    sizes = np.bincount(labels)
    assert (
        (np.diff(labels) >= 0).all() and (sizes >= math.isqrt(n)).all() and sizes.size >= 2
    )  # consecutive, none short
    if labels.tolist() != block_labels(n).tolist():
        assert all(np.unique(labels[windows == w]).size == 1 for w in np.unique(windows))  # a window is never cut
        assert se_blocks(n, windows)["se_blocks"] == sizes.size and se_blocks(n, windows)["se_block"] == round(
            n / sizes.size
        )
    x = np.random.default_rng(len(lengths)).lognormal(size=n)
    assert se(x, windows) == pytest.approx(stats.cluster_se(x, labels), rel=1e-12)


def test_one_window_falls_back_to_root_n_blocks_and_ids_may_repeat():
    x = np.random.default_rng(3).normal(size=1000)
    assert se(x, np.zeros(1000, dtype=int)) == se(x) and se_blocks(1000, np.zeros(1000, dtype=int)) == se_blocks(1000)
    # the same window drawn twice in a row is one run: label by draw when windows are resampled
    assert block_labels(8, np.array([5, 5, 5, 5, 5, 5, 5, 5])).tolist() == block_labels(8).tolist()
    with pytest.raises(ValueError, match="window labels"):
        block_labels(4, np.zeros(3))

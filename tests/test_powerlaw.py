"""Power-law fit in log-log space and the bootstrap CI for β, against exact data and closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest

from infoeval.errors import DataError
from infoeval.mutual_information.powerlaw import bootstrap_beta, fit_power_law, fit_with_ci

LENGTHS = [16, 32, 64, 128, 256, 512, 1024, 2048]


@pytest.mark.parametrize("a, beta", [(3.0, 0.5), (2.5, 0.63), (0.7, 1.0), (40.0, -0.2)])
def test_exact_power_law_is_recovered(a, beta):
    values = [a * n**beta for n in LENGTHS]
    law = fit_power_law(LENGTHS, values)
    assert law.beta == pytest.approx(beta, abs=1e-12)
    assert law.a == pytest.approx(a, rel=1e-12)
    assert law.r2 == pytest.approx(1.0, abs=1e-12)
    assert law(100.0) == pytest.approx(a * 100**beta, rel=1e-12)


def test_two_points_worked_example():
    law = fit_power_law([16, 64], [12.0, 24.0])
    assert (law.a, law.beta) == (pytest.approx(3.0), pytest.approx(0.5))


def test_least_squares_matches_polyfit_on_noisy_data():
    rng = np.random.default_rng(1)
    values = 2.0 * np.array(LENGTHS, float) ** 0.7 * np.exp(rng.normal(0, 0.2, len(LENGTHS)))
    law = fit_power_law(LENGTHS, values)
    slope, intercept = np.polyfit(np.log(LENGTHS), np.log(values), 1)
    assert law.beta == pytest.approx(slope, rel=1e-10)
    assert law.a == pytest.approx(math.exp(intercept), rel=1e-10)
    assert 0.5 < law.r2 < 1


@pytest.mark.parametrize("lengths, values", [([16, 16], [1.0, 2.0]), ([16, 32], [1.0, 0.0]), ([16, 32], [1.0, -2.0])])
def test_impossible_fits_are_data_errors(lengths, values):
    with pytest.raises(DataError):
        fit_power_law(lengths, values)


def test_bootstrap_of_noiseless_blocks_is_a_point():
    samples = [np.full(10, 3.0 * n**0.5) for n in LENGTHS]
    ci = bootstrap_beta(LENGTHS, samples, replicates=200, seed=0)
    assert ci.low == pytest.approx(0.5, abs=1e-12) and ci.high == pytest.approx(0.5, abs=1e-12)
    assert ci.used == 200 and ci.paired


def test_bootstrap_se_matches_the_delta_method():
    """Independent resampling (unequal block counts): Var β ≈ Σ_j w_j² · Var(ln mean_j), with
    w_j = (u_j − ū)/Σ(u − ū)² and Var(ln mean_j) ≈ (plug-in variance / n_j) / mean_j²."""
    rng = np.random.default_rng(2)
    lengths = [16, 64, 256, 1024]
    samples = [n**0.6 * rng.gamma(4.0, 0.25, size=400 + 7 * j) for j, n in enumerate(lengths)]
    ci = bootstrap_beta(lengths, samples, replicates=4000, seed=3)
    assert not ci.paired
    u = np.log(lengths)
    w = (u - u.mean()) / ((u - u.mean()) ** 2).sum()
    var_ln = np.array([s.var() / s.size / s.mean() ** 2 for s in samples])
    delta_se = math.sqrt((w**2 * var_ln).sum())
    assert ci.se == pytest.approx(delta_se, rel=0.08)
    assert ci.low < fit_power_law(lengths, [s.mean() for s in samples]).beta < ci.high


def test_paired_bootstrap_keeps_blocks_together():
    """Block k of every length covers the same text: when every length's values are one common factor per block
    times a constant, the slope does not depend on which blocks are drawn, so the paired interval is a point."""
    rng = np.random.default_rng(4)
    base = rng.gamma(2.0, 1.0, size=16)
    samples = [2.0 * n**0.8 * base for n in LENGTHS]
    ci = bootstrap_beta(LENGTHS, samples, replicates=500, seed=0)
    assert ci.paired
    assert ci.high - ci.low < 1e-9 and ci.low == pytest.approx(0.8, abs=1e-9)


def test_bootstrap_is_reproducible_and_seeded():
    rng = np.random.default_rng(5)
    samples = [n**0.5 * rng.gamma(3.0, 1.0, size=12) for n in LENGTHS]
    a = bootstrap_beta(LENGTHS, samples, replicates=300, seed=7)
    b = bootstrap_beta(LENGTHS, samples, replicates=300, seed=7)
    c = bootstrap_beta(LENGTHS, samples, replicates=300, seed=8)
    assert a == b and (a.low, a.high) != (c.low, c.high)


def test_bootstrap_interval_covers_the_true_exponent():
    """Coverage of the 95% interval over many simulated data sets (16 blocks per length, independent noise)."""
    rng = np.random.default_rng(6)
    hits, trials = 0, 200
    for t in range(trials):
        samples = [1.5 * n**0.4 * rng.gamma(5.0, 0.2, size=16) for n in LENGTHS]
        ci = bootstrap_beta(LENGTHS, [s for s in samples], replicates=400, seed=t)
        hits += ci.low <= 0.4 <= ci.high
    assert 0.85 <= hits / trials <= 1.0, hits / trials


def test_fit_with_ci_drops_non_positive_lengths():
    samples = [np.array([-1.0, 0.5]), np.array([4.0, 4.2]), np.array([8.0, 8.1]), np.array([16.0, 16.4])]
    out = fit_with_ci([8, 16, 32, 64], samples, replicates=100)
    assert out["lengths_dropped"] == [8] and out["lengths_fitted"] == [16, 32, 64]
    assert out["fit"]["beta"] == pytest.approx(fit_power_law([16, 32, 64], [4.1, 8.05, 16.2]).beta)
    assert out["fit"]["beta_low"] <= out["fit"]["beta"] <= out["fit"]["beta_high"]


def test_fit_with_ci_without_two_positive_lengths_says_why():
    out = fit_with_ci([8, 16], [np.array([-1.0, -2.0]), np.array([1.0, 2.0])])
    assert out["fit"] is None and "fewer than two" in out["reason"]

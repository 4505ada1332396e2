"""The confidence sequences of ``infoeval.measure.sequential`` by simulation and against their definitions.

Calibration: 10,000 seeded streams of 64 window means each, the true mean exactly at the gate's limit; a
false PASS is "PASS declared after any window up to 64", and it must happen in at most α + 3 binomial SEs of
the streams (α = 0.05). Laws: lognormal window means (σ_log 0.1, like the real KL window means of
quantize-compare, and 0.3, three times that), and resampled real window means (``REAL_KL``). The naive rule
(stop as soon as x̄ + 1.645·SE < limit) fails the same test, so the test has power. The same for false FAIL,
for top-1 agreement with the bounded EB CS, and for windows drawn without replacement from a finite plan.
Vectorised over streams (cumulative sums), seeded, a few seconds in all.
"""

from __future__ import annotations

import doctest
import math

import numpy as np
import pytest

from infoeval.measure import sequential as sq

ALPHA = 0.05
RUNS, BUDGET = 10_000, 64
TOL = 3.0 * math.sqrt(ALPHA * (1 - ALPHA) / RUNS)  # 3 binomial SEs: 0.0065

# window-mean KL / its corpus mean, int8-channel, int4-g128 and int4-channel on python-docs and wikitext-2
# (8,192 tokens each, 16 windows of 512; `infoeval quantize-compare --positions`, SmolLM2-135M): 96 values,
# sd 0.10, skewness 0.7
REAL_KL = np.array(
    [
        1.0141,
        0.9320,
        0.9674,
        1.0792,
        0.9965,
        1.0012,
        1.1718,
        1.0070,
        1.0330,
        0.9827,
        0.9812,
        0.9046,
        0.9671,
        0.9385,
        1.0465,
        0.9770,
        1.1211,
        0.9313,
        0.9422,
        1.0051,
        0.9484,
        1.0316,
        1.1771,
        0.9778,
        1.0618,
        0.8670,
        0.9258,
        0.9704,
        1.0291,
        0.9617,
        0.9681,
        1.0816,
        1.1005,
        0.8271,
        0.9667,
        1.0813,
        0.9835,
        1.0115,
        1.2957,
        1.0117,
        1.0241,
        0.8770,
        1.0326,
        0.9169,
        0.9646,
        0.9752,
        0.9092,
        1.0224,
        0.9608,
        1.0674,
        1.1790,
        0.9162,
        0.8472,
        0.8991,
        0.8392,
        0.9398,
        0.9065,
        0.8630,
        0.8618,
        1.1539,
        1.1512,
        1.2658,
        1.2038,
        0.9452,
        0.9184,
        0.9626,
        1.2497,
        1.0158,
        0.8874,
        0.9098,
        0.8443,
        0.9867,
        0.9665,
        0.9164,
        0.8329,
        1.1772,
        1.0871,
        1.0983,
        1.1914,
        0.9554,
        0.9139,
        1.0267,
        1.0693,
        0.9272,
        0.9217,
        1.0354,
        1.0726,
        1.1050,
        0.9438,
        0.8753,
        0.9063,
        1.1598,
        1.1496,
        1.0110,
        0.9977,
        0.8845,
    ]
)


def _rate(hit: np.ndarray) -> float:
    """Fraction of streams (rows) where ``hit`` is true at any time."""
    return float(hit.any(axis=-1).mean())


def _lognormal(sdlog: float, seed: int) -> tuple[np.ndarray, float]:
    rng = np.random.default_rng(seed)
    return rng.lognormal(0.0, sdlog, size=(RUNS, BUDGET)), math.exp(sdlog * sdlog / 2)


def _resampled(seed: int) -> tuple[np.ndarray, float]:
    rng = np.random.default_rng(seed)
    pop = REAL_KL * 0.02  # in nats, like an int4 variant's mean KL on a bigger model
    return rng.choice(pop, size=(RUNS, BUDGET), replace=True), float(pop.mean())


STREAMS = {
    "lognormal-0.1": lambda: _lognormal(0.1, 1),
    "lognormal-0.3": lambda: _lognormal(0.3, 2),
    "real-resampled": lambda: _resampled(3),
}


def test_doctests():
    assert doctest.testmod(sq, raise_on_error=False).failed == 0


# ---- calibration: unbounded metrics (mean KL, Δ ln PPL) with the t-mixture CS ------------------------------
@pytest.mark.parametrize("law", sorted(STREAMS))
def test_t_mixture_false_pass_and_false_fail_are_at_most_alpha(law):
    x, mu = STREAMS[law]()
    lower, upper = sq.t_mixture_cs(x, ALPHA)
    d = sq.gate_decisions(lower, upper, mu, "max")  # the limit is exactly the true mean
    assert _rate(d == sq.PASS) <= ALPHA + TOL, "false PASS"
    assert _rate(d == sq.FAIL) <= ALPHA + TOL, "false FAIL"
    # "just inside the limit": the mean is 0.1 % below it, a FAIL is still wrong
    assert _rate(sq.gate_decisions(lower, upper, mu * 1.001, "max") == sq.FAIL) <= ALPHA + TOL


@pytest.mark.parametrize("law", sorted(STREAMS))
def test_the_naive_rule_fails_the_same_test(law):
    x, mu = STREAMS[law]()
    rate = _rate(sq.naive_upper(x) < mu)
    assert rate > 4 * ALPHA, f"naive false-PASS {rate}"  # ≈ 0.4: the test can see a miscalibrated rule


def test_asymptotic_cs_boundary_is_valid_with_known_variance_and_its_plug_in_is_documented():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(RUNS, BUDGET))
    t = np.arange(1, BUDGET + 1)
    mean = np.cumsum(x, axis=1) / t
    for side, limit in (("upper", ALPHA), ("both", ALPHA)):
        r = sq.asymptotic_radius(t, 1.0, ALPHA, 32, side)
        crossed = (mean + r < 0) if side == "upper" else (np.abs(mean) > r)
        assert _rate(crossed) <= limit + TOL
    # with σ̂ plugged in, the first windows make it err more than α at this size (why the gate uses t_mixture_cs)
    y, mu = _lognormal(0.1, 5)
    _, upper = sq.asymptotic_cs(y, ALPHA, side="upper", min_windows=2)
    assert _rate(upper < mu) > ALPHA + TOL


def test_without_replacement_from_a_finite_plan():
    """Windows visited in a seeded random order: a random permutation of a fixed population of window means,
    the target being their mean. The i.i.d. t-mixture CS is conservative there; EB has an exact form."""
    rng = np.random.default_rng(6)
    pop = rng.lognormal(0.0, 0.3, size=256)
    x = pop[np.argsort(rng.random((RUNS, pop.size)), axis=1)[:, :BUDGET]]
    lower, upper = sq.t_mixture_cs(x, ALPHA)
    assert _rate(upper < pop.mean()) <= ALPHA + TOL and _rate(lower > pop.mean()) <= ALPHA + TOL
    top = rng.beta(18.0, 2.0, size=128)
    y = top[np.argsort(rng.random((RUNS, top.size)), axis=1)[:, :BUDGET]]
    lo, hi = sq.eb_cs(y, ALPHA, population=top.size)
    assert _rate((lo > top.mean()) | (hi < top.mean())) <= ALPHA + TOL
    lo_iid, hi_iid = sq.eb_cs(y, ALPHA)
    assert np.all(hi[:, -1] - lo[:, -1] <= hi_iid[:, -1] - lo_iid[:, -1] + 1e-12)  # WoR is never wider at t=64/128


# ---- calibration: bounded metrics (top-1 agreement) with PrPl-EB -------------------------------------------
@pytest.mark.parametrize("a,b", [(18.0, 2.0), (3.0, 2.0)])
def test_eb_false_pass_and_false_fail_are_at_most_alpha(a, b):
    rng = np.random.default_rng(7)
    x = rng.beta(a, b, size=(RUNS, BUDGET))
    mu = a / (a + b)
    for side in ("lower", "upper"):
        lower, upper = sq.eb_cs(x, ALPHA, side=side)
        d = sq.gate_decisions(lower, upper, mu, "min")  # top-1 must be ≥ the limit
        wrong = sq.PASS if side == "lower" else sq.FAIL
        assert _rate(d == wrong) <= ALPHA + TOL
    lower, upper = sq.eb_cs(x, ALPHA)
    assert _rate((lower > mu) | (upper < mu)) <= ALPHA + TOL
    naive_lower = 2 * mu - sq.naive_upper(2 * mu - x)  # x̄ − 1.645·SE, by symmetry
    assert _rate(naive_lower > mu) > 4 * ALPHA


@pytest.mark.parametrize("a,b", [(18.0, 2.0), (3.0, 2.0), (60.0, 40.0)])
def test_betting_at_the_limit_errs_at_most_alpha(a, b):
    """The gate's exact test for top-1: PASS "mean ≥ L" once the "up" capital at m = L reaches 1/α."""
    x = np.random.default_rng(17).beta(a, b, size=(RUNS, BUDGET))
    mu = a / (a + b)
    for direction in ("up", "down"):
        k = sq.betting_log_capital(x, mu, ALPHA, direction=direction)
        assert _rate(k >= math.log(1 / ALPHA)) <= ALPHA + TOL
    # and it has power: a mean 0.1 above the limit is found within 64 windows in most streams (≈ 0.9 at sd 0.2)
    assert _rate(sq.betting_log_capital(x, mu - 0.1, ALPHA, direction="up") >= math.log(1 / ALPHA)) > 0.8


def test_betting_cs_covers_is_bounded_and_beats_eb_near_a_bound():
    rng = np.random.default_rng(18)
    x = rng.beta(18.0, 2.0, size=(200, BUDGET))
    mu = 0.9
    widths = []
    for row in x:
        lo, hi = sq.betting_cs(row, ALPHA)
        assert np.all((lo >= 0) & (lo <= hi) & (hi <= 1))
        widths.append(hi[-1] - lo[-1])
        # the reported bound is a grid point whose capital (and that of every m below it) is ≥ 2/α
        if lo[-1] > 0:
            assert sq.betting_log_capital(row, lo[-1], ALPHA / 2)[-1] >= math.log(2 / ALPHA)
    lo_all = np.array([sq.betting_cs(r, ALPHA)[0] for r in x[:100]])
    assert float((lo_all > mu).any(axis=1).mean()) <= 0.05  # (0 of 100 expected)
    eb_lo, eb_hi = sq.eb_cs(x, ALPHA)
    assert np.median(widths) < 0.8 * np.median(eb_hi[:, -1] - eb_lo[:, -1])
    with pytest.raises(ValueError):
        sq.betting_log_capital(x, 1.0)


def test_eb_matches_its_definition_written_as_loops():
    """The bound is the m where the PrPl-EB process Π exp(λ_i(x_i − m) − v_i ψ_E(λ_i)) reaches 1/α."""
    x = np.random.default_rng(8).beta(5.0, 2.0, size=40)
    lower, _ = sq.eb_cs(x, ALPHA, side="lower")
    mu_prev, var_prev, s, ss = 0.5, 0.25, 0.0, 0.0
    num = den = pen = 0.0
    for t, xi in enumerate(x, start=1):
        lam = min(math.sqrt(2 * math.log(1 / ALPHA) / (var_prev * t * math.log(1 + t))), 0.5)
        v = 4 * (xi - mu_prev) ** 2
        pen += v * (-math.log(1 - lam) - lam) / 4
        num += lam * xi
        den += lam
        s += xi
        mu = (0.5 + s) / (t + 1)
        ss += (xi - mu) ** 2
        mu_prev, var_prev = mu, (0.25 + ss) / (t + 1)
        m = (num - pen - math.log(1 / ALPHA)) / den  # log-process = 0 at m... solve Σλ(x−m) − pen = ln(1/α)
        assert lower[t - 1] == pytest.approx(min(max(m, 0.0), 1.0), abs=1e-12)


def test_t_mixture_radius_solves_the_mixture_martingale_by_quadrature():
    """M_t(μ₀) from its definition (a numerical integral over δ and σ) equals 1/α on the CS's boundary."""
    x = np.random.default_rng(9).normal(0.3, 2.0, size=20)
    lower, upper = sq.t_mixture_cs(x, ALPHA)
    c2 = 1 / sq.normal_mixture_rho(32, ALPHA) ** 2
    for mu0 in (upper[-1], lower[-1]):
        y = x - mu0
        t = y.size
        # ∫∫ σ^{−t} exp(−Σ(y − δσ)²/(2σ²)) N(δ; 0, 1/c²) dδ dσ/σ  over  ∫ σ^{−t} exp(−Σy²/(2σ²)) dσ/σ, on grids
        log_s = np.linspace(-6, 6, 2001)
        sig = np.exp(log_s)[:, None]
        delta = np.linspace(-12, 12, 4001)[None, :] / math.sqrt(c2)
        big_a, big_b = float((y**2).sum()), float(y.sum())  # Σ(y − δσ)² = A − 2δσB + tδ²σ²
        log_num = -t * np.log(sig) - (big_a - 2 * delta * sig * big_b + t * (delta * sig) ** 2) / (2 * sig**2)
        log_num = log_num + 0.5 * np.log(c2 / (2 * math.pi)) - c2 * delta**2 / 2
        ref = log_num.max()
        num = np.log(np.exp(log_num - ref).sum() * (delta[0, 1] - delta[0, 0]) * (log_s[1] - log_s[0])) + ref
        log_den = -t * np.log(sig[:, 0]) - (y**2).sum() / (2 * sig[:, 0] ** 2)
        ref2 = log_den.max()
        den = np.log(np.exp(log_den - ref2).sum() * (log_s[1] - log_s[0])) + ref2
        assert num - den == pytest.approx(math.log(1 / ALPHA), abs=1e-3)


# ---- properties -------------------------------------------------------------------------------------------
def test_deterministic_for_a_seed():
    a, b = _lognormal(0.3, 11)[0], _lognormal(0.3, 11)[0]
    for fn in (sq.t_mixture_cs, sq.asymptotic_cs):
        assert all(np.array_equal(p, q) for p, q in zip(fn(a[:50]), fn(b[:50])))
    assert all(np.array_equal(p, q) for p, q in zip(sq.eb_cs(a[:50] / a.max()), sq.eb_cs(b[:50] / b.max())))


def test_width_shrinks_with_t():
    x = np.tile([0.8, 1.0], 256)  # a stream whose running sd settles at once
    for fn, kw in ((sq.t_mixture_cs, {}), (sq.asymptotic_cs, {}), (sq.eb_cs, {})):
        lo, hi = fn(x, ALPHA, **kw)
        w = (hi - lo)[[15, 31, 63, 127, 255, 511]]
        assert np.all(np.diff(w) < 0), (fn.__name__, w)
    r = sq.t_mixture_radius(np.arange(7, 10_000), np.ones(9_993))
    assert np.all(np.diff(r) < 0)
    big = np.array([64.0, 1e3, 1e5])
    ratio = sq.t_mixture_radius(big, np.ones(3)) / sq.asymptotic_radius(big, 1.0)
    assert ratio[0] < 1.05 and abs(ratio[-1] - 1) < 1e-3  # the same boundary in the long run


def test_one_sided_boundary_lies_between_the_two_sided_ones():
    t = np.arange(1.0, 200.0)
    rho = sq.normal_mixture_rho(32, ALPHA)
    one = sq.asymptotic_radius(t, 1.0, ALPHA, 32, "upper") * t  # the boundary on the standardized sum
    assert np.all(one < sq._two_sided_u(t, rho, ALPHA))  # M ≥ the symmetric mixture when S > 0
    assert np.all(one > sq._two_sided_u(t, rho, 2 * ALPHA))  # M ≤ twice it


def test_a_constant_stream_gives_a_degenerate_but_valid_interval():
    c = np.full(40, 0.7)
    lo, hi = sq.t_mixture_cs(c)
    assert np.isinf(lo[:6]).all() and np.all(lo[6:] == 0.7) and np.all(hi[6:] == 0.7)
    lo, hi = sq.asymptotic_cs(c)
    assert np.all(lo[7:] == 0.7) and np.all(hi[7:] == 0.7)
    lo, hi = sq.eb_cs(c)
    assert np.all(lo <= 0.7) and np.all(hi >= 0.7) and lo[-1] > lo[5]  # contains it and tightens


def test_bounded_cs_never_leaves_its_bounds():
    rng = np.random.default_rng(12)
    x = np.where(rng.random((500, 100)) < 0.3, rng.integers(0, 2, (500, 100)), rng.random((500, 100)))
    for kw in ({}, {"side": "lower"}, {"side": "upper"}, {"population": 100}, {"t_opt": 50}):
        lo, hi = sq.eb_cs(x, ALPHA, **kw)
        assert np.all((lo >= 0) & (lo <= hi) & (hi <= 1))
    lo, hi = sq.eb_cs(2 + 3 * x, ALPHA, bounds=(2, 5))
    assert np.all((lo >= 2) & (hi <= 5))
    with pytest.raises(ValueError, match="outside the bounds"):
        sq.eb_cs(np.array([0.5, 1.2]))


def test_running_intersection_never_widens_and_covers_no_less():
    x, mu = _lognormal(0.3, 13)
    lo, hi = sq.t_mixture_cs(x[:2000])
    lo2, hi2 = sq.t_mixture_cs(x[:2000], running_intersection=True)
    assert np.all(lo2 >= lo) and np.all(hi2 <= hi)
    # the stopping rule "PASS once upper < limit" is the same with or without it
    assert np.array_equal((hi < mu).any(1), (hi2 < mu).any(1))


def test_token_weighting_targets_the_token_weighted_mean():
    rng = np.random.default_rng(14)
    means, tokens = rng.random(30), rng.integers(100, 513, 30)
    y = sq.token_weighted(means, tokens, tokens.mean())
    assert y.mean() == pytest.approx((means * tokens).sum() / tokens.sum(), rel=1e-12)


def test_split_alpha_decisions_and_streaming():
    assert sq.split_alpha(0.05, 1) == 0.05 and sq.split_alpha(0.05, 5) == pytest.approx(0.01)
    for bad in ((0.0, 2), (1.0, 2), (0.05, 0)):
        with pytest.raises(ValueError):
            sq.split_alpha(*bad)
    d = sq.gate_decisions(np.array([0.0, 0.6, 0.1]), np.array([0.9, 0.9, 0.4]), 0.5, "max")
    assert d.tolist() == [0, -1, 1] and sq.first_decision(d) == (-1, 2)
    assert sq.gate_decisions(np.array([0.6]), np.array([0.9]), 0.5, "min").tolist() == [1]
    assert sq.first_decision(np.zeros(5)) == (0, 5)
    with pytest.raises(ValueError):
        sq.gate_decisions(np.zeros(1), np.ones(1), 0.5, "mean")
    x = _lognormal(0.3, 15)[0][0]
    for method, kw in (("t", {}), ("asymptotic", {"side": "upper"}), ("eb", {}), ("betting", {"grid": 200})):
        data = x / x.max() * 0.999 if method in ("eb", "betting") else x
        cs = sq.StreamingCS(method, 0.05, kw)
        got = np.array([cs.update(v) for v in data])
        lo, hi = sq.METHODS[method](data, 0.05, **kw)
        assert np.allclose(got[:, 0], lo) and np.allclose(got[:, 1], hi)
    with pytest.raises(ValueError):
        sq.StreamingCS("bayes")

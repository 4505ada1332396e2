"""infoeval.speculative.theory against closed forms, brute-force loops and simulations."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from infoeval.measure import infotheory as it
from infoeval.measure import stats as st
from infoeval.speculative import theory as sm


def _rand_lp(n: int, v: int, scale: float, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.log_softmax(torch.randn(n, v, generator=g, dtype=torch.float64) * scale, -1).float()


# ------------------------------------------------------------------------------------------ per position
def test_identical_distributions_accept_everything():
    lp = _rand_lp(5, 100, 3.0, 0)
    s = it.position_stats(lp, lp.clone())
    assert torch.allclose(s["beta"], torch.ones(5), atol=1e-6)
    assert torch.equal(s["kl"], torch.zeros(5))
    assert torch.allclose(s["tv"], torch.zeros(5), atol=1e-7)
    assert torch.allclose(s["entropy_p"], s["entropy_q"])


def test_disjoint_supports_accept_nothing():
    """p on tokens {0, 1}, q on {2, 3}: β = 0, TV = 1, KL = ∞ (q = 0 where p > 0), entropies 1 bit each."""
    p = torch.tensor([[0.5, 0.5, 0.0, 0.0]])
    q = torch.tensor([[0.0, 0.0, 0.25, 0.75]])
    s = it.position_stats(p.log(), q.log(), torch.tensor([1]))
    assert float(s["beta"]) == 0.0
    assert float(s["tv"]) == 1.0
    assert math.isinf(float(s["kl"]))
    assert float(s["entropy_p"]) == pytest.approx(math.log(2))
    assert float(s["entropy_q"]) == pytest.approx(-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)))
    assert math.isinf(float(s["nll_q"])) and float(s["nll_p"]) == pytest.approx(math.log(2))


def test_position_stats_against_a_float64_loop():
    lp, lq = _rand_lp(4, 37, 2.0, 1), _rand_lp(4, 37, 2.0, 2)
    targets = torch.tensor([0, 5, 36, 17])
    s = it.position_stats(lp, lq, targets)
    for i in range(4):
        p = [math.exp(x) for x in lp[i].double().tolist()]
        q = [math.exp(x) for x in lq[i].double().tolist()]
        assert float(s["beta"][i]) == pytest.approx(sum(min(a, b) for a, b in zip(p, q)), abs=2e-6)
        assert float(s["tv"][i]) == pytest.approx(0.5 * sum(abs(a - b) for a, b in zip(p, q)), abs=2e-6)
        assert float(s["kl"][i]) == pytest.approx(sum(a * math.log(a / b) for a, b in zip(p, q)), abs=5e-6)
        assert float(s["entropy_p"][i]) == pytest.approx(-sum(a * math.log(a) for a in p), abs=5e-6)
        assert float(s["nll_q"][i]) == pytest.approx(-math.log(q[int(targets[i])]), abs=2e-6)
        assert float(s["beta"][i]) == pytest.approx(1 - float(s["tv"][i]), abs=2e-6)  # β = 1 − TV


def test_temperature_softmax():
    z = torch.tensor([[2.0, 0.0, -1.0]])
    for t in (0.5, 1.0, 3.0):
        e = [math.exp(x / t) for x in (2.0, 0.0, -1.0)]
        want = [x / sum(e) for x in e]
        assert it.log_softmax_t(z, t).exp()[0].tolist() == pytest.approx(want, rel=1e-6)


def test_top1_match_is_temperature_free_and_counts_ties():
    zp = torch.tensor([[3.0, 1.0, 0.0], [0.0, 2.0, 1.0], [1.0, 0.0, 0.0]])
    zq = torch.tensor([[2.0, 2.0, 0.0], [5.0, 1.0, 0.0], [1.0, 1.0, -1.0]])
    assert it.top1_match(zp, zq).tolist() == [True, False, True]  # rows 0 and 2: a tie at the top counts


# ------------------------------------------------------------------------------------------------ Pinsker
def test_pinsker_holds_on_random_distributions_and_detects_violations():
    lp, lq = _rand_lp(400, 50, 4.0, 3), _rand_lp(400, 50, 4.0, 4)
    s = it.position_stats(lp, lq)
    r = st.pinsker(s["tv"].numpy(), s["kl"].numpy())
    assert r["violations"] == 0 and r["checked"] == 400 and 0 < r["max_ratio"] <= 1.0
    # near-identical distributions (KL ~ 1e-8): within the float tolerance, still no violation
    s2 = it.position_stats(
        lp, torch.log_softmax(lp + 1e-4 * torch.randn(400, 50, generator=torch.Generator().manual_seed(5)), -1)
    )
    assert st.pinsker(s2["tv"].numpy(), s2["kl"].numpy())["violations"] == 0
    # numbers that break the inequality are counted
    assert st.pinsker(np.array([0.5, 0.1]), np.array([0.1, 0.5]))["violations"] == 1


# ------------------------------------------------------------------------------------------ expected tokens
@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.8, 0.999999, 1.0])
@pytest.mark.parametrize("gamma", [1, 4, 8])
def test_expected_tokens_is_the_geometric_series(alpha, gamma):
    series = sum(alpha**k for k in range(gamma + 1))
    assert sm.expected_tokens(alpha, gamma) == pytest.approx(series, rel=1e-9)


def test_expected_tokens_limit():
    assert sm.expected_tokens(1.0, 4) == 5.0
    assert sm.expected_tokens(1 - 1e-7, 4) == pytest.approx(5.0, rel=1e-6)
    assert sm.expected_tokens(np.array([0.0, 1.0]), 3).tolist() == [1.0, 4.0]


@pytest.mark.parametrize("alpha,gamma", [(0.6, 4), (0.9, 8), (0.25, 2)])
def test_expected_tokens_against_a_simulation_of_iid_acceptances(alpha, gamma):
    """Rounds of γ drafts, each accepted independently with probability α until the first rejection; a round
    emits the accepted drafts plus one token (the resampled or bonus token)."""
    rng = np.random.default_rng(0)
    rounds = 200_000
    accepted = rng.random((rounds, gamma)) < alpha
    k = np.where(accepted.all(1), gamma, accepted.argmin(1))  # index of the first rejection = accepted count
    tokens = k + 1
    se = tokens.std() / math.sqrt(rounds)
    assert abs(tokens.mean() - sm.expected_tokens(alpha, gamma)) < 4 * se


def test_expected_tokens_table_mean_vs_per_position():
    beta = np.array([0.2, 0.9, 0.5, 0.7])
    rows = sm.expected_tokens_table(beta, [1, 4])
    assert rows[0]["e_mean_alpha"] == pytest.approx(1 + beta.mean())
    assert rows[0]["e_per_position"] == pytest.approx(1 + beta.mean())  # linear at γ = 1
    per = np.mean([sum(b**k for k in range(5)) for b in beta])
    assert rows[1]["e_per_position"] == pytest.approx(per)
    assert rows[1]["e_per_position"] > rows[1]["e_mean_alpha"]  # Jensen: E is convex in α


# -------------------------------------------------------------------------------- correlations and tables
def test_pearson_matches_numpy():
    rng = np.random.default_rng(1)
    x = rng.normal(size=300)
    y = 0.5 * x + rng.normal(size=300)
    r, n = st.pearson(x, y)
    assert n == 300 and r == pytest.approx(np.corrcoef(x, y)[0, 1], rel=1e-12)
    assert math.isnan(st.pearson(np.ones(5), y[:5])[0])


def test_entropy_quartiles_split_by_rank():
    h = np.arange(10, dtype=float)[::-1].copy()  # entropies 9 … 0
    beta = 1 - h / 10
    rows = sm.entropy_quartiles(h, beta, h * 0.1, h < 5)
    assert [r["n"] for r in rows] == [2, 3, 2, 3]  # ranks ⌊k·10/4⌋: 0, 2, 5, 7, 10
    assert rows[0]["entropy_min_bits"] == 0 and rows[0]["entropy_max_bits"] == 1
    assert rows[0]["alpha"] == pytest.approx(np.mean([1.0, 0.9]))
    assert rows[3]["entropy_mean_bits"] == pytest.approx(8.0)
    assert rows[0]["top1"] == 1.0 and rows[3]["top1"] == 0.0
    # ties in entropy do not leave a quartile empty
    assert [r["n"] for r in sm.entropy_quartiles(np.zeros(8), np.ones(8), np.zeros(8), np.ones(8, bool))] == [
        2,
        2,
        2,
        2,
    ]


def _brute_runs(match, pos):
    runs, cur = [], 0
    for i, m in enumerate(match):
        if m and cur and pos[i] == pos[i - 1] + 1:
            cur += 1
        elif m:
            if cur:
                runs.append(cur)
            cur = 1
        else:
            if cur:
                runs.append(cur)
            cur = 0
    if cur:
        runs.append(cur)
    return runs


def test_run_lengths_against_a_loop():
    rng = np.random.default_rng(2)
    match = rng.random(500) < 0.7
    pos = np.cumsum(rng.choice([1, 1, 1, 1, 3], size=500))  # some gaps (window boundaries of llama.cpp chunks)
    got = sm.run_lengths(match, pos).tolist()
    assert got == _brute_runs(match.tolist(), pos.tolist())
    assert sum(got) == match.sum()
    assert sm.run_lengths(np.zeros(0, bool)).tolist() == []


def test_run_length_table_geometric_reference():
    rows = sm.run_length_table(np.array([1, 1, 2, 5, 40]), 0.5)
    assert [r["runs"] for r in rows] == [2, 1, 0, 0, 1, 0, 0, 0, 0, 0, 1]
    assert sum(r["share"] for r in rows) == pytest.approx(1.0)
    assert sum(r["share_if_independent"] for r in rows) == pytest.approx(1.0)
    assert rows[0]["share_if_independent"] == 0.5 and rows[1]["share_if_independent"] == 0.25


# -------------------------------------------------------------------------------------------- chi-square
@pytest.mark.parametrize("x", [0.1, 1.0, 3.0, 10.0, 40.0])
def test_chi2_sf_df2_is_exponential(x):
    assert st.chi2_sf(x, 2) == pytest.approx(math.exp(-x / 2), rel=1e-10)


@pytest.mark.parametrize("x", [0.5, 2.0, 7.0])
def test_chi2_sf_df1_is_erfc(x):
    assert st.chi2_sf(x, 1) == pytest.approx(math.erfc(math.sqrt(x / 2)), rel=1e-10)


def test_chi_square_statistic_and_edge_cases():
    r = st.chi_square(np.array([10, 20, 70]), np.array([0.2, 0.2, 0.6]))
    want = (10 - 20) ** 2 / 20 + (20 - 20) ** 2 / 20 + (70 - 60) ** 2 / 60
    assert r["stat"] == pytest.approx(want) and r["df"] == 2
    assert r["p_value"] == pytest.approx(math.exp(-want / 2))
    assert st.chi_square(np.array([3, 1]), np.array([1.0, 0.0]))["p_value"] == 0.0  # an impossible cell was hit
    assert math.isnan(st.chi_square(np.array([5]), np.array([1.0]))["p_value"])  # one cell: nothing to test


def test_chi_square_is_calibrated_under_the_null():
    """Under the null, p-values are uniform: about 5 % fall below 0.05."""
    rng = np.random.default_rng(3)
    probs = np.array([0.1, 0.2, 0.3, 0.4])
    pv = np.array([st.chi_square(rng.multinomial(400, probs), probs)["p_value"] for _ in range(2000)])
    assert 0.035 < (pv < 0.05).mean() < 0.065


@pytest.mark.parametrize("gamma,cost", [(1, 0.1), (4, 0.3), (8, 0.05), (4, 0.0)])
def test_break_even_alpha_solves_e_equals_cost(gamma, cost):
    a = sm.break_even_alpha(gamma, cost)
    assert sm.expected_tokens(a, gamma) == pytest.approx(gamma * cost + 1.0, abs=1e-9)
    assert a == pytest.approx(0.0, abs=1e-12) if cost == 0 else 0 < a < 1


def test_break_even_alpha_impossible_when_a_draft_step_costs_a_target_step():
    assert math.isnan(sm.break_even_alpha(4, 1.0)) and math.isnan(sm.break_even_alpha(4, 1.5))
    assert math.isnan(sm.break_even_alpha(4, 0.5, verify=3.0))  # 4·0.5 + 3 = 5 = γ + 1


def test_break_even_alpha_with_a_costly_verify():
    a = sm.break_even_alpha(4, 0.4, verify=2.0)
    assert sm.expected_tokens(a, 4) == pytest.approx(4 * 0.4 + 2.0, abs=1e-9)
    assert a > sm.break_even_alpha(4, 0.4)


@pytest.mark.parametrize(
    "module", ["infoeval.speculative.theory", "infoeval.speculative.decode", "infoeval.speculative.distill"]
)
def test_worked_examples_in_docstrings(module):
    """The worked examples in the docstrings are run, so they cannot drift from the code."""
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0

"""The compact reference's maths against brute force: the coarse KL is a lower bound (log-sum inequality), exact
when the top-K hold everything; the tail-corrected KL, TV and reverse KL are unbiased."""

from __future__ import annotations

import math

import pytest
import torch

from infoeval.gating.compact import compact
from infoeval.measure.compact_kl import compact_divergences as divergences


def _pair(n=6, v=300, scale=3.0, noise=0.4, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, v, generator=g, dtype=torch.float64) * scale
    b = a + noise * torch.randn(n, v, generator=g, dtype=torch.float64)
    return torch.log_softmax(a, -1), torch.log_softmax(b, -1)


def _exact(lp, lq):
    p, q = lp.exp(), lq.exp()
    return (p * (lp - lq)).sum(-1), 0.5 * (p - q).abs().sum(-1), (q * (lq - lp)).sum(-1)


def test_worked_example_from_the_docstring():
    lp = torch.tensor([[0.5, 0.3, 0.2]]).log()
    lq = torch.tensor([[0.4, 0.4, 0.2]]).log()
    d = divergences(compact(lp, 1, 0), lq)
    assert d.kl_lower.item() == pytest.approx(0.5 * math.log(0.5 / 0.4) + 0.5 * math.log(0.5 / 0.6), abs=1e-6)
    assert d.kl_lower.item() == pytest.approx(0.02041, abs=1e-5)
    exact = 0.5 * math.log(1.25) + 0.3 * math.log(0.75)
    gap = 0.5 * (0.6 * math.log(0.6 / (2 / 3)) + 0.4 * math.log(0.4 / (1 / 3)))
    assert exact - d.kl_lower.item() == pytest.approx(gap, abs=1e-6)


@pytest.mark.parametrize("k", [1, 5, 40])
def test_coarse_kl_is_a_lower_bound_and_estimate_never_below_it(k):
    lp, lq = _pair()
    kl, _, _ = _exact(lp, lq)
    d = divergences(compact(lp.float(), k, 64, torch.Generator().manual_seed(1)), lq.float())
    assert (d.kl_lower <= kl.float() + 1e-5).all()
    assert (d.kl >= d.kl_lower - 1e-6).all()


def test_all_mass_in_top_k_gives_exact_values():
    """K ≥ V: no tail, so the coarse KL, TV and reverse KL are the exact ones."""
    lp, lq = _pair(v=50)
    kl, tv, rkl = _exact(lp, lq)
    d = divergences(compact(lp.float(), 64, 16), lq.float())
    torch.testing.assert_close(d.kl_lower.double(), kl, atol=2e-6, rtol=1e-4)
    torch.testing.assert_close(d.kl.double(), kl, atol=2e-6, rtol=1e-4)
    torch.testing.assert_close(d.tv.double(), tv, atol=2e-6, rtol=1e-4)
    torch.testing.assert_close(d.rkl.double(), rkl, atol=2e-6, rtol=1e-4)


def test_identical_distributions_give_zero():
    lp, _ = _pair()
    d = divergences(compact(lp.float(), 8, 32), lp.float())
    assert d.kl.abs().max() < 1e-6 and d.kl_lower.abs().max() < 1e-6
    assert d.tv.abs().max() < 1e-6 and d.rkl.abs().max() < 1e-6
    assert d.top1.all()


def test_tail_estimates_are_unbiased():
    """Over many sampling seeds, KL̂, TV̂ and rKL̂ average to the exact values (within 4 Monte Carlo standard
    errors); the coarse KL stays well below."""
    lp, lq = _pair(n=4, v=400, scale=1.5, noise=0.5)
    kl, tv, rkl = _exact(lp, lq)
    runs = [divergences(compact(lp, 4, 256, torch.Generator().manual_seed(s)), lq) for s in range(100)]
    for name, exact in (("kl", kl), ("tv", tv), ("rkl", rkl)):
        draws = torch.stack([getattr(r, name) for r in runs]).double()
        se = draws.std(0) / math.sqrt(draws.shape[0])
        assert ((draws.mean(0) - exact).abs() <= 4 * se + 1e-9).all(), name
        assert (se < 0.05 * exact).all(), name  # and the check has power: the SE is small
    lower = torch.stack([r.kl_lower for r in runs]).double().mean(0)
    assert (lower < 0.9 * kl).all()  # the tail holds much of the divergence here: the bound is loose


def test_top1_and_no_tail_rows():
    """top1 compares the reference's most likely token with q's; a row whose mass sits in the top-K (P_T = 0)
    while q has mass outside gives TV including that mass and an infinite reverse KL."""
    lp = torch.tensor([[0.0, -math.inf, -math.inf], [math.log(0.7), math.log(0.2), math.log(0.1)]])
    lq = torch.tensor([[math.log(0.9), math.log(0.05), math.log(0.05)], [math.log(0.2), math.log(0.7), math.log(0.1)]])
    d = divergences(compact(lp, 1, 8), lq)
    assert d.top1.tolist() == [True, False]
    assert d.kl[0].item() == pytest.approx(-math.log(0.9), abs=1e-6)
    assert d.tv[0].item() == pytest.approx(0.1, abs=1e-6)
    assert math.isinf(d.rkl[0].item())

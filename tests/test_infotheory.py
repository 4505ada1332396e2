"""infoeval.measure.infotheory against closed forms and a brute-force float64 loop.

Every quantity is checked against something computed independently: a per-element Python/float64 loop, torch's
own ``kl_div``, a two-token closed form, or an inequality that holds for all distributions (Gibbs, Pinsker).
"""

from __future__ import annotations

import math

import pytest
import torch

from infoeval.measure import infotheory as it

# ---------------------------------------------------------------------------------------------- helpers


def _logits(n: int, V: int, scale: float, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, V, generator=g) * scale


def _brute(lp_row: list[float], lq_row: list[float]) -> dict[str, float]:
    """Per-element float64 loop over one row of log-probabilities (natural log)."""
    p = [math.exp(x) for x in lp_row]
    q = [math.exp(x) for x in lq_row]
    kl = sum(pi * (a - b) for pi, a, b in zip(p, lp_row, lq_row) if pi > 0)
    rkl = sum(qi * (b - a) for qi, a, b in zip(q, lp_row, lq_row) if qi > 0)
    tv = 0.5 * sum(abs(pi - qi) for pi, qi in zip(p, q))
    hp = -sum(pi * a for pi, a in zip(p, lp_row) if pi > 0)
    hq = -sum(qi * b for qi, b in zip(q, lq_row) if qi > 0)
    beta = sum(min(pi, qi) for pi, qi in zip(p, q))
    return {"kl": kl, "rkl": rkl, "tv": tv, "hp": hp, "hq": hq, "beta": beta}


def _f64_reference(lg_p: torch.Tensor, lg_q: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
    """Vectorised float64 reference (used for large vocabularies where a Python loop would be slow)."""
    lp = torch.log_softmax(lg_p.double(), -1)
    lq = torch.log_softmax(lg_q.double(), -1)
    p, q = lp.exp(), lq.exp()
    return {
        "kl": (p * (lp - lq)).sum(-1),
        "rkl": (q * (lq - lp)).sum(-1),
        "tv": 0.5 * (p - q).abs().sum(-1),
        "entropy_p": -(p * lp).sum(-1),
        "entropy": -(q * lq).sum(-1),
        "nll_p": -lp.gather(-1, targets[:, None])[:, 0],
        "nll": -lq.gather(-1, targets[:, None])[:, 0],
        "top1": lq.argmax(-1) == lp.argmax(-1),
    }


# ------------------------------------------------------------------------------- standalone functions


@pytest.mark.parametrize("V", [2, 3, 17, 4096])
def test_entropy_of_uniform_is_log_V(V):
    """H(uniform over V) = log V, for any constant logit value.

    The float32 row sum (bmm) accumulates ~V·ε rounding: ~2e-5 relative at V = 4096 on CPU, hence rtol 5e-5.
    """
    lp = it.log_softmax(torch.full((3, V), 7.25))
    torch.testing.assert_close(it.entropy(lp), torch.full((3,), math.log(V)), rtol=5e-5, atol=1e-6)
    ref = it.reference_stats(torch.full((3, V), -2.0), torch.zeros(3, dtype=torch.long))
    torch.testing.assert_close(ref.entropy, torch.full((3,), math.log(V)), rtol=5e-5, atol=1e-6)
    torch.testing.assert_close(ref.nll, torch.full((3,), math.log(V)), rtol=1e-6, atol=1e-6)


def test_entropy_counts_zero_probability_terms_as_zero():
    """Masked (−inf) logits: H of uniform over the k unmasked tokens is log k, not NaN."""
    logits = torch.tensor([[0.0, 0.0, -math.inf, 0.0, -math.inf]])
    lp = it.log_softmax(logits)
    torch.testing.assert_close(it.entropy(lp), torch.tensor([math.log(3)]))


def test_entropy_of_one_hot_is_zero():
    """A point mass (all other logits −inf) has zero entropy."""
    logits = torch.tensor([[-math.inf, 3.0, -math.inf]])
    assert it.entropy(it.log_softmax(logits)).item() == 0.0


@pytest.mark.parametrize("a", [0.0, 0.3, 2.0, 9.0])
def test_binary_entropy_closed_form(a):
    """V = 2, logits (a, 0): p = σ(a), H = −p ln p − (1−p) ln(1−p)."""
    p = 1 / (1 + math.exp(-a))
    expected = -p * math.log(p) - (1 - p) * math.log(1 - p)
    lp = it.log_softmax(torch.tensor([[a, 0.0]]))
    assert it.entropy(lp).item() == pytest.approx(expected, rel=1e-5, abs=1e-7)


def test_worked_example_from_docstring():
    """p = (.5, .5), q = (.9, .1): KL = .5 ln(.5/.9) + .5 ln(.5/.1) = 0.5108, TV = .4, β = .6, Pinsker holds."""
    lp = torch.tensor([[0.5, 0.5]]).log()
    lq = torch.tensor([[0.9, 0.1]]).log()
    kl_expected = 0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1)
    assert kl_expected == pytest.approx(0.5108, abs=1e-4)
    kl = it.kl_div(lp, lq).item()
    tv = it.total_variation(lp, lq).item()
    beta = it.acceptance(lp, lq).item()
    assert kl == pytest.approx(kl_expected, rel=1e-6)
    assert tv == pytest.approx(0.4, rel=1e-6)
    assert beta == pytest.approx(0.6, rel=1e-6)
    assert math.sqrt(kl / 2) == pytest.approx(0.5054, abs=1e-4)
    assert tv <= math.sqrt(kl / 2)
    # reverse KL: .9 ln(.9/.5) + .1 ln(.1/.5)
    assert it.kl_div(lq, lp).item() == pytest.approx(0.9 * math.log(1.8) + 0.1 * math.log(0.2), rel=1e-6)


def test_kl_of_identical_is_zero():
    """KL(p‖p) = 0 and TV(p, p) = 0 exactly (the terms are literally equal)."""
    lp = it.log_softmax(_logits(16, 300, 3.0, seed=1))
    assert torch.equal(it.kl_div(lp, lp), torch.zeros(16))
    assert torch.equal(it.total_variation(lp, lp), torch.zeros(16))
    torch.testing.assert_close(it.acceptance(lp, lp), torch.ones(16))


@pytest.mark.parametrize("scale", [0.5, 3.0, 12.0])
def test_standalone_functions_match_brute_force_loop(scale):
    """kl_div, total_variation, acceptance, entropy equal a per-element float64 Python loop."""
    lp = it.log_softmax(_logits(6, 37, scale, seed=2))
    lq = it.log_softmax(_logits(6, 37, scale, seed=3))
    kl, rkl = it.kl_div(lp, lq), it.kl_div(lq, lp)
    tv, beta, hp = it.total_variation(lp, lq), it.acceptance(lp, lq), it.entropy(lp)
    for i in range(6):
        b = _brute(lp[i].double().tolist(), lq[i].double().tolist())
        assert kl[i].item() == pytest.approx(b["kl"], rel=1e-5, abs=1e-6)
        assert rkl[i].item() == pytest.approx(b["rkl"], rel=1e-5, abs=1e-6)
        assert tv[i].item() == pytest.approx(b["tv"], abs=1e-6)
        assert beta[i].item() == pytest.approx(b["beta"], abs=1e-6)
        assert hp[i].item() == pytest.approx(b["hp"], rel=1e-5, abs=1e-6)


def test_kl_matches_torch_kl_div():
    """KL(p‖q) = torch.nn.functional.kl_div(log q, log p, log_target=True) summed over the vocabulary."""
    lp = it.log_softmax(_logits(32, 1000, 2.0, seed=4))
    lq = it.log_softmax(_logits(32, 1000, 2.0, seed=5))
    ref = torch.nn.functional.kl_div(lq.double(), lp.double(), log_target=True, reduction="none").sum(-1)
    torch.testing.assert_close(it.kl_div(lp, lq).double(), ref, rtol=1e-5, atol=1e-6)


def test_kl_masked_vocabulary():
    """0·log(0/0) = 0: a token masked in both p and q contributes nothing (not NaN); q = 0 < p gives +inf."""
    lp = it.log_softmax(torch.tensor([[0.0, 1.0, -math.inf]]))
    lq = it.log_softmax(torch.tensor([[1.0, 0.0, -math.inf]]))
    p0 = 1 / (1 + math.e)  # p = (1/(1+e), e/(1+e), 0)
    expected = p0 * (-1.0) + (1 - p0) * 1.0  # Σ p (lp − lq); lp − lq = (−1, +1)
    assert it.kl_div(lp, lq).item() == pytest.approx(expected, rel=1e-6)
    assert it.kl_div(lp, lp).item() == 0.0
    lq_zero = it.log_softmax(torch.tensor([[0.0, -math.inf, 0.0]]))
    assert it.kl_div(lp, lq_zero).item() == math.inf


def test_gibbs_pinsker_and_tv_bounds_on_random_distributions():
    """KL ≥ 0, 0 ≤ TV ≤ 1, Σ min(p, q) = 1 − TV, Pinsker TV ≤ √(KL/2), over many scales and vocabularies."""
    for seed, (V, scale, eps) in enumerate(
        [(2, 1.0, 1.0), (50, 0.1, 1.0), (50, 5.0, 1.0), (999, 3.0, 0.05), (4096, 8.0, 0.5)]
    ):
        lg = _logits(24, V, scale, seed=10 + seed)
        lgq = lg + eps * _logits(24, V, scale, seed=100 + seed)
        lp, lq = it.log_softmax(lg), it.log_softmax(lgq)
        kl, tv, beta = it.kl_div(lp, lq), it.total_variation(lp, lq), it.acceptance(lp, lq)
        assert (kl >= -1e-6).all()
        assert (tv >= 0).all() and (tv <= 1 + 1e-6).all()
        torch.testing.assert_close(beta, 1 - tv, rtol=0, atol=2e-6)
        assert (tv <= torch.sqrt(kl.clamp(min=0) / 2) + 2e-6).all()


def test_nll_is_minus_log_prob_of_target():
    """nll = −log p(y), checked per row against math.log of the softmax probability."""
    lg = _logits(10, 20, 2.0, seed=6)
    targets = torch.arange(10) * 2 % 20
    lp = it.log_softmax(lg)
    got = it.nll(lp, targets)
    for i in range(10):
        row = [math.exp(x) for x in lg[i].double().tolist()]
        expected = -math.log(row[targets[i]] / sum(row))
        assert got[i].item() == pytest.approx(expected, rel=1e-5, abs=1e-6)
    # uniform: −log(1/V)
    assert it.nll(it.log_softmax(torch.zeros(2, 20)), torch.tensor([0, 19])).tolist() == pytest.approx(
        [math.log(20)] * 2
    )


def test_log_softmax_is_float32_for_any_input_dtype():
    """bf16 / fp16 / fp64 logits come back as float32 log-probabilities equal to log_softmax of the upcast."""
    lg = _logits(4, 64, 3.0, seed=7)
    for dt in (torch.bfloat16, torch.float16, torch.float64):
        x = lg.to(dt)
        out = it.log_softmax(x)
        assert out.dtype == torch.float32
        torch.testing.assert_close(out, torch.log_softmax(x.float(), -1), rtol=0, atol=0)


# ----------------------------------------------------------------------- reference_stats and compare


@pytest.mark.parametrize(
    "n,V,scale,eps",
    [
        (1, 2, 1.0, 1.0),
        (7, 50, 0.3, 0.5),
        (7, 50, 10.0, 0.5),
        (33, 512, 4.0, 0.1),
        (16, 4096, 1.0, 0.01),  # nearly uniform and nearly identical: KL ~ 5e-5
        (16, 4096, 6.0, 0.01),
        (8, 4096, 30.0, 1.0),
    ],
)
def test_compare_matches_float64_reference(n, V, scale, eps):
    """reference_stats + compare = float64 truth for nll, kl, rkl, tv, entropy, top1 (and the reference's own)."""
    lg = _logits(n, V, scale, seed=V + n)
    lgq = lg + eps * _logits(n, V, 1.0, seed=V + n + 1)
    targets = torch.randint(0, V, (n,), generator=torch.Generator().manual_seed(V))
    ref = it.reference_stats(lg, targets)
    got = it.compare(ref, lgq, targets)
    want = _f64_reference(lg, lgq, targets)
    assert set(got) == {"nll", "kl", "rkl", "tv", "entropy", "top1", "max_logq"}
    torch.testing.assert_close(got["max_logq"], torch.log_softmax(lgq.float(), -1).amax(-1), rtol=1e-6, atol=1e-6)
    for k in ("nll", "kl", "rkl", "tv", "entropy"):
        assert got[k].shape == (n,)
        assert got[k].dtype == torch.float32
    # KL must be accurate in absolute terms even when it is tiny: float32 log-prob rounding is ~1e-7·|log p|
    atol_kl = 2e-6 + 1e-8 * scale * 30
    torch.testing.assert_close(got["kl"].double(), want["kl"], rtol=1e-4, atol=atol_kl)
    torch.testing.assert_close(got["rkl"].double(), want["rkl"], rtol=1e-4, atol=atol_kl)
    torch.testing.assert_close(got["tv"].double(), want["tv"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got["entropy"].double(), want["entropy"], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got["nll"].double(), want["nll"], rtol=1e-5, atol=1e-5)
    assert torch.equal(got["top1"], want["top1"])
    torch.testing.assert_close(ref.entropy.double(), want["entropy_p"], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ref.nll.double(), want["nll_p"], rtol=1e-5, atol=1e-5)
    assert torch.equal(ref.argmax, lg.argmax(-1))


def test_compare_tiny_kl_relative_accuracy_at_large_vocab():
    """Near-identical distributions over 4096 tokens: KL ≈ 5e-5, and each row must be within 5 % of float64.

    (Σ p log p − Σ p log q in float32 cancels two ≈ 8-nat sums and misses by up to ~50 % here.)
    """
    lg = _logits(32, 4096, 1.0, seed=8)
    lgq = lg + 0.01 * _logits(32, 4096, 1.0, seed=9)
    t = torch.zeros(32, dtype=torch.long)
    got = it.compare(it.reference_stats(lg, t), lgq, t)
    want = _f64_reference(lg, lgq, t)
    assert want["kl"].min() > 3e-5
    torch.testing.assert_close(got["kl"].double(), want["kl"], rtol=0.05, atol=0)
    torch.testing.assert_close(got["rkl"].double(), want["rkl"], rtol=0.05, atol=0)


def test_compare_agrees_with_standalone_functions():
    """compare's columns equal kl_div, kl_div(q, p), total_variation, entropy, nll applied to the same log-probs."""
    lg = _logits(20, 4096, 5.0, seed=11)
    lgq = lg + 0.3 * _logits(20, 4096, 5.0, seed=12)
    targets = torch.randint(0, 4096, (20,), generator=torch.Generator().manual_seed(1))
    got = it.compare(it.reference_stats(lg, targets), lgq, targets)
    lp, lq = it.log_softmax(lg), it.log_softmax(lgq)
    torch.testing.assert_close(got["kl"], it.kl_div(lp, lq), rtol=1e-4, atol=2e-6)
    torch.testing.assert_close(got["rkl"], it.kl_div(lq, lp), rtol=1e-4, atol=2e-6)
    torch.testing.assert_close(got["tv"], it.total_variation(lp, lq), rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(got["entropy"], it.entropy(lq), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(got["nll"], it.nll(lq, targets), rtol=0, atol=0)
    assert torch.equal(got["top1"], lq.argmax(-1) == lp.argmax(-1))


def test_compare_identical_logits():
    """q = p: KL = rKL = TV = 0 exactly, entropy(q) = H(p), nll equal, top1 all true."""
    lg = _logits(9, 700, 4.0, seed=13)
    t = torch.arange(9)
    ref = it.reference_stats(lg, t)
    got = it.compare(ref, lg.clone(), t)
    assert (got["kl"] == 0).all() and (got["rkl"] == 0).all() and (got["tv"] == 0).all()
    torch.testing.assert_close(got["entropy"], ref.entropy, rtol=0, atol=0)
    torch.testing.assert_close(got["nll"], ref.nll, rtol=0, atol=0)
    assert got["top1"].all()


def test_compare_is_side_effect_free_and_repeatable():
    """compare reuses buffers internally: the reference stats and the caller's logits must not change."""
    lg = _logits(5, 300, 2.0, seed=14)
    lgq = _logits(5, 300, 2.0, seed=15)
    t = torch.arange(5)
    ref = it.reference_stats(lg, t)
    snapshot = {k: getattr(ref, k).clone() for k in ("logits", "max", "log_sum", "entropy", "argmax", "nll")}
    lgq_copy = lgq.clone()
    first = it.compare(ref, lgq, t)
    second = it.compare(ref, lgq, t)
    for k, v in snapshot.items():
        assert torch.equal(getattr(ref, k), v), k
    assert torch.equal(lgq, lgq_copy)
    for k in first:
        assert torch.equal(first[k], second[k])


@pytest.mark.parametrize("a", [1.0, 10.0, 50.0, 200.0, 1000.0])
def test_peaked_disjoint_closed_form(a):
    """V = 2, p from logits (a, 0), q from (0, a): KL = rKL = a·tanh(a/2), TV = tanh(a/2), top1 false.

    For a ≥ 104 the minor probability underflows to 0 in float32; the answer must stay finite and exact.
    """
    lg = torch.tensor([[a, 0.0]])
    lgq = torch.tensor([[0.0, a]])
    t = torch.tensor([1])
    ref = it.reference_stats(lg, t)
    got = it.compare(ref, lgq, t)
    th = math.tanh(a / 2)
    assert got["kl"].item() == pytest.approx(a * th, rel=1e-5)
    assert got["rkl"].item() == pytest.approx(a * th, rel=1e-5)
    assert got["tv"].item() == pytest.approx(th, rel=1e-6)
    assert not got["top1"].item()
    assert ref.nll.item() == pytest.approx(a + math.log1p(math.exp(-a)), rel=1e-6)  # −log σ(−a)
    assert got["nll"].item() == pytest.approx(math.log1p(math.exp(-a)), rel=1e-4, abs=1e-7)


def test_peaked_large_vocab_is_finite_and_matches_float64():
    """Very peaked logits (scale 200) over 4096 tokens, with different argmaxes: finite, ≥ 0, equal to float64."""
    lg = _logits(12, 4096, 200.0, seed=16)
    lgq = _logits(12, 4096, 200.0, seed=17)
    t = lg.argmax(-1)
    got = it.compare(it.reference_stats(lg, t), lgq, t)
    want = _f64_reference(lg, lgq, t)
    for k in ("kl", "rkl", "tv", "entropy", "nll"):
        assert torch.isfinite(got[k]).all(), k
    assert (got["kl"] > 10).all()
    torch.testing.assert_close(got["kl"].double(), want["kl"], rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(got["rkl"].double(), want["rkl"], rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(got["tv"].double(), want["tv"], rtol=1e-5, atol=1e-6)


def test_bf16_logits():
    """bf16 logits give exactly what their float32 upcast gives (the instrument works in float32)."""
    lg = _logits(6, 1024, 4.0, seed=18).bfloat16()
    lgq = (lg.float() + 0.2 * _logits(6, 1024, 1.0, seed=19)).bfloat16()
    t = torch.arange(6)
    ref16 = it.reference_stats(lg, t)
    ref32 = it.reference_stats(lg.float(), t)
    assert (
        ref16.max.dtype == torch.float32 and ref16.log_probs(slice(0, 6), torch.empty(6, 1024)).dtype == torch.float32
    )
    torch.testing.assert_close(ref16.entropy, ref32.entropy, rtol=0, atol=0)
    got16 = it.compare(ref16, lgq, t)
    got32 = it.compare(ref32, lgq.float(), t)
    for k in got16:
        assert torch.equal(got16[k], got32[k]), k
    want = _f64_reference(lg.float(), lgq.float(), t)
    torch.testing.assert_close(got16["kl"].double(), want["kl"], rtol=1e-4, atol=2e-6)


def test_compare_columns_satisfy_inequalities():
    """On compare's output: KL ≥ 0, rKL ≥ 0, TV ∈ [0, 1], Pinsker TV ≤ √(KL/2) and ≤ √(rKL/2).

    float32 log-softmax resolves KL to ~1e-6 nats (rounding of log Σ e^x), so KL is given 2e-6 of slack; the
    smallest perturbation is chosen so that KL ≈ 1e-4 ≫ that floor and Pinsker is still tight-ish.
    """
    lg = _logits(64, 2048, 3.0, seed=20)
    lgq = lg + torch.linspace(0.02, 2.0, 64)[:, None] * _logits(64, 2048, 1.0, seed=21)
    t = torch.zeros(64, dtype=torch.long)
    got = it.compare(it.reference_stats(lg, t), lgq, t)
    assert got["kl"].min() > 5e-5
    assert (got["kl"] >= 0).all() and (got["rkl"] >= 0).all()
    assert (got["tv"] >= 0).all() and (got["tv"] <= 1).all()
    assert (got["tv"] <= torch.sqrt((got["kl"] + 2e-6) / 2)).all()
    assert (got["tv"] <= torch.sqrt((got["rkl"] + 2e-6) / 2)).all()


def test_top1_ties_in_the_variant_count_as_agreement():
    """top1 means 'the reference's top token is a top token of the variant': a variant tied between the
    reference's top token and another token agrees, whichever of the two comes first; a variant whose unique
    top token differs does not."""
    ref_logits = torch.tensor([[0.0, 3.0, 1.0, 0.5], [0.0, 3.0, 1.0, 0.5], [0.0, 3.0, 1.0, 0.5]])
    var_logits = torch.tensor([[2.0, 2.0, 0.0, 0.0], [0.0, 2.0, 2.0, 0.0], [0.0, 1.0, 2.0, 0.0]])
    targets = torch.tensor([1, 1, 1])
    got = it.compare(it.reference_stats(ref_logits, targets), var_logits, targets)
    assert got["top1"].tolist() == [True, True, False]


# ------------------------------------------------------------------------------- chunks of rows


def _full_buffer(lg: torch.Tensor, lgq: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
    """The statistics on whole (n, V) buffers, with compare's own float32 arithmetic (no chunks)."""
    lp, lq = torch.log_softmax(lg.float(), -1), torch.log_softmax(lgq.float(), -1)
    p, q = lp.exp(), lq.exp()
    d = lq - lp
    return {
        "ref_entropy": -(p * lp).sum(-1),
        "ref_nll": -lp.gather(-1, targets[:, None])[:, 0],
        "ref_argmax": lp.argmax(-1),
        "nll": -lq.gather(-1, targets[:, None])[:, 0],
        "kl": -(p * d).sum(-1),
        "rkl": (q * d).sum(-1),
        "tv": 0.5 * (q - p).abs().sum(-1),
        "entropy": -(q * lq).sum(-1),
        "top1": lq.gather(-1, lp.argmax(-1)[:, None])[:, 0] >= lq.amax(-1),
    }


@pytest.mark.parametrize(
    "n,size,want",
    [
        (0, 4, [(0, 0)]),
        (1, 4, [(0, 1)]),
        (3, 4, [(0, 3)]),
        (8, 4, [(0, 4), (4, 8)]),
        (9, 4, [(0, 4), (4, 9)]),
        (10, 4, [(0, 4), (4, 8), (8, 10)]),
        (5, 1, [(0, 2), (2, 5)]),
    ],
)
def test_row_chunks_cover_every_row_once_and_leave_no_lone_last_row(n, size, want):
    """Consecutive slices of ``size`` (at least 2) rows; a lone last row joins the chunk before it (a one-row sum
    is rounded differently); n < size is one chunk; n = 0 one empty chunk."""
    assert [(s.start, s.stop) for s in it.row_chunks(n, size)] == want


def test_chunk_rows_keep_a_threads_buffers_in_cache(monkeypatch):
    """On a CPU: as many rows a thread as keep four float32 (rows, V) buffers within CHUNK_BYTES (2 rows a thread
    at V = 49,152; a tiny model's whole window); CHUNK_ROWS overrides; other devices get ACCELERATOR_CHUNK_ROWS."""
    threads = torch.get_num_threads()
    monkeypatch.setattr(it, "CHUNK_BYTES", 2 << 20)
    assert it.chunk_rows(torch.empty(0, 49152)) == 2 * threads
    assert it.chunk_rows(torch.empty(0, 151936)) == threads
    assert it.chunk_rows(torch.empty(0, 512)) == 256 * threads
    assert it.chunk_rows(torch.empty(0, 49152, device="meta")) == it.ACCELERATOR_CHUNK_ROWS
    monkeypatch.setattr(it, "CHUNK_ROWS", 3)
    assert it.chunk_rows(torch.empty(0, 49152)) == 3
    assert [(s.start, s.stop) for s in it.row_chunks(7, it.chunk_rows(torch.empty(0, 5)))] == [(0, 3), (3, 7)]


@pytest.mark.parametrize("V", [50, 4099, 49152])
@pytest.mark.parametrize("n", [1, 3, 8, 9, 13])
def test_chunked_statistics_equal_the_full_buffer_ones_bit_for_bit(monkeypatch, n, V):
    """reference_stats + compare in chunks of 4 rows give the very bits of the whole-window float32 arithmetic,
    for n a multiple of the chunk, not one, smaller than it, and n = 1 (V = 49,152: a one-row sum is split between
    threads, hence no lone last row)."""
    monkeypatch.setattr(it, "CHUNK_ROWS", 4)
    lg = _logits(n, V, 3.0, seed=n + V)
    lgq = lg + 0.1 * _logits(n, V, 1.0, seed=n + V + 1)
    targets = torch.randint(0, V, (n,), generator=torch.Generator().manual_seed(n))
    ref = it.reference_stats(lg, targets)
    got = {"ref_entropy": ref.entropy, "ref_nll": ref.nll, "ref_argmax": ref.argmax, **it.compare(ref, lgq, targets)}
    want = _full_buffer(lg, lgq, targets)
    for k, v in want.items():
        assert torch.equal(got[k], v), k


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("scale", [0.01, 3.0, 300.0])
def test_reference_log_probs_are_log_softmax_bit_for_bit(dtype, scale):
    """RefStats keeps two numbers per row (max logit, ln Σ exp(z − max)) and rebuilds log p of any rows from the
    logits: the same bits as log_softmax of the float32 logits."""
    lg = _logits(11, 1001, scale, seed=22).to(dtype)
    ref = it.reference_stats(lg, torch.zeros(11, dtype=torch.long))
    want = torch.log_softmax(lg.float(), -1)
    for rows in (slice(0, 11), slice(3, 7), slice(10, 11)):
        got = ref.log_probs(rows, torch.empty(rows.stop - rows.start, 1001))
        assert torch.equal(got, want[rows])
    assert torch.equal(ref.log_sum, -want.amax(-1)) and torch.equal(ref.argmax, want.argmax(-1))


@pytest.mark.parametrize("size", [1, 2, 4, 64])
def test_closed_forms_hold_in_chunks(monkeypatch, size):
    """Whatever the chunk: KL(p‖p) = KL(q‖q) reversed = TV(p, p) = 0 exactly, H(q) = H(p), top1 true; and the
    worked example KL((.5, .5)‖(.9, .1)) = 0.5108, TV = 0.4 on every row."""
    monkeypatch.setattr(it, "CHUNK_ROWS", size)
    lg = _logits(9, 700, 4.0, seed=23)
    t = torch.arange(9)
    ref = it.reference_stats(lg, t)
    got = it.compare(ref, lg.clone(), t)
    assert (got["kl"] == 0).all() and (got["rkl"] == 0).all() and (got["tv"] == 0).all() and got["top1"].all()
    assert torch.equal(got["entropy"], ref.entropy) and torch.equal(got["nll"], ref.nll)
    p, q = torch.tensor([[0.5, 0.5]]).log().repeat(5, 1), torch.tensor([[0.9, 0.1]]).log().repeat(5, 1)
    t5 = torch.zeros(5, dtype=torch.long)
    ex = it.compare(it.reference_stats(p, t5), q, t5)
    torch.testing.assert_close(ex["kl"], torch.full((5,), 0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1)))
    torch.testing.assert_close(ex["tv"], torch.full((5,), 0.4))


def test_workspace_buffers_are_chunk_sized(monkeypatch):
    """The statistics of 100 rows hold buffers of one chunk (at most CHUNK_ROWS + 1 rows), not of the window."""
    monkeypatch.setattr(it, "CHUNK_ROWS", 8)
    workspace = it.Workspace()
    lg = _logits(100, 300, 2.0, seed=24)
    t = torch.zeros(100, dtype=torch.long)
    it.compare(it.reference_stats(lg, t, workspace), lg + 1.0, t, workspace)
    assert workspace._buffers and all(b.shape[0] <= 9 for b in workspace._buffers.values())


def test_position_stats_by_rows_equal_the_whole_window():
    """The speculative reducers' per-row statistics in chunks (by_rows) are the whole window's, bit for bit."""
    lp = it.log_softmax_t(_logits(13, 4099, 3.0, seed=25), 0.7)
    lq = it.log_softmax_t(_logits(13, 4099, 3.0, seed=26))
    t = torch.arange(13)
    whole = it.position_stats(lp, lq, t)
    chunked = it.by_rows(13, lambda r: it.position_stats(lp[r], lq[r], t[r]), 4)
    assert all(torch.equal(whole[k], chunked[k]) for k in whole)


@pytest.mark.parametrize("s", [0, 1, 2, 16])
def test_compact_reference_in_chunks_draws_the_same_tail_samples_on_a_cpu_generator(s):
    """``gate.pipeline`` builds the compact reference a chunk at a time only on a CPU generator, whose tail
    samples come row after row: the same ids and log-probs as one call over the window, for the same seed."""
    from infoeval.gating.compact import compact

    lp = it.log_softmax(_logits(21, 4099, 3.0, seed=27))
    whole = compact(lp, 8, s, torch.Generator().manual_seed(3))
    g = torch.Generator().manual_seed(3)
    chunks = [compact(lp[r], 8, s, g) for r in it.row_chunks(21, 4)]
    for f in whole.__dataclass_fields__:
        assert torch.equal(getattr(whole, f), torch.cat([getattr(c, f) for c in chunks])), f


def _arrays(obj, prefix: str = "") -> dict:
    """Every array in nested dicts / dataclasses, by path."""
    if hasattr(obj, "__dataclass_fields__"):
        obj = {f: getattr(obj, f) for f in obj.__dataclass_fields__}
    if isinstance(obj, dict):
        return {k: v for key, val in obj.items() for k, v in _arrays(val, f"{prefix}/{key}").items()}
    return {prefix: obj} if hasattr(obj, "shape") else {}


def test_every_reducer_gives_the_whole_windows_columns_in_3_row_chunks(
    monkeypatch, tiny_llama_dir, tiny_text, tmp_path
):
    """quantize-compare, reference, gate, spec-accept and distill on the tiny Llama (its windows fit one chunk):
    chunks of 3 rows give the very columns of one chunk per window."""
    from infoeval.comparison.compare import quantize_compare
    from infoeval.gating.gate import GateSettings, build_reference, run_gate
    from infoeval.gating.limits import parse_limits
    from infoeval.gating.reference_file import read_reference
    from infoeval.input import settings as st
    from infoeval.quant.variant_settings import VariantSettings
    from infoeval.speculative import accept, distill
    from infoeval.speculative.drafts import DraftSettings

    (tmp_path / "t.txt").write_text(tiny_text, encoding="utf-8")
    model_settings, text_settings = (
        st.ModelSettings(str(tiny_llama_dir), "cpu", "float32"),
        st.TextSettings(tmp_path / "t.txt", max_tokens=100),
    )
    window_settings = st.WindowSettings(40)

    def run(rows: int) -> dict:
        monkeypatch.setattr(it, "CHUNK_ROWS", rows)
        ref = tmp_path / f"ref{rows}.safetensors"
        build_reference(model_settings, text_settings, window_settings, ref, top_k=8, tail_samples=5, seed=1)
        gate = run_gate(GateSettings(ref, None, "int4-g32", tuple(parse_limits({"min_top1": 0.0}))), model_settings)[1]
        return _arrays(
            {
                "compare": quantize_compare(
                    model_settings, text_settings, window_settings, VariantSettings("int4-g32,int8-channel")
                )[1],
                "reference": read_reference(ref).dist,
                "gate": gate,
                "accept": accept.spec_accept(
                    model_settings, text_settings, window_settings, DraftSettings(layers=1), (0.5, 1.0)
                )[1],
                "distill": distill.distill(
                    model_settings, text_settings, window_settings, DraftSettings(layers=1, role="student"), (2.0,), 0.1
                )[1],
            }
        )

    chunked, whole = run(3), run(10**6)
    assert len(whole) > 40 and chunked.keys() == whole.keys()
    for k, v in whole.items():
        assert (chunked[k] == v).all(), k


@pytest.mark.parametrize("chunk", [None, 2, 3])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_entropies_are_finite_exactly_when_the_logits_are(monkeypatch, chunk, bad):
    """The lockstep reducer checks each model's entropies instead of its logits: one NaN, +inf or −inf logit makes
    its row's entropy non-finite (and only that row's), whatever the chunk of rows, reference and variant alike;
    a row whose logits are all −inf too."""
    monkeypatch.setattr(it, "CHUNK_ROWS", chunk)
    lg = _logits(9, 300, 4.0, seed=21)
    lgq = lg + 0.2 * _logits(9, 300, 1.0, seed=22)
    t = torch.arange(9)
    for row, col in [(0, 0), (4, 299), (8, 17)]:
        bad_p, bad_q = lg.clone(), lgq.clone()
        bad_p[row, col] = bad
        bad_q[row, col] = bad
        bad_q[2] = float("-inf")
        ref = it.reference_stats(bad_p, t)
        assert torch.equal(torch.isfinite(ref.entropy), torch.isfinite(bad_p).all(-1))
        got = it.compare(it.reference_stats(lg, t), bad_q, t)
        assert torch.equal(torch.isfinite(got["entropy"]), torch.isfinite(bad_q).all(-1))
    assert torch.isfinite(it.compare(it.reference_stats(lg, t), lgq, t)["entropy"]).all()

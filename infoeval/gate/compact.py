"""Pure maths of the compact reference: a next-token distribution p kept as its top-K plus a tail, and the
divergences of a candidate q from it.

Per scored position the reference keeps
  * the top-K token ids and log p (K = 64 by default),
  * log P_T, the log of the tail mass P_T = Σ_{v ∉ top-K} p_v (computed by logsumexp over the tail itself,
    so it is accurate even when P_T is tiny),
  * S token ids drawn i.i.d. from p restricted to the tail (p|T) with their log p (S = 128 by default),
  * the observed token's id and log p, and the entropy H(p).

Coarse KL (a lower bound). Grouping the tail into one bucket gives the distributions P = (p_1 … p_K, P_T) and
Q = (q_1 … q_K, Q_T) over K + 1 outcomes; by the log-sum inequality KL(P‖Q) ≤ KL(p‖q), with equality iff
p_v/q_v is constant on the tail. The gap is exactly P_T · KL(p|T ‖ q|T).

Tail-corrected KL (unbiased). With ρ_v = q|T(v) / p|T(v) = (q_v/Q_T)/(p_v/P_T), for v ~ p|T:
E[ρ − 1 − ln ρ] = Σ_T p|T (q|T/p|T) − 1 + KL(p|T‖q|T) = KL(p|T‖q|T). Every term is ≥ 0 (x − 1 − ln x ≥ 0),
and its variance shrinks as (ln ρ)⁴ when q is close to p (Schulman's "k3" estimator). So

    KL̂ = KL(P‖Q) + P_T · mean_s(ρ_s − 1 − ln ρ_s)  ≥  KL(P‖Q),     E[KL̂] = KL(p‖q).

The same samples give unbiased tail parts of TV and of the reverse KL:
    Σ_T |p − q| = P_T · E_{p|T} |1 − r|,   Σ_T q ln(q/p) = P_T · E_{p|T}[r ln r],   with r = q_v/p_v.

Worked example: V = 3, K = 1, p = (0.5, 0.3, 0.2), q = (0.4, 0.4, 0.2): P = (0.5, 0.5), Q = (0.4, 0.6),
KL(P‖Q) = 0.5 ln(0.5/0.4) + 0.5 ln(0.5/0.6) = 0.02041 ≤ KL(p‖q) = 0.5 ln 1.25 + 0.3 ln 0.75 = 0.02527; the gap
P_T · KL(p|T‖q|T) = 0.5 · KL((0.6, 0.4)‖(2/3, 1/3)) = 0.00486.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

DEFAULT_TOP_K = 64
DEFAULT_TAIL_SAMPLES = 128


@dataclass(frozen=True)
class CompactDist:
    """A batch of n compact distributions (float32 log-probs; ids int64)."""

    top_ids: torch.Tensor  # (n, K)
    top_logp: torch.Tensor  # (n, K)
    tail_logmass: torch.Tensor  # (n,)  ln P_T; -inf when the top-K hold all the mass
    tail_ids: torch.Tensor  # (n, S)  samples from p|T (meaningless where P_T = 0)
    tail_logp: torch.Tensor  # (n, S)


def _tail_logmass(lp: torch.Tensor, top_ids: torch.Tensor) -> torch.Tensor:
    """ln Σ_{v ∉ top} p_v by logsumexp over the tail itself (no 1 − Σ cancellation)."""
    masked = lp.scatter(-1, top_ids, float("-inf"))
    return torch.logsumexp(masked, dim=-1)


def compact(lp: torch.Tensor, k: int, s: int, generator: torch.Generator | None = None) -> CompactDist:
    """Reduce log-probs ``lp`` (n, V) to top-k + tail mass + s tail samples drawn from p|T."""
    n, v = lp.shape
    k = min(k, v)
    top = lp.topk(k, dim=-1)  # sorted, largest first
    tail = _tail_logmass(lp, top.indices)
    has_tail = torch.isfinite(tail)
    if s > 0 and bool(has_tail.any()):
        w = lp.exp().scatter_(-1, top.indices, 0.0)  # p with the top-k removed; rows sum to P_T
        w[~has_tail] = 1.0  # rows without a tail: any ids, never used (their P_T is 0)
        tail_ids = torch.multinomial(w, s, replacement=True, generator=generator)
        tail_lp = lp.gather(-1, tail_ids)
    else:
        tail_ids = torch.zeros(n, max(s, 0), dtype=torch.long, device=lp.device)
        tail_lp = torch.full((n, max(s, 0)), float("-inf"), device=lp.device)
    return CompactDist(top.indices, top.values.float(), tail.float(), tail_ids, tail_lp.float())


@dataclass(frozen=True)
class CompactDivergences:
    kl_lower: torch.Tensor  # KL(P‖Q) over top-K + one tail bucket: a lower bound of KL(p‖q)
    kl: torch.Tensor  # tail-corrected, unbiased estimate of KL(p‖q)
    tv: torch.Tensor  # unbiased estimate of TV(p, q)
    rkl: torch.Tensor  # unbiased estimate of KL(q‖p)
    top1: torch.Tensor  # the reference's top token is (one of) q's top tokens


def _xlogy_ratio(a: torch.Tensor, la: torch.Tensor, lb: torch.Tensor) -> torch.Tensor:
    """a · (ln a − ln b) with 0 · anything = 0."""
    return torch.where(a > 0, a * (la - lb), torch.zeros_like(a))


def divergences(ref: CompactDist, lq: torch.Tensor) -> CompactDivergences:
    """Divergences of the candidate's full log-probs ``lq`` (n, V) from the compact reference, in nats.

    The reference's K + 1 bucket masses are renormalized to sum to 1 (stored log-probs may be rounded)."""
    lq = lq.double()
    lqk = lq.gather(-1, ref.top_ids)
    lq_tail = _tail_logmass(lq, ref.top_ids)
    lpk = ref.top_logp.double()
    lp_tail = ref.tail_logmass.double()
    # renormalize P over its K + 1 buckets
    log_z = torch.logsumexp(torch.cat([lpk, lp_tail[:, None]], dim=-1), dim=-1)
    lpk, lp_tail = lpk - log_z[:, None], lp_tail - log_z
    pk, p_tail = lpk.exp(), lp_tail.exp()
    kl_lower = _xlogy_ratio(pk, lpk, lqk).sum(-1) + _xlogy_ratio(p_tail, lp_tail, lq_tail)
    tv_top = (pk - lqk.exp()).abs().sum(-1)
    rkl_top = _xlogy_ratio(lqk.exp(), lqk, lpk).sum(-1)
    if ref.tail_ids.shape[1] > 0:
        lps = ref.tail_logp.double() - log_z[:, None]
        lqs = lq.gather(-1, ref.tail_ids)
        log_rho = (lqs - lq_tail[:, None]) - (lps - lp_tail[:, None])  # ln q|T − ln p|T
        k3 = (torch.expm1(log_rho) - log_rho).mean(-1)
        log_r = lqs - lps  # ln q_v/p_v
        r = log_r.exp()
        tv_tail = (1 - r).abs().mean(-1)
        rkl_tail = (r * log_r).mean(-1)
    else:  # no samples: the tail is one bucket
        k3 = torch.zeros_like(kl_lower)
        q_tail = lq_tail.exp()
        tv_tail = torch.where(p_tail > 0, (1 - q_tail / p_tail).abs(), 0.0)
        rkl_tail = torch.where(p_tail > 0, (q_tail / p_tail) * (lq_tail - lp_tail), 0.0)
    has_tail = p_tail > 0
    kl = kl_lower + torch.where(has_tail, p_tail * k3, 0.0)
    tv = 0.5 * (tv_top + torch.where(has_tail, p_tail * tv_tail, lq_tail.exp()))
    rkl = rkl_top + torch.where(has_tail, p_tail * rkl_tail, torch.where(lq_tail.exp() > 0, float("inf"), 0.0))
    top1 = lqk[:, 0] >= lq.amax(-1)
    return CompactDivergences(kl_lower.float(), kl.float(), tv.float(), rkl.float(), top1)

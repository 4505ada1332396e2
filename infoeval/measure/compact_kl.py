"""Divergences of a candidate's full distribution q from a compact reference p (its top-K tokens, the tail's
total mass and a few tail samples, ``gating/compact.py``): the coarse KL over the K + 1 buckets (a lower bound),
the tail-corrected KL, TV and reverse KL (unbiased estimates) and top-1 agreement, in nats."""

from __future__ import annotations

from dataclasses import dataclass

import torch


def tail_logmass(lp: torch.Tensor, top_ids: torch.Tensor) -> torch.Tensor:
    """ln Σ_{v ∉ top} p_v by logsumexp over the tail itself (no 1 − Σ cancellation)."""
    masked = lp.scatter(-1, top_ids, float("-inf"))
    return torch.logsumexp(masked, dim=-1)


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


def compact_divergences(ref, lq: torch.Tensor) -> CompactDivergences:
    """Divergences of the candidate's full log-probs ``lq`` (n, V) from a compact reference ``ref`` (a
    ``gate.compact.CompactDist``: top-K ids and log p, ln tail mass, tail samples and their log p), in nats:
    the coarse KL over the K + 1 buckets (a lower bound), the tail-corrected KL, TV and reverse KL (unbiased),
    and top-1 agreement (see ``gating/compact.py`` for the estimators).

    The reference's K + 1 bucket masses are renormalized to sum to 1 (stored log-probs may be rounded)."""
    lq = lq.double()
    lqk = lq.gather(-1, ref.top_ids)
    lq_tail = tail_logmass(lq, ref.top_ids)
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

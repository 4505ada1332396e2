"""Pure maths of the compact reference: a next-token distribution p kept as its top-K plus a tail, and the
divergences of a candidate q from it (computed by ``compact_kl.compact_divergences``).

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

from infoeval.measure.compact_kl import tail_logmass

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


def compact(lp: torch.Tensor, k: int, s: int, generator: torch.Generator | None = None) -> CompactDist:
    """Reduce log-probs ``lp`` (n, V) to top-k + tail mass + s tail samples drawn from p|T."""
    n, v = lp.shape
    k = min(k, v)
    top = lp.topk(k, dim=-1)  # sorted, largest first
    tail = tail_logmass(lp, top.indices)
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

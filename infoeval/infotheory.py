"""Pure information-theoretic functions on log-probability tensors of shape (n, V), natural log (nats).

p is the reference distribution, q the variant (quantized model, draft, student). All results are per row.

    H(p)      = −Σ p log p                       entropy
    CE(y, q)  = −log q(y)                        negative log-likelihood of the observed token y
    KL(p‖q)   = Σ p (log p − log q) ≥ 0          forward KL; 0 iff p = q
    KL(q‖p)   = Σ q (log q − log p)              reverse KL
    TV(p, q)  = ½ Σ |p − q| ∈ [0, 1]
    β(p, q)   = Σ min(p, q) = 1 − TV(p, q)       speculative-decoding acceptance
    Pinsker:    TV ≤ √(KL/2)

Worked example (V = 2): p = (0.5, 0.5), q = (0.9, 0.1):
KL(p‖q) = 0.5 ln(0.5/0.9) + 0.5 ln(0.5/0.1) = 0.5108 nats, TV = 0.4, β = 0.6, √(KL/2) = 0.5054 ≥ 0.4.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def log_softmax(logits: torch.Tensor) -> torch.Tensor:
    """Log-probabilities in float32 (logits of any float dtype)."""
    return torch.log_softmax(logits.float(), dim=-1)


def entropy(lp: torch.Tensor) -> torch.Tensor:
    """H(p) = −Σ p log p; terms with p = 0 count as 0."""
    p = lp.exp()
    return -(p * torch.nan_to_num(lp, neginf=0.0)).sum(-1)


def nll(lp: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """−log p(y) for each row's observed token."""
    return -lp.gather(-1, targets.reshape(-1, 1)).reshape(-1)


def kl_div(lp: torch.Tensor, lq: torch.Tensor) -> torch.Tensor:
    """KL(p‖q) = Σ p (log p − log q); terms with p = 0 count as 0, inf where q = 0 < p.

    Summed as one difference per term: Σ p log p − Σ p log q would cancel two sums of size ≈ H.
    """
    p = lp.exp()
    return (p * torch.where(p > 0, lp - lq, 0.0)).sum(-1)


def total_variation(lp: torch.Tensor, lq: torch.Tensor) -> torch.Tensor:
    """TV(p, q) = ½ Σ |p − q|."""
    return 0.5 * (lp.exp() - lq.exp()).abs().sum(-1)


def acceptance(lp: torch.Tensor, lq: torch.Tensor) -> torch.Tensor:
    """β = Σ min(p, q): the probability that a token drawn from q is accepted when verifying against p."""
    return torch.minimum(lp.exp(), lq.exp()).sum(-1)


class Workspace:
    """Reusable float32 (rows, V) buffers for the per-window statistics.

    A fresh 100 MB tensor per window (512 × 49,152 floats) costs more in page faults than the arithmetic done
    on it, so the lockstep loop keeps one buffer per role and hands out views of its first n rows. A
    RefStats made with a workspace is valid until the next ``reference_stats`` call on the same workspace.
    """

    def __init__(self) -> None:
        self._buffers: dict[str, torch.Tensor] = {}

    def get(self, role: str, like: torch.Tensor) -> torch.Tensor:
        n, v = like.shape
        buf = self._buffers.get(role)
        if buf is None or buf.shape[0] < n or buf.shape[1] != v or buf.device != like.device:
            buf = torch.empty(n, v, dtype=torch.float32, device=like.device)
            self._buffers[role] = buf
        return buf[:n]


def _log_softmax_into(logits: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    if out is None:
        return log_softmax(logits)
    return torch.ops.aten._log_softmax.out(logits.float(), -1, False, out=out)


def _exp_into(x: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    return x.exp() if out is None else torch.exp(x, out=out)


def _entropy_of(p: torch.Tensor, lp: torch.Tensor, ws: Workspace | None) -> torch.Tensor:
    """−Σ p log p with torch.sum's cascade summation: a bmm dot accumulates ~V·ε rounding (≈1e-3 nats at
    V = 49k), the cascade ~log V·ε. Logits are finite, so lp is finite (the hot path skips nan_to_num)."""
    plp = torch.mul(p, lp, out=ws.get("tmp", p)) if ws else p * lp
    return -plp.sum(-1)


def _dot(a: torch.Tensor, b: torch.Tensor, ws: Workspace | None) -> torch.Tensor:
    """Σ_v a·b per row: the product into a reusable buffer, then torch.sum's cascade summation (faster than a
    bmm dot at V = 49k on CPU, and its rounding grows with log V rather than V)."""
    return torch.mul(a, b, out=ws.get("tmp", a)).sum(-1) if ws else (a * b).sum(-1)


@dataclass(frozen=True)
class RefStats:
    """What the reference contributes to every comparison, computed once per window."""

    lp: torch.Tensor  # (n, V) log p, float32
    p: torch.Tensor  # (n, V)
    entropy: torch.Tensor  # (n,) nats
    argmax: torch.Tensor  # (n,)
    nll: torch.Tensor  # (n,)


def reference_stats(logits: torch.Tensor, targets: torch.Tensor, ws: Workspace | None = None) -> RefStats:
    lp = _log_softmax_into(logits, ws.get("ref_lp", logits) if ws else None)
    p = _exp_into(lp, ws.get("ref_p", logits) if ws else None)
    return RefStats(lp=lp, p=p, entropy=_entropy_of(p, lp, ws), argmax=lp.argmax(-1), nll=nll(lp, targets))


def compare(ref: RefStats, logits: torch.Tensor, targets: torch.Tensor, ws: Workspace | None = None) -> dict[str, torch.Tensor]:
    """Per-position columns of a variant against the reference, in nats.

    Returns nll, kl (KL(p‖q)), rkl (KL(q‖p)), tv, entropy (of q) and top1 (argmax p is a top token of q; ties count as agreement). Neither
    ``ref`` nor ``logits`` is modified.
    """
    lq = _log_softmax_into(logits, ws.get("var_lq", logits) if ws else None)
    q = _exp_into(lq, ws.get("var_q", logits) if ws else None)
    entropy_q = _entropy_of(q, lq, ws)
    out_nll = nll(lq, targets)
    # the variant agrees when the reference's top token is (one of) its top tokens: one max instead of an argmax
    top1 = lq.gather(-1, ref.argmax.reshape(-1, 1)).reshape(-1) >= lq.amax(-1)
    # KL as Σ p (log p − log q) term by term, not Σ p log p − Σ p log q: the two sums are ≈ H each and
    # cancel, leaving float32 rounding comparable to the KL itself at large vocabularies.
    lq.sub_(ref.lp)  # reuse lq's buffer for log q − log p
    kl = -_dot(ref.p, lq, ws)
    rkl = _dot(q, lq, ws)
    q.sub_(ref.p).abs_()  # reuse q's buffer for |p − q|
    tv = 0.5 * q.sum(-1)
    return {
        "nll": out_nll,
        "kl": kl,
        "rkl": rkl,
        "tv": tv,
        "entropy": entropy_q,
        "top1": top1,
    }


def log_softmax_t(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log softmax(z / T) over the last dimension, in float32 (float64 stays float64).

    >>> log_softmax_t(torch.tensor([2.0, 0.0]), 2.0).exp()  # softmax(1, 0) = (0.7311, 0.2689)
    tensor([0.7311, 0.2689])
    """
    z = logits if logits.dtype == torch.float64 else logits.float()
    return torch.log_softmax(z if temperature == 1.0 else z / temperature, dim=-1)


def position_stats(lp: torch.Tensor, lq: torch.Tensor, targets: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Per-row statistics of target log-probs ``lp`` against draft log-probs ``lq`` (both (n, V)), in nats.

    entropy_p, entropy_q, beta = Σ min(p, q), kl = KL(p‖q) (∞ where q = 0 < p), tv = ½ Σ |p − q|, and with
    ``targets`` the observed token's nll under each (nll_p, nll_q). p and q are exponentiated once; terms with
    p = 0 count as 0 (−inf log-probs allowed).

    >>> s = position_stats(torch.tensor([[0.5, 0.5]]).log(), torch.tensor([[0.9, 0.1]]).log())
    >>> [round(float(s[k]), 4) for k in ("beta", "tv", "kl")]
    [0.6, 0.4, 0.5108]
    """
    p, q = lp.exp(), lq.exp()
    out = {
        "entropy_p": -torch.where(p > 0, p * lp, 0.0).sum(-1),
        "entropy_q": -torch.where(q > 0, q * lq, 0.0).sum(-1),
        "beta": torch.minimum(p, q).sum(-1),
        "kl": torch.where(p > 0, p * (lp - lq), 0.0).sum(-1),
        "tv": 0.5 * (p - q).abs().sum(-1),
    }
    if targets is not None:
        out["nll_p"] = nll(lp, targets)
        out["nll_q"] = nll(lq, targets)
    return out


def top1_match(logits_p: torch.Tensor, logits_q: torch.Tensor) -> torch.Tensor:
    """True where the target's top token is also a top token of the draft (exact ties count as a match).
    Temperature does not change it (softmax(z/T) is monotone in z for T > 0)."""
    top_p = logits_p.argmax(-1, keepdim=True)
    return (logits_q.gather(-1, top_p).squeeze(-1) >= logits_q.amax(-1))


# ---- against a compact reference (top-K + tail mass + tail samples) -------------------------------------
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
    and top-1 agreement (see ``gate/compact.py`` for the estimators).

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

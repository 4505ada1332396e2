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

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


CHUNK_BYTES = 2 << 20  # per thread, for the four float32 chunk buffers (a core's L2): at V = 49,152, 2 rows per thread
# ran 1.47x faster than 8 MiB on a quiet machine and 1.15x under a competing process (benchmarks/stats.py)
ACCELERATOR_CHUNK_ROWS = 256  # on a GPU a chunk only bounds memory; bigger chunks launch fewer kernels
BLOCK = 256  # tokens per block when looking for the first index of a row's max
CHUNK_ROWS: int | None = None  # a fixed number of rows per chunk instead (tests, benchmarks)


def chunk_rows(like: torch.Tensor) -> int:
    """Rows per chunk over ``like``'s V: CHUNK_ROWS when set; on a CPU, per thread as many as keep four float32
    (rows, V) buffers within CHUNK_BYTES (2 at V = 49,152; a tiny model's whole window); on a GPU 256."""
    if CHUNK_ROWS or like.device.type != "cpu":
        return CHUNK_ROWS or ACCELERATOR_CHUNK_ROWS
    return max(1, CHUNK_BYTES // (16 * like.shape[-1])) * torch.get_num_threads()


def row_chunks(n: int, size: int) -> list[slice]:
    """Slices of ``size`` (at least 2) consecutive rows covering range(n); a lone last row joins the chunk before
    it. Row-wise reductions give the same bits whatever the chunks, except a sum over a single row, which torch
    splits between threads (rounded differently): a one-row chunk only when n = 1.

    >>> row_chunks(5, 2), row_chunks(0, 2)
    ([slice(0, 2, None), slice(2, 5, None)], [slice(0, 0, None)])
    """
    starts = list(range(0, n, max(2, size))) or [0]
    starts = starts[:-1] if len(starts) > 1 and n - starts[-1] == 1 else starts
    return [slice(a, b) for a, b in zip(starts, [*starts[1:], n])]


def by_rows(n: int, fn, size: int) -> dict[str, torch.Tensor]:
    """``fn(rows)`` → {name: per-row tensor} on each chunk of ``row_chunks(n, size)``, concatenated."""
    parts = [fn(rows) for rows in row_chunks(n, size)]
    return {k: torch.cat([p[k] for p in parts]) for k in parts[0]}


class Workspace:
    """Reusable float32 (rows, V) buffers, one per role, sized for a chunk of rows (O(chunk × V) whatever the
    context): the lockstep loop keeps one across windows (fresh tensors cost more in page faults than the maths)."""

    def __init__(self) -> None:
        self._buffers: dict[str, torch.Tensor] = {}

    def get(self, role: str, n: int, like: torch.Tensor) -> torch.Tensor:
        """A float32 (n, V) view, V and device those of ``like``."""
        v = like.shape[-1]
        buf = self._buffers.get(role)
        if buf is None or buf.shape[0] < n or buf.shape[1] != v or buf.device != like.device:
            buf = torch.empty(n, v, dtype=torch.float32, device=like.device)
            self._buffers[role] = buf
        return buf[:n]


def _rebuild(z: torch.Tensor, z_max: torch.Tensor, log_sum: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """log p = (z − max) − log_sum into ``out``: log_softmax's own two subtractions, hence its very bits."""
    return torch.sub(z.float(), z_max, out=out).sub_(log_sum)


@dataclass(frozen=True)
class RefStats:
    """What the reference contributes to every comparison, computed once per window: its logits (kept, not
    copied: they must not change while the RefStats is used) and per-row numbers, no (n, V) buffer."""

    logits: torch.Tensor  # (n, V), as the model gave them
    max: torch.Tensor  # (n,) max logit, float32
    log_sum: torch.Tensor  # (n,) ln Σ exp(z − max): log p = (z − max) − log_sum
    entropy: torch.Tensor  # (n,) nats
    argmax: torch.Tensor  # (n,)
    nll: torch.Tensor  # (n,)

    def log_probs(self, rows: slice, out: torch.Tensor) -> torch.Tensor:
        """log p of ``rows`` into ``out``: the same bits as log_softmax."""
        return _rebuild(self.logits[rows], self.max[rows, None], self.log_sum[rows, None], out)


def _chunks(workspace: Workspace, like: torch.Tensor, roles: tuple[str, ...], *columns: torch.Tensor):
    """Per chunk of rows (``chunk_rows``): the chunk buffers of ``roles`` and the chunk of every column (views,
    split once per window: a torch call per chunk and column would cost more than the arithmetic)."""
    sizes = [r.stop - r.start for r in row_chunks(like.shape[0], chunk_rows(like))]
    full = [workspace.get(role, max(sizes), like) for role in roles]
    for size, *parts in zip(sizes, *(c.split(sizes) for c in columns)):
        yield (full if size == len(full[0]) else [b[:size] for b in full]), *parts


def reference_stats(logits: torch.Tensor, targets: torch.Tensor, workspace: Workspace | None = None) -> RefStats:
    """The reference's per-row numbers, a chunk of rows at a time (log p in a chunk buffer): Σ p log p, log p(y),
    the max logit, and the max of log p in each block of BLOCK tokens. The max of log p is (max − max) − log_sum
    = −log_sum exactly; its first index (argmax) lies in the first block holding it, whose log p are rebuilt (an
    index-tracking reduction over V costs ~10× an amax). Sums are torch.sum's cascade (rounding ~log V·ε, where a
    bmm dot's ~V·ε is ≈1e-3 nats at V = 49k); finite logits give finite log p (no nan_to_num)."""
    workspace = workspace if workspace is not None else Workspace()
    (n, v), dev = logits.shape, logits.device
    plogp, logp_y, z_max = torch.empty(3, n, device=dev)
    blocks = torch.empty(n, -(-v // BLOCK), device=dev)  # max log p per block; the last one may be shorter
    full = v // BLOCK * BLOCK
    for (lp, p), z, y, *out in _chunks(
        workspace,
        logits,
        ("ref_lp", "ref_p"),
        logits,
        targets[:, None],
        plogp,
        logp_y[:, None],
        z_max,
        blocks[:, : v // BLOCK, None],
        blocks[:, -1],
    ):
        z = z.float()
        torch.ops.aten._log_softmax.out(z, -1, False, out=lp)
        torch.amax(lp[:, :full].unflatten(1, (-1, BLOCK)), -1, keepdim=True, out=out[3])
        if full < v:
            torch.amax(lp[:, full:], -1, out=out[4])
        torch.amax(z, -1, out=out[2])
        torch.gather(lp, -1, y, out=out[1])
        torch.sum(torch.exp(lp, out=p).mul_(lp), -1, out=out[0])
    top = blocks.amax(-1)
    first = (blocks == top[:, None]).byte().argmax(-1)  # the first block holding the max
    ids = (first[:, None] * BLOCK + torch.arange(BLOCK, device=dev)).clamp_(max=v - 1)
    lp_block = _rebuild(logits.gather(-1, ids), z_max[:, None], -top[:, None], torch.empty(ids.shape, device=dev))
    argmax = ids.gather(-1, lp_block.argmax(-1, keepdim=True))[:, 0]
    return RefStats(logits=logits, max=z_max, log_sum=-top, entropy=-plogp, argmax=argmax, nll=-logp_y)


def compare(
    ref: RefStats, logits: torch.Tensor, targets: torch.Tensor, workspace: Workspace | None = None
) -> dict[str, torch.Tensor]:
    """Per-position columns of a variant against the reference, in nats.

    Returns nll, kl (KL(p‖q)), rkl (KL(q‖p)), tv, entropy (of q), top1 (argmax p is a top token of q; ties count
    as agreement) and max_logq (max log q, for ``topk``). Neither ``ref`` nor ``logits`` is modified. Computed a chunk
    of rows at a time in four chunk buffers, each reused once spent; the reference's log p rebuilt per chunk."""
    workspace = workspace if workspace is not None else Workspace()
    n, dev = logits.shape[0], logits.device
    qlogq, pd, qd, tv, top = torch.empty(
        5, n, device=dev
    )  # Σ q log q, Σ p·d, Σ q·d (d = log q − log p), Σ |q − p|, max log q
    picked = torch.empty(n, 2, device=dev)  # log q of the observed token and of the reference's top token
    columns = (
        logits,
        ref.logits,
        ref.max[:, None],
        ref.log_sum[:, None],
        torch.stack([targets, ref.argmax], 1),
        picked,
    )
    for (lq, q, lp, p), zq, zp, z_max, log_sum, ids, g, *sums in _chunks(
        workspace, logits, ("var_lq", "var_q", "ref_lp", "ref_p"), *columns, qlogq, pd, qd, tv, top
    ):
        torch.ops.aten._log_softmax.out(zq.float(), -1, False, out=lq)
        torch.exp(lq, out=q)
        torch.sum(torch.mul(q, lq, out=lp), -1, out=sums[0])
        torch.gather(lq, -1, ids, out=g)
        torch.amax(lq, -1, out=sums[4])
        torch.exp(_rebuild(zp, z_max, log_sum, lp), out=p)
        # KL as Σ p (log p − log q) term by term, not Σ p log p − Σ p log q: the two sums are ≈ H each and
        # cancel, leaving float32 rounding comparable to the KL itself at large vocabularies.
        lq.sub_(lp)  # reuse lq's buffer for log q − log p
        torch.sum(torch.mul(p, lq, out=lp), -1, out=sums[1])
        torch.sum(lq.mul_(q), -1, out=sums[2])
        torch.sum(q.sub_(p).abs_(), -1, out=sums[3])  # reuse q's buffer for |p − q|
    # the variant agrees when the reference's top token is (one of) its top tokens: one max instead of an argmax
    return {
        "nll": -picked[:, 0],
        "kl": -pd,
        "rkl": qd,
        "tv": 0.5 * tv,
        "entropy": -qlogq,
        "top1": picked[:, 1] >= top,
        "max_logq": top,
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
    return logits_q.gather(-1, top_p).squeeze(-1) >= logits_q.amax(-1)

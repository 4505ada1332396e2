"""Speculative sampling (Leviathan et al. 2023; Chen et al. 2023) with KV caches, and plain sampling from the target.

One round, with committed tokens S and γ drafts:

    draft   d₁ … d_γ, each dᵢ ~ q(· | S, d₁ … dᵢ₋₁)                 γ draft forward passes (1 token each, cached)
    target  p₁ … p_{γ+1} = p(· | S, d₁ … dᵢ₋₁) in ONE forward pass  over the uncached tail of S and d₁ … d_γ
    verify  for i = 1 … γ: accept dᵢ with probability min(1, pᵢ(dᵢ)/qᵢ(dᵢ));
            at the first rejection emit x ~ norm(max(0, pᵢ − qᵢ)) and stop;
            when all γ are accepted emit a bonus token x ~ p_{γ+1}

so every round emits between 1 and γ + 1 tokens, each distributed exactly as the target's own samples
(Theorem 1; ``verify.py`` checks it by Monte Carlo). Caches: each model's cache holds a prefix of the committed
sequence; after a round the target's cache is cropped to S + accepted drafts and the draft's to
S + min(accepted, γ − 1) tokens (``DynamicCache.crop`` with a negative count), so no token is computed twice.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from infoeval.engine import CachedModel, crop_to
from infoeval.measure.infotheory import log_softmax_t


def verify_drafts(
    p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, generator: torch.Generator
) -> tuple[int, int | None]:
    """The acceptance rule on one round: ``q`` (m, V) draft probabilities, ``drafts`` (m,) the drafted tokens,
    ``p`` (m + 1, V) target probabilities with the bonus row (or (m, V) without one: the round is cut short).

    Returns (k, x): the first k drafts are accepted and x is the next token (resampled from norm(max(0, p − q))
    at the first rejection, or the bonus drawn from p[m]); x is None when all m were accepted and there is no
    bonus row. Uses m uniform draws, then at most one categorical draw.

    >>> g = torch.Generator().manual_seed(0)
    >>> p = torch.tensor([[0.0, 1.0], [0.5, 0.5]]); q = torch.tensor([[1.0, 0.0]])
    >>> verify_drafts(p, q, torch.tensor([0]), g)  # p(0) = 0: always rejected, resampled from (0, 1)
    (0, 1)
    """
    m = int(drafts.shape[0])
    u = torch.rand(m, generator=generator, dtype=torch.float64)
    idx = torch.arange(m)
    pd, qd = p[idx, drafts].double(), q[idx, drafts].double()
    accept = u * qd < pd  # u < p/q, i.e. probability min(1, p/q)
    k = m if bool(accept.all()) else int((~accept).nonzero()[0, 0])
    if k < m:
        residual = (p[k].double() - q[k].double()).clamp_min(0.0)
        if not residual.sum() > 0:  # only by rounding (p ≤ q everywhere means p = q, which never rejects)
            residual = p[k].double()
        return k, int(torch.multinomial(residual, 1, generator=generator))
    if p.shape[0] > m:
        return m, int(torch.multinomial(p[m].double(), 1, generator=generator))
    return m, None


class Stepper(CachedModel):
    """A cached model whose forward passes return probabilities at temperature T, on the CPU (sampling uses a CPU
    generator on every device; the copy also waits for the device, so the timing is the forward pass's)."""

    def __init__(self, model, temperature: float, width: int | None = None):
        super().__init__(model)
        self.temperature, self.width = temperature, width  # width: the first logits only (``Draft.width``)

    def probs(self, ids: torch.Tensor, keep: int) -> torch.Tensor:
        """Feed ``ids`` (1-D) after the cached tokens; probabilities of the last ``keep`` positions, (keep, V)."""
        return self.logits(ids, keep, lambda z: log_softmax_t(z[..., : self.width], self.temperature).exp().cpu())


@dataclass
class Generation:
    tokens: list[int]
    new_tokens: int
    wall_s: float
    target_calls: int
    target_s: float
    draft_calls: int = 0
    draft_s: float = 0.0
    proposed: int = 0
    accepted: int = 0
    verified: int = 0  # drafts the verifier reached: accepted ones plus the first rejected one of each round
    rounds: list[dict] = field(default_factory=list)  # per round: proposed, accepted, emitted

    @property
    def acceptance(self) -> float:
        """Accepted / proposed drafts (drafts after a rejection count as proposed and not accepted)."""
        return self.accepted / self.proposed if self.proposed else float("nan")

    @property
    def alpha(self) -> float:
        """Per-draft acceptance α̂ = accepted / verified: the estimate of α (i.i.d. acceptances) comparable with
        spec-accept's α; E(α̂, γ) predicts tokens per target call."""
        return self.accepted / self.verified if self.verified else float("nan")


@torch.inference_mode()
def plain_sample(
    target, prompt: torch.Tensor, max_new: int, temperature: float, generator: torch.Generator, width=None
) -> Generation:
    """Sample ``max_new`` tokens from the target alone, one cached forward pass per token (EOS does not stop it),
    over its first ``width`` logits where given (those a draft shares with it)."""
    t0 = time.perf_counter()
    st = Stepper(target, temperature, width)
    seq = prompt.tolist()
    feed = prompt
    for _ in range(max_new):
        p = st.probs(feed, 1)[0]
        x = int(torch.multinomial(p.double(), 1, generator=generator))
        seq.append(x)
        feed = torch.tensor([x], device=prompt.device)
    return Generation(seq, max_new, time.perf_counter() - t0, st.calls, st.seconds)


@torch.inference_mode()
def speculative_sample(
    target, draft, prompt: torch.Tensor, gamma: int, max_new: int, temperature: float, generator: torch.Generator
) -> Generation:
    """Speculative sampling of exactly ``max_new`` new tokens (the last round's drafts are cut to what is left)."""
    t0 = time.perf_counter()
    width = getattr(draft, "width", None)  # heads padded differently: the logits both have
    tg, dr = Stepper(target, temperature, width), Stepper(draft, temperature, width)
    dev = prompt.device
    seq = prompt.tolist()
    gen = Generation([], 0, 0.0, 0, 0.0)
    while len(seq) - len(prompt) < max_new:
        n_s = len(seq)
        g = min(gamma, max_new - (n_s - len(prompt)))
        feed = torch.tensor(seq[dr.length :], device=dev)
        q_rows, drafts = [], []
        for _ in range(g):
            q = dr.probs(feed, 1)[0]
            d = int(torch.multinomial(q.double(), 1, generator=generator))
            q_rows.append(q)
            drafts.append(d)
            feed = torch.tensor([d], device=dev)
        d_t = torch.tensor(drafts, device=dev)
        p = tg.probs(torch.cat([torch.tensor(seq[tg.length :], device=dev), d_t]), g + 1)
        k, x = verify_drafts(p, torch.stack(q_rows), d_t.cpu(), generator)
        seq += drafts[:k] + [x]
        crop_to(tg.cache, n_s + k)
        crop_to(dr.cache, n_s + min(k, g - 1))
        gen.proposed += g
        gen.accepted += k
        gen.verified += k + (k < g)
        gen.rounds.append({"proposed": g, "accepted": k, "emitted": k + 1})
    gen.tokens = seq[: len(prompt) + max_new]
    gen.new_tokens = max_new
    gen.wall_s = time.perf_counter() - t0
    gen.target_calls, gen.target_s = tg.calls, tg.seconds
    gen.draft_calls, gen.draft_s = dr.calls, dr.seconds
    return gen

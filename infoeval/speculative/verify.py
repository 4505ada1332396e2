"""Theorem 1 checked by Monte Carlo: tokens emitted by speculative sampling are distributed as the target's.

On a fixed context c, the first two emitted tokens (x₁, x₂) are drawn N times by each sampler:

* ``target``: directly, x₁ ~ p(·|c), x₂ ~ p(·|c, x₁);
* ``speculative γ=1``: d₁ ~ q(·|c) verified by ``decode.verify_drafts`` with the bonus row p(·|c, d₁); after a
  rejection x₂ comes from a second round at c, x₁;
* ``speculative γ≥2``: d₁ ~ q(·|c), d₂ ~ q(·|c, d₁), both verified by the same rule. Drafts d₃ … d_γ are drawn
  after d₂ and cannot change x₁ or x₂, so every γ ≥ 2 gives the same law for the first two tokens and the check
  draws only d₁ and d₂ (the rows it needs: p and q at c and at c + one token);
* ``draft``: directly from q, to show the test accepts a sampler that matches its hypothesis.

Each sample set is tested (Pearson χ²; cells: the likely pairs (x₁, x₂), "x₁ then any other token" for each likely
x₁, and "other"; see ``cells``) against p's exact joint law p(x₁)·p(x₂|x₁) and against q's. Speculative samples
should not be rejected against p and should be rejected against q (which shows the test has power).
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from infoeval.engine import last_logits
from infoeval.measure.infotheory import log_softmax_t
from infoeval.measure.stats import chi_square
from infoeval.speculative.decode import verify_drafts

MIN_EXPECTED = 5.0
MAX_CELLS = 60


class Oracle:
    """p and q at temperature T after the context and after the context plus one token (memoized, batched)."""

    def __init__(self, target, draft, context: torch.Tensor, temperature: float, batch: int = 64):
        self.target, self.draft, self.context, self.t, self.batch = target, draft, context, temperature, batch
        self.width = getattr(draft, "width", None)  # heads padded differently: the logits both have
        self._p1: dict[int, torch.Tensor] = {}
        self._q1: dict[int, torch.Tensor] = {}
        self.p0 = self._last(target, context[None])[0]
        self.q0 = self._last(draft, context[None])[0]
        self.forwards = 2

    @torch.inference_mode()
    def _last(self, model, ids: torch.Tensor) -> torch.Tensor:
        logits = last_logits(model, ids)[..., : self.width]
        return log_softmax_t(logits, self.t).exp().double().cpu()

    def ensure(self, tokens) -> None:
        """Compute p(·|c, t) and q(·|c, t) for every token t not yet known, ``batch`` sequences per forward pass."""
        todo = sorted({int(t) for t in tokens} - self._p1.keys())
        dev = self.context.device
        for i in range(0, len(todo), self.batch):
            chunk = todo[i : i + self.batch]
            ids = torch.cat([self.context.expand(len(chunk), -1), torch.tensor(chunk, device=dev)[:, None]], dim=1)
            for store, model in ((self._p1, self.target), (self._q1, self.draft)):
                rows = self._last(model, ids)
                for t, r in zip(chunk, rows):
                    store[t] = r
            self.forwards += 2

    def p1(self, t: int) -> torch.Tensor:
        return self._p1[t]

    def q1(self, t: int) -> torch.Tensor:
        return self._q1[t]


def _draw_given(first: np.ndarray, row_of, g: torch.Generator) -> np.ndarray:
    """For each entry t of ``first`` one draw from row_of(t), drawn group by group (same law as one by one)."""
    out = np.empty_like(first)
    for t in np.unique(first):
        where = np.flatnonzero(first == t)
        out[where] = torch.multinomial(row_of(int(t)), where.size, replacement=True, generator=g).numpy()
    return out


def sample_direct(o: Oracle, which: str, n: int, g: torch.Generator) -> np.ndarray:
    """(n, 2) pairs drawn directly from the target (which='p') or the draft ('q')."""
    row0, row1 = (o.p0, o.p1) if which == "p" else (o.q0, o.q1)
    x1 = torch.multinomial(row0, n, replacement=True, generator=g).numpy()
    o.ensure(x1)
    return np.stack([x1, _draw_given(x1, row1, g)], axis=1)


def sample_speculative(o: Oracle, gamma: int, n: int, g: torch.Generator) -> np.ndarray:
    """(n, 2) first two tokens emitted by speculative sampling with ``gamma`` drafts, through ``verify_drafts``."""
    d1 = torch.multinomial(o.q0, n, replacement=True, generator=g).numpy()
    o.ensure(d1)
    d2 = _draw_given(d1, o.q1, g) if gamma >= 2 else None
    out = np.full((n, 2), -1, dtype=np.int64)
    for i in range(n):
        a = int(d1[i])
        if gamma == 1:  # one draft and the bonus row p(·|c, d₁)
            k, x = verify_drafts(torch.stack([o.p0, o.p1(a)]), o.q0[None], torch.tensor([a]), g)
            out[i] = (a, x) if k == 1 else (x, -1)
        else:  # d₁, d₂; the rows after d₂ only matter for x₃ and later
            k, x = verify_drafts(
                torch.stack([o.p0, o.p1(a)]), torch.stack([o.q0, o.q1(a)]), torch.tensor([a, int(d2[i])]), g
            )
            out[i] = (a, d2[i]) if k == 2 else (a, x) if k == 1 else (x, -1)
    todo = np.flatnonzero(out[:, 1] < 0)  # x₁ came from a rejection: a second round at c, x₁ gives x₂
    o.ensure(out[todo, 0])
    if todo.size:
        d = _draw_given(out[todo, 0], o.q1, g)
        for j, i in enumerate(todo):
            a = int(out[i, 0])
            k, x = verify_drafts(o.p1(a)[None], o.q1(a)[None], torch.tensor([int(d[j])]), g)
            out[i, 1] = d[j] if k == 1 else x
    return out


def cells(o: Oracle, n: int, top_first: int = 64) -> list[tuple[int, int]]:
    """Cells of the test, chosen from the two models' exact laws before any sampling: for each first token a that
    p or q gives an expected count N·prob ≥ 5 (among each model's 64 likeliest), the pairs (a, b) that p or q
    expects ≥ 5 times, then (a, −1) for "a followed by any other token"; everything else is the "other" cell.
    At most MAX_CELLS cells, likeliest first tokens first."""
    firsts: list[int] = []
    for row0 in (o.p0, o.q0):
        top = torch.argsort(row0, descending=True)[:top_first].tolist()
        firsts += [a for a in top if n * float(row0[a]) >= MIN_EXPECTED and a not in firsts]
    firsts.sort(key=lambda a: -max(float(o.p0[a]), float(o.q0[a])))
    o.ensure(firsts)
    out: list[tuple[int, int]] = []
    for a in firsts:
        seconds: list[int] = []
        for row0, row1 in ((o.p0, o.p1), (o.q0, o.q1)):
            pa, row = float(row0[a]), row1(a)
            top = torch.argsort(row, descending=True)[:MAX_CELLS].tolist()
            seconds += [b for b in top if n * pa * float(row[b]) >= MIN_EXPECTED and b not in seconds]
        block = [(a, b) for b in seconds] + [(a, -1)]
        if len(out) + len(block) > MAX_CELLS:
            break
        out += block
    return out


def joint(o: Oracle, pairs: list[tuple[int, int]], which: str) -> np.ndarray:
    """Exact probabilities of the cells under p (which='p') or q: p(a)·p(b|a) for (a, b), p(a)·(1 − Σ p(b|a) over
    the cells' b) for (a, −1); then 1 − their sum for "other"."""
    row0, row1 = (o.p0, o.p1) if which == "p" else (o.q0, o.q1)
    probs = []
    for a, b in pairs:
        if b >= 0:
            probs.append(float(row0[a]) * float(row1(a)[b]))
        else:
            listed = [bb for aa, bb in pairs if aa == a and bb >= 0]
            rest = 1.0 - float(row1(a)[listed].sum()) if listed else 1.0
            probs.append(float(row0[a]) * max(0.0, rest))
    probs = np.array(probs, dtype=np.float64)
    return np.append(probs, max(0.0, 1.0 - probs.sum()))


def chi2_against(samples: np.ndarray, pairs: list[tuple[int, int]], probs: np.ndarray) -> dict:
    """χ² of the sample's cell counts against ``probs``; cells with an expected count < 5 join "other"."""
    n = samples.shape[0]
    index = {pair: i for i, pair in enumerate(pairs)}
    counts = np.zeros(len(pairs) + 1)
    for a, b in samples.tolist():
        counts[index.get((a, b), index.get((a, -1), len(pairs)))] += 1
    keep = np.flatnonzero(n * probs[:-1] >= MIN_EXPECTED)
    obs = np.append(counts[keep], n - counts[keep].sum())
    exp = np.append(probs[keep], max(0.0, 1.0 - probs[keep].sum()))
    return {**chi_square(obs, exp), "cells": int(obs.size)}


def theorem1_check(
    target, draft, context: torch.Tensor, temperature: float, n: int, gammas=(1, 4), seed: int = 0
) -> dict:
    """Sample (x₁, x₂) n times per sampler and test each sample set against p and against q."""
    o = Oracle(target, draft, context, temperature)
    pairs = cells(o, n)
    hyp = {"target": joint(o, pairs, "p"), "draft": joint(o, pairs, "q")}
    samplers = [("target", lambda g: sample_direct(o, "p", n, g))]
    samplers += [(f"speculative γ={gm}", functools.partial(sample_speculative, o, gm, n)) for gm in gammas]
    samplers += [("draft", lambda g: sample_direct(o, "q", n, g))]
    rows = []
    for i, (name, draw) in enumerate(samplers):
        samples = draw(torch.Generator().manual_seed(seed + i))
        rows.append(
            {"sampler": name, "samples": n, **{f"vs_{h}": chi2_against(samples, pairs, pr) for h, pr in hyp.items()}}
        )
    return {
        "context_tokens": int(context.numel()),
        "temperature": temperature,
        "samples": n,
        "seed": seed,
        "cells": [
            {"x1": a, "x2": b if b >= 0 else None, "p": float(hyp["target"][i]), "q": float(hyp["draft"][i])}
            for i, (a, b) in enumerate(pairs)
        ],
        "other_p": float(hyp["target"][-1]),
        "other_q": float(hyp["draft"][-1]),
        "forward_passes": o.forwards,
        "rows": rows,
    }

"""Theorem 1 by Monte Carlo through the production sampler: the first three tokens emitted by
``speculative_sample`` (its own draft and target forward passes, its rows of p, the tokens it appends and the KV
cache crops between rounds) are distributed exactly as the target's, p(x₁)·p(x₂|x₁)·p(x₃|x₁,x₂).

``verify.py`` checks the theorem with its own sampling round built from memoized rows; this test instead calls
``speculative_sample`` N times on a fixed prompt (γ = 2, 3 new tokens: a round can accept both drafts and add the
bonus token, or stop after 0 or 1 of them, crop both caches and start a second, and even a third, round), and
compares the sampled triples with the target's exact law, computed here by uncached forward passes over the
prompt plus each prefix. Cells: the likely triples, "this likely pair then anything else", "this likely first token
then anything else" and "everything else", all chosen from p alone before sampling.

Power: the same cells and statistic reject N triples drawn by ``plain_sample`` from the draft itself, and reject the
speculative samples when they are tested against the draft's law.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from infoeval.measure.stats import chi_square
from infoeval.models import load_model
from infoeval.speculative.decode import plain_sample, speculative_sample
from infoeval.speculative.drafts import DraftSettings, build_draft

CPU = torch.device("cpu")
PROMPT = "The dictionary maps keys"
TEMPERATURE = (
    0.5  # concentrates the law enough for N samples to fill cells of pairs and triples (T = 1: first tokens only)
)
GAMMA, NEW = 2, 3
N = 3000
MIN_EXPECTED = 5.0

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]


@pytest.fixture(scope="module")
def models(tiny_llama_dir):
    llama = load_model(str(tiny_llama_dir), CPU, torch.float32)
    draft = build_draft(llama, DraftSettings(layers=1), CPU, torch.float32)  # 1 of the 2 layers: often rejected
    prompt = torch.tensor(llama.tokenizer(PROMPT).input_ids)
    return llama, draft, prompt


# ------------------------------------------------------------------------------------------- exact laws
@torch.inference_mode()
def next_probs(model, prompt: torch.Tensor, prefixes: list[tuple[int, ...]]) -> torch.Tensor:
    """p(· | prompt, prefix) for each prefix (all of one length), float64, by one uncached forward pass."""
    ids = torch.tensor([prompt.tolist() + list(pre) for pre in prefixes])
    logits = model(input_ids=ids, use_cache=False).logits[:, -1].double()
    return torch.softmax(logits / TEMPERATURE, dim=-1)


class Law:
    """A model's exact law of the first three tokens after the prompt, on the cells of a partition.

    ``cells`` lists keys (a, b, c), (a, b, None), (a, None, None) and (None, None, None) ("everything else");
    ``probs`` their probabilities (summing to 1). ``cell_of`` maps a sampled triple to its cell's index."""

    def __init__(self, model, prompt: torch.Tensor, n: int, chooser: Law | None = None):
        """Cells are chosen from this law (expected count n·prob ≥ 5 for each listed first token, pair and triple),
        or copied from ``chooser`` (so that two laws are compared on the same cells)."""
        p1 = next_probs(model, prompt, [()])[0]
        vocab = p1.numel()
        p2 = next_probs(model, prompt, [(a,) for a in range(vocab)])  # row a: p(· | a)
        if chooser is None:
            firsts = [a for a in range(vocab) if n * p1[a] >= MIN_EXPECTED]
            pairs = [(a, b) for a in firsts for b in range(vocab) if n * p1[a] * p2[a, b] >= MIN_EXPECTED]
        else:
            firsts, pairs = chooser.firsts, chooser.pairs
        p3 = next_probs(model, prompt, pairs) if pairs else torch.empty(0, vocab, dtype=torch.float64)
        if chooser is None:
            triples = [
                (a, b, c)
                for (a, b), row in zip(pairs, p3)
                for c in range(vocab)
                if n * p1[a] * p2[a, b] * row[c] >= MIN_EXPECTED
            ]
        else:
            triples = chooser.triples
        self.firsts, self.pairs, self.triples = firsts, pairs, triples
        row3 = dict(zip(pairs, p3))
        probs: dict[tuple, float] = {}
        for a, b, c in triples:
            probs[(a, b, c)] = float(p1[a] * p2[a, b] * row3[(a, b)][c])
        for a, b in pairs:
            listed = [c for aa, bb, c in triples if (aa, bb) == (a, b)]
            probs[(a, b, None)] = float(p1[a] * p2[a, b] * (1 - row3[(a, b)][listed].sum()))
        for a in firsts:
            listed = [b for aa, b in pairs if aa == a]
            probs[(a, None, None)] = float(p1[a] * (1 - p2[a, listed].sum()))
        probs[(None, None, None)] = float(1 - p1[firsts].sum())
        self.cells = list(probs)
        self.probs = np.array([max(0.0, probs[k]) for k in self.cells])
        self.index = {k: i for i, k in enumerate(self.cells)}

    def cell_of(self, triple) -> int:
        a, b, c = triple
        for key in ((a, b, c), (a, b, None), (a, None, None)):
            if key in self.index:
                return self.index[key]
        return self.index[(None, None, None)]

    def test(self, samples: list[tuple[int, int, int]]) -> dict:
        """Pearson χ² of the samples' cell counts against this law; cells expecting < 5 are pooled into one."""
        counts = np.zeros(len(self.cells))
        for t in samples:
            counts[self.cell_of(t)] += 1
        n = len(samples)
        big = n * self.probs >= MIN_EXPECTED
        obs = np.append(counts[big], counts[~big].sum())
        exp = np.append(self.probs[big], self.probs[~big].sum())
        return {**chi_square(obs, exp), "cells": int(obs.size)}


@pytest.fixture(scope="module")
def laws(models):
    llama, draft, prompt = models
    p = Law(llama.model, prompt, N)
    return p, Law(draft, prompt, N, chooser=p)


def _triples(gens, prompt) -> list[tuple[int, int, int]]:
    return [tuple(g.tokens[len(prompt) : len(prompt) + NEW]) for g in gens]


@pytest.fixture(scope="module")
def speculative_samples(models):
    llama, draft, prompt = models
    g = torch.Generator().manual_seed(0)
    gens = [speculative_sample(llama.model, draft, prompt, GAMMA, NEW, TEMPERATURE, g) for _ in range(N)]
    return gens, _triples(gens, prompt)


def test_exact_laws_and_cells(laws):
    p, q = laws
    assert p.probs.sum() == pytest.approx(1.0, abs=1e-9) and q.probs.sum() == pytest.approx(1.0, abs=1e-9)
    assert p.cells == q.cells and len(p.triples) >= 10 and len(p.pairs) >= 10
    assert np.abs(p.probs - q.probs).sum() > 0.2  # the two laws differ on these cells: the test can tell them apart


def test_samples_take_every_path_of_the_sampler(speculative_samples):
    """Between them the N runs accept 0, 1 and 2 drafts in the first round, so the second round starts after
    every kind of crop, and some runs need three rounds."""
    gens, _ = speculative_samples
    first = {g.rounds[0]["accepted"] for g in gens}
    assert first == {0, 1, 2}
    assert {len(g.rounds) for g in gens} == {1, 2, 3}
    assert all(g.rounds[0]["proposed"] == GAMMA and g.new_tokens == NEW for g in gens)


def test_theorem1_speculative_samples_follow_the_target(laws, speculative_samples):
    p, q = laws
    _, triples = speculative_samples
    vs_p, vs_q = p.test(triples), q.test(triples)
    assert vs_p["df"] >= 20, vs_p
    assert vs_p["p_value"] > 0.01, vs_p
    assert vs_q["p_value"] < 1e-6, vs_q  # … and not the draft


def test_power_draft_samples_are_rejected(models, laws):
    """The same statistic on N triples from the draft alone: rejected against the target, accepted against the draft."""
    llama, draft, prompt = models
    p, q = laws
    g = torch.Generator().manual_seed(1)
    triples = _triples([plain_sample(draft, prompt, NEW, TEMPERATURE, g) for _ in range(N)], prompt)
    assert p.test(triples)["p_value"] < 1e-6
    assert q.test(triples)["p_value"] > 0.01

"""Mutual information: the estimator on sources whose MI is known in closed form, against brute force on a real
(tiny) transformer, the pipeline's bookkeeping, and the command."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
from tiny_models import as_json, requires_smollm2

from infoeval.errors import DataError, UsageError
from infoeval.input.settings import ModelSettings, TextSettings
from infoeval.models import load_model
from infoeval.mutual_information.estimator import (
    blocks_per_length,
    check_blocks,
    check_max_positions,
    cut_blocks,
    estimate,
    parse_lengths,
    score_blocks,
    summarize,
)
from infoeval.mutual_information.mutual_info import MISettings, check_settings, run_mutual_info

NEG = -1e4  # a logit that makes a token's probability exp(−1e4) = 0 in float32


class _ToyLM(torch.nn.Module):
    """The causal-LM call signature: model(input_ids=(B, T), use_cache, logits_to_keep=k) → .logits (B, k, V)."""

    def logits(self, ids: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, input_ids, use_cache=False, logits_to_keep=0):
        out = self.logits(input_ids)
        return SimpleNamespace(logits=out[:, -logits_to_keep:] if logits_to_keep else out)


class NoisyCopy(_ToyLM):
    """Tokens 0…V−1, start token V. Token t of a sequence repeats token t − m with probability 1 − ε (ε spread
    evenly over the other V − 1); without a token m back it is uniform. This is the exact law of blocks whose
    X is uniform and whose Y copies X through that channel, so I(X;Y) = m·(log₂V − h(ε) − ε·log₂(V−1))."""

    def __init__(self, vocab: int, m: int, eps: float):
        super().__init__()
        self.v, self.m, self.eps = vocab, m, eps

    def logits(self, ids):
        b, t = ids.shape
        out = torch.full((b, t, self.v + 1), 0.0)
        out[..., self.v] = NEG  # never predict the start token
        for j in range(
            self.m, t
        ):  # logit j predicts input j + 1, which repeats input j + 1 − m (≥ 1: not the start token)
            src = ids[:, j + 1 - self.m]
            if self.eps == 0:
                row = torch.full((b, self.v + 1), NEG)
                row.scatter_(1, src[:, None], 0.0)
            else:
                row = torch.full((b, self.v + 1), math.log(self.eps / (self.v - 1)))
                row.scatter_(1, src[:, None], math.log(1 - self.eps))
                row[:, self.v] = NEG
            out[:, j] = row
        return out


def copy_blocks(n: int, vocab: int, m: int, eps: float, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, vocab, (n, m), generator=g)
    flip = torch.rand(n, m, generator=g) < eps
    other = (x + torch.randint(1, vocab, (n, m), generator=g)) % vocab  # uniform over the other V − 1 tokens
    return torch.cat([x, torch.where(flip, other, x)], 1)


class Markov(_ToyLM):
    """A stationary Markov chain on V states with start token V: after the start token the stationary law π,
    after state a the row P[a]. Blocks cut from one long chain have I(X;Y) = I(x_m; y_1) = H(π) − Σ π_a H(P_a)
    for every length (the Markov property), which the estimator must find at each L."""

    def __init__(self, P: torch.Tensor):
        super().__init__()
        evals, evecs = np.linalg.eig(P.numpy().T)
        pi = np.real(evecs[:, np.argmin(np.abs(evals - 1))])
        self.P, self.pi = P, torch.tensor(pi / pi.sum(), dtype=torch.float64)
        self.v = P.shape[0]
        table = torch.cat([P.log(), self.pi.log()[None]]).float()  # (V + 1, V): row V follows the start token
        self.table = torch.cat([table, torch.full((self.v + 1, 1), NEG)], 1)  # the start token is never predicted

    def logits(self, ids):
        return self.table[ids]

    def sample(self, n: int, seed: int) -> torch.Tensor:
        rng = np.random.default_rng(seed)
        P = self.P.numpy()
        s = [rng.choice(self.v, p=self.pi.numpy())]
        for _ in range(n - 1):
            s.append(rng.choice(self.v, p=P[s[-1]]))
        return torch.tensor(s)

    def mi_bits(self) -> float:
        H = lambda p: float(-(p * p.log2()).sum())  # noqa: E731
        return H(self.pi) - sum(float(self.pi[a]) * H(self.P[a].double()) for a in range(self.v))


# ---------------------------------------------------------------------------------- closed-form sources
@pytest.mark.parametrize("length", [4, 16, 64])
def test_exact_copy_gives_half_length_times_log2_vocab(length):
    vocab, m = 8, length // 2
    blocks = copy_blocks(20, vocab, m, 0.0, seed=length)
    s = summarize(length, *score_blocks(NoisyCopy(vocab, m, 0.0), blocks, vocab, batch_tokens=3 * length))
    np.testing.assert_allclose(s.mi_bits, m * math.log2(vocab), rtol=1e-6)
    row = s.row()
    assert row["mi_bits_se"] == pytest.approx(0, abs=1e-4)
    assert row["marginal_bits_per_token"] == pytest.approx(3.0, rel=1e-6)
    assert row["conditional_bits_per_token"] == pytest.approx(0.0, abs=1e-6)


def test_noisy_copy_is_recovered_within_its_standard_error():
    vocab, length, eps = 8, 16, 0.2
    m = length // 2
    h = -eps * math.log2(eps) - (1 - eps) * math.log2(1 - eps)
    truth = m * (math.log2(vocab) - h - eps * math.log2(vocab - 1))  # 8·(3 − 0.7219 − 0.5615) = 13.73 bits
    s = summarize(length, *score_blocks(NoisyCopy(vocab, m, eps), copy_blocks(400, vocab, m, eps, seed=1), vocab))
    row = s.row()
    assert row["mi_bits_se"] > 0.05
    assert abs(row["mi_bits"] - truth) < 3 * row["mi_bits_se"], (row["mi_bits"], truth, row["mi_bits_se"])
    per_token = h + eps * math.log2(vocab - 1)
    assert abs(row["conditional_bits_per_token"] - per_token) < 3 * row["conditional_bits_per_token_se"]


def test_markov_chain_is_recovered_at_every_length():
    P = torch.tensor([[0.8, 0.15, 0.05], [0.1, 0.6, 0.3], [0.3, 0.3, 0.4]], dtype=torch.float64)
    model = Markov(P)
    truth = model.mi_bits()
    lengths, n = (4, 8, 32), 300
    out = estimate(model, model.sample(n * 32, seed=0), start_id=3, lengths=lengths, n_blocks=n, batch_tokens=4096)
    assert [s.length for s in out] == list(lengths) and all(s.blocks == n for s in out)
    for s in out:
        row = s.row()
        assert abs(row["mi_bits"] - truth) < 3 * row["mi_bits_se"], (s.length, row["mi_bits"], truth, row["mi_bits_se"])


def test_summarize_worked_example():
    s = summarize(4, np.array([[math.log(4), math.log(2)]]), np.array([[0.0, math.log(2)]]))
    assert (float(s.marginal_bits[0]), float(s.conditional_bits[0]), float(s.mi_bits[0])) == pytest.approx(
        (3.0, 1.0, 2.0)
    )
    np.testing.assert_allclose(s.marginal_profile, [2.0, 1.0])


# ---------------------------------------------------------------------------------- block bookkeeping
def test_blocks_start_together_and_never_overlap():
    assert blocks_per_length(100, [16, 64], 4) == {16: 2, 64: 1}
    assert blocks_per_length(10_000, [16, 64], 4) == {16: 4, 64: 4}
    assert blocks_per_length(10, [16], 4) == {16: 0}
    ids = torch.arange(300)
    assert cut_blocks(ids, 16, 3, 64).tolist() == [list(range(k * 64, k * 64 + 16)) for k in range(3)]


def test_too_few_blocks_name_the_length():
    with pytest.raises(DataError, match=r"lengths 64: fewer than 2 blocks fit in the 100 text tokens"):
        check_blocks(blocks_per_length(100, [16, 64], 4), 100)


def test_parse_lengths():
    assert parse_lengths("64,16, 32") == (16, 32, 64)
    for bad in ("15", "0", "16,16", "16,x", "", "-4"):
        with pytest.raises(UsageError):
            parse_lengths(bad)


def test_setting_and_position_checks():
    check_max_positions([16, 512], 512)
    check_max_positions([16, 4096], None)
    with pytest.raises(UsageError, match="exceeds the model's 512 positions"):
        check_max_positions([16, 1024], 512)
    for bad in ({"blocks": 1}, {"batch_tokens": 0}, {"bootstrap": 1}, {"prefix": "none"}):
        with pytest.raises(UsageError):
            check_settings(MISettings(**bad))


# ---------------------------------------------------------------------------------- a real transformer
@pytest.fixture(scope="module")
def tiny_llama(tiny_llama_dir):
    return load_model(str(tiny_llama_dir), torch.device("cpu"), torch.float32)


def test_batched_scoring_matches_brute_force(tiny_llama):
    """Each block alone, full logits, log-softmax by hand: the same NLLs as the batched, logits_to_keep path."""
    model = tiny_llama.model
    blocks = torch.randint(3, 512, (5, 12), generator=torch.Generator().manual_seed(0))
    marg, cond = score_blocks(model, blocks, start_id=0, batch_tokens=1000)
    marg1, cond1 = score_blocks(model, blocks, start_id=0, batch_tokens=1)
    np.testing.assert_allclose(marg, marg1, atol=2e-5)
    np.testing.assert_allclose(cond, cond1, atol=2e-5)
    with torch.no_grad():
        for i, b in enumerate(blocks):
            seq = torch.cat([torch.tensor([0]), b])
            lp = torch.log_softmax(model(input_ids=seq[None, :-1]).logits[0].double(), -1)  # predicts seq[1:]
            np.testing.assert_allclose(cond[i], -lp[6:].gather(1, b[6:, None])[:, 0].numpy(), atol=2e-5)
            yseq = torch.cat([torch.tensor([0]), b[6:]])
            lpy = torch.log_softmax(model(input_ids=yseq[None, :-1]).logits[0].double(), -1)
            np.testing.assert_allclose(marg[i], -lpy.gather(1, b[6:, None])[:, 0].numpy(), atol=2e-5)


@pytest.fixture(scope="module")
def tiny_run(tiny_llama_dir, tiny_text, tmp_path_factory):
    path = tmp_path_factory.mktemp("mi") / "tiny.txt"
    path.write_text(tiny_text, encoding="utf-8")
    model_settings = ModelSettings(str(tiny_llama_dir), "cpu", "float32")
    s = MISettings(lengths=(8, 16, 32), blocks=6, bootstrap=200)
    return path, as_json(run_mutual_info(model_settings, TextSettings(text=path), s)), model_settings


def test_pipeline_records_blocks_and_their_positions(tiny_run, tiny_llama):
    path, result, _ = tiny_run
    pr = result["provenance"]["protocol"]
    assert pr["prefix_id"] == 0 and pr["prefix_token"].startswith("BOS") and pr["blocks"] == {"8": 6, "16": 6, "32": 6}
    blocks = pd.DataFrame(result["blocks"])
    assert len(blocks) == 18 and set(blocks["length"]) == {8, 16, 32}
    assert (blocks["x_start"] == 1 + 32 * blocks["block"]).all()
    assert (blocks["y_start"] - blocks["x_start"] == blocks["length"] // 2).all()
    assert (blocks["end"] - blocks["x_start"] == blocks["length"]).all()
    raw = path.read_text(encoding="utf-8").encode("utf-8")
    ids = tiny_llama.tokenizer(path.read_text(encoding="utf-8"), add_special_tokens=False)["input_ids"]
    for r in blocks.itertuples():  # the bytes recorded for a block are the text its tokens spell
        assert tiny_llama.tokenizer.decode(ids[r.x_start - 1 : r.end - 1]) == raw[r.byte_start : r.byte_end].decode()
    for row in result["lengths"]:
        mine = blocks[blocks["length"] == row["length"]]
        assert row["mi_bits"] == pytest.approx(mine["mi_bits"].mean())
        assert row["mi_bits_se"] == pytest.approx(mine["mi_bits"].std(ddof=1) / math.sqrt(len(mine)))
        np.testing.assert_allclose(mine["mi_bits"], mine["marginal_bits"] - mine["conditional_bits"], atol=1e-9)
        assert len(row["marginal_profile_bits"]) == row["length"] // 2
    # 6 blocks are few: on this text the mean MI is positive at lengths 8 and 16 and negative (noise) at 32, so the
    # power law is fitted through exactly those two points, and 32 is reported as dropped
    mi = {row["length"]: row["mi_bits"] for row in result["lengths"]}
    assert mi[8] > 0 and mi[16] > 0 and mi[32] < 0, mi
    assert result["fit"]["lengths_fitted"] == [8, 16] and result["fit"]["lengths_dropped"] == [32]
    fit = result["fit"]["fit"]
    assert fit["beta"] == pytest.approx(math.log(mi[16] / mi[8]) / math.log(2), rel=1e-9)  # the line through both
    assert fit["a"] == pytest.approx(mi[8] / 8 ** fit["beta"], rel=1e-9) and fit["r2"] == pytest.approx(1.0)
    assert fit["beta_low"] <= fit["beta"] <= fit["beta_high"]


def test_pipeline_limits(tiny_run, tiny_qwen3_dir):
    path, _, ms = tiny_run
    with pytest.raises(DataError, match="lengths 64: fewer than 2 blocks fit in the 100 text tokens"):
        as_json(run_mutual_info(ms, TextSettings(text=path, max_tokens=100), MISettings(lengths=(8, 64), blocks=10)))
    with pytest.raises(UsageError, match="exceeds the model's 512 positions"):
        as_json(run_mutual_info(ms, TextSettings(text=path), MISettings(lengths=(8, 1024), blocks=2)))
    qwen = as_json(
        run_mutual_info(
            ModelSettings(str(tiny_qwen3_dir), "cpu", "float32"),
            TextSettings(text=path, max_tokens=40),
            MISettings(lengths=(4, 8), blocks=5, bootstrap=50),
        )
    )
    pr = qwen["provenance"]["protocol"]
    assert pr["prefix_token"].startswith("EOS") and pr["prefix_id"] == 0 and pr["blocks"] == {"4": 5, "8": 5}


@pytest.mark.slow  # two command-line subprocesses
def test_command_writes_json_csv_and_blocks(tiny_llama_dir, tiny_run, tmp_path):
    path = tiny_run[0]
    env = {k: v for k, v in os.environ.items() if k != "INFOEVAL_DEBUG"}
    common = ["mutual-info", "--model", tiny_llama_dir, "--text", path, "-q"]
    good = common + [
        "--lengths",
        "8,16,32",
        "--blocks",
        "6",
        "--bootstrap",
        "200",
        "--json",
        tmp_path / "r.json",
        "--csv",
        tmp_path / "s.csv",
        "--positions",
        tmp_path / "b.csv",
    ]
    too_long = common + ["--lengths", "8,4096", "--blocks", "2"]  # fails after loading: the model has 512 positions
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "infoeval", *map(str, a)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for a in (good, too_long)
    ]
    (out, err), (_, bad_err) = (p.communicate(timeout=300) for p in procs)
    assert procs[0].returncode == 0, err
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["lengths"][0]["mi_bits"] == pytest.approx(tiny_run[1]["lengths"][0]["mi_bits"], rel=1e-6)
    assert (
        result["provenance"]["argv"][1] == "mutual-info"
        and result["provenance"]["model"]["architecture"] == "LlamaForCausalLM"
    )
    summary, blocks = pd.read_csv(tmp_path / "s.csv"), pd.read_csv(tmp_path / "b.csv")
    assert summary["length"].tolist() == [8, 16, 32] and len(blocks) == 18
    beta = result["fit"]["fit"]["beta"]  # fitted, as in tiny_run (same text and settings)
    assert f"β = {beta:.3f}" in out and "no power-law fit" not in out, out
    assert procs[1].returncode == 2 and bad_err.strip().count("\n") == 0 and "4096" in bad_err, bad_err


# ---------------------------------------------------------------------------------- the real model
@pytest.mark.slow
@requires_smollm2
def test_smollm2_past_informs_the_future():
    result = as_json(
        run_mutual_info(
            ModelSettings("smollm2-135m", "cpu", "float32"),
            TextSettings(),
            MISettings(lengths=(16, 64), blocks=4, bootstrap=200),
        )
    )
    assert result["provenance"]["protocol"]["prefix_token"].startswith("BOS")
    for row in result["lengths"]:
        assert row["blocks"] == 4
        assert row["conditional_bits_per_token"] < row["marginal_bits_per_token"]
        assert row["mi_bits"] > 2 * row["mi_bits_se"] > 0
    assert result["lengths"][1]["mi_bits"] > result["lengths"][0]["mi_bits"]

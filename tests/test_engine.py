"""The forward stage: batches and their rows, lazy roles, the finiteness check, and the sharding seam (any subset of
batches fills exactly its own rows with the numbers of a full run)."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from infoeval import engine
from infoeval.errors import RuntimeFailure
from infoeval.input.windows import Window, rolling_windows


class _Out:
    def __init__(self, logits):
        self.logits = logits


class ToyLM(torch.nn.Module):
    """Logits that depend on the whole prefix (a running sum), so a wrong window shows up in the numbers."""

    def __init__(self, vocab: int = 11, poison: bool = False):
        super().__init__()
        self.emb = torch.nn.Parameter(torch.randn(vocab, vocab, generator=torch.Generator().manual_seed(0)))
        self.poison, self.calls = poison, 0

    def forward(self, input_ids, use_cache=False, logits_to_keep=0):
        self.calls += 1
        h = self.emb[input_ids].cumsum(1)  # (B, T, V)
        h = h[:, -logits_to_keep:] if isinstance(logits_to_keep, int) else h[:, logits_to_keep]
        if self.poison:
            h = h.clone()
            h[0, 0, 0] = float("nan")
        return _Out(h)


def _nll(step: engine.Step) -> dict:
    lp = torch.log_softmax(step.logits["m"].float(), -1)
    return {"nll": -lp.gather(-1, step.targets[..., None])[..., 0].reshape(-1)}


def test_plan_numbers_rows_in_window_order_and_checks_batches():
    ws = rolling_windows(30, 8)
    batches = engine.plan(ws)
    assert [b.rows.start for b in batches] == [0, 8, 16, 24] and batches[-1].rows.stop == 29
    with pytest.raises(ValueError):
        engine.plan(ws, per_batch=4)  # the last window is shorter: cannot be batched with the others
    same = [Window(k, 4 * k, 4, 2, 2) for k in range(3)]  # scored positions are the last two of each
    assert [b.rows for b in engine.plan(same, 2)] == [slice(0, 4), slice(4, 6)]


def test_columns_match_brute_force_and_identity_columns():
    stream = torch.randint(0, 11, (40,), generator=torch.Generator().manual_seed(1))
    model = ToyLM()
    ws = rolling_windows(len(stream), 8, 5)
    cols = engine.run({"m": model}, stream, engine.plan(ws), None, _nll)
    expected, rows = [], 0
    for w in ws:
        ids = stream[w.start : w.start + w.length][None]
        lp = torch.log_softmax(model(ids, logits_to_keep=w.logit_index).logits[0], -1)
        tgt = stream[w.target_slice]
        expected.append(-lp.gather(-1, tgt[:, None])[:, 0])
        assert cols["position"][rows : rows + w.n_scored].tolist() == list(
            range(w.first_target, w.first_target + w.n_scored)
        )
        rows += w.n_scored
    np.testing.assert_array_equal(cols["nll"], torch.cat(expected).detach().numpy())
    assert cols["token_id"].tolist() == stream[1:].tolist()  # every target exactly once, in order


def test_a_shard_fills_its_own_rows_with_the_full_runs_numbers():
    stream = torch.randint(0, 11, (50,), generator=torch.Generator().manual_seed(2))
    batches = engine.plan(rolling_windows(len(stream), 6))
    full = engine.run({"m": ToyLM()}, stream, batches, None, _nll)
    n = full["nll"].shape[0]
    merged = np.zeros(n, np.float32)
    for rank in range(3):
        shard = engine.run({"m": ToyLM()}, stream, batches[rank::3], None, _nll, n_rows=n)
        for b in batches[rank::3]:
            merged[b.rows] = shard["nll"][b.rows]
    np.testing.assert_array_equal(merged, full["nll"])


def test_roles_run_only_when_asked_and_non_finite_logits_fail():
    stream = torch.arange(20) % 11
    used, unused = ToyLM(), ToyLM()
    engine.run({"m": used, "other": unused}, stream, engine.plan(rolling_windows(20, 8)), None, _nll)
    assert used.calls == 3 and unused.calls == 0
    with pytest.raises(RuntimeFailure, match="m produced non-finite logits in window 0"):
        engine.run({"m": ToyLM(poison=True)}, stream, engine.plan(rolling_windows(20, 8)), None, _nll)


class SlowLM(ToyLM):
    """A ToyLM whose every forward pass takes at least ``seconds``."""

    def __init__(self, seconds: float):
        super().__init__()
        self.seconds = seconds

    def forward(self, *args, **kw):
        time.sleep(self.seconds)
        return super().forward(*args, **kw)


def test_the_clock_splits_the_time_between_the_forwards_and_the_reducer():
    stream = torch.arange(20) % 11
    batches = engine.plan(rolling_windows(20, 8))  # 3 windows
    forward, work = 0.2, 0.1

    def slow_reducer(step):
        out = _nll(step)  # asks for the logits: a forward pass inside the reducer, which is not the reducer's time
        time.sleep(work)
        return out

    clock = engine.Clock()
    t0 = time.perf_counter()
    engine.run({"m": SlowLM(forward)}, stream, batches, None, slow_reducer, clock=clock)
    wall = time.perf_counter() - t0
    assert clock.measured and clock.forward_s + clock.reduce_s <= wall
    assert clock.forward_s >= 3 * forward
    assert 3 * work <= clock.reduce_s < 3 * work + 3 * forward / 2  # counting the forwards in would give ≥ 0.9 s
    assert clock.timings() == {"eval_forward_s": clock.forward_s, "eval_statistics_s": clock.reduce_s}
    assert engine.Clock().timings() == {}  # not measured: nothing to report

"""infoeval.input.windows: every target scored exactly once, by a logit that really predicts it, with the promised
context; the llama.cpp chunk arithmetic; the error cases; describe()'s counts against a brute-force tally.

The stream used is ``stream[i] = 1000 + i`` so a token id names its own position.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from infoeval.errors import DataError, UsageError
from infoeval.input.windows import (
    Window,
    describe,
    gptq_windows,
    llamacpp_windows,
    lmeval_windows,
    rolling_windows,
    window_inputs,
    window_targets,
)

BASE = 1000


def _stream(n: int) -> torch.Tensor:
    return torch.arange(n, dtype=torch.int64) + BASE


def _scored(windows: list[Window], n: int) -> dict[int, tuple[int, int]]:
    """Brute-force replay of the windows: stream position → (window index, context length), asserting each
    scored logit is inside its window and predicts the token right after its input position."""
    stream = _stream(n)
    seen: dict[int, tuple[int, int]] = {}
    for w in windows:
        inputs = window_inputs(stream, w, bos_id=None)[0]
        targets = window_targets(stream, w)
        assert inputs.shape[0] == w.length
        assert targets.shape[0] == w.n_scored
        assert inputs.tolist() == list(range(BASE + w.start, BASE + w.start + w.length))
        for k, j in enumerate(w.logit_index.tolist()):
            assert 0 <= j < w.length  # the logit exists in this window
            t = w.start + j + 1  # logit j predicts stream[start + j + 1] …
            assert int(targets[k]) == BASE + t  # … and that is exactly the target handed out
            assert int(inputs[j]) == BASE + t - 1  # its last input is the token just before
            assert t not in seen, f"target {t} scored twice"
            seen[t] = (w.index, j + 1)
    return seen


ROLLING_CASES = [
    (n, ctx, stride)
    for n, ctx in itertools.product([2, 3, 4, 5, 11, 17, 64, 101], [2, 3, 4, 7, 16, 64])
    for stride in sorted({1, 2, ctx // 2, ctx - 1, ctx} - {0})
    if 1 <= stride <= ctx
]


@pytest.mark.parametrize("n,ctx,stride", ROLLING_CASES)
def test_rolling_scores_every_target_exactly_once(n, ctx, stride):
    """Targets 1 … n−1 each scored once; windows ≤ ctx long; starts advance by stride; context ≥ min(t, C−S+1)."""
    ws = rolling_windows(n, ctx, stride)
    seen = _scored(ws, n)
    assert sorted(seen) == list(range(1, n))
    assert [w.index for w in ws] == list(range(len(ws)))
    for k, w in enumerate(ws):
        assert 1 <= w.length <= ctx
        assert w.start == k * stride
        assert w.n_scored >= 1
        assert w.start + w.length <= n - 1  # the last input is n−2: its logit predicts token n−1
        assert not w.replace_first_with_bos
    for t, (_, context) in seen.items():
        assert context <= ctx
        assert context >= min(t, ctx - stride + 1), (t, context)
        if t <= ctx:
            assert context == t  # the first window sees everything from the start of the stream
    # scoring order is stream order (the columns are written in this order)
    order = [w.start + j + 1 for w in ws for j in w.logit_index.tolist()]
    assert order == list(range(1, n))


def test_rolling_docstring_example():
    """L = 11, C = S = 4: windows [0:4] scores t1–t4, [4:8] scores t5–t8, [8:10] scores t9–t10."""
    ws = rolling_windows(11, 4, 4)
    assert [(w.start, w.length, w.first_target, w.n_scored) for w in ws] == [(0, 4, 1, 4), (4, 4, 5, 4), (8, 2, 9, 2)]
    assert describe(ws, 11)["min_context"] == 1


def test_rolling_window_count_closed_form():
    """With S = C the windows are ceil((n−1)/C); with S < C they are 1 + ceil((n−1−C)/S) once n−1 > C."""
    for n, c in itertools.product(range(2, 40), range(2, 9)):
        assert len(rolling_windows(n, c)) == -(-(n - 1) // c)
        for s in range(1, c + 1):
            expected = 1 if n - 1 <= c else 1 + -(-(n - 1 - c) // s)
            assert len(rolling_windows(n, c, s)) == expected, (n, c, s)


def test_rolling_stride_default_is_ctx():
    """stride=None means non-overlapping windows (stride = ctx)."""
    assert rolling_windows(50, 8) == rolling_windows(50, 8, 8)


def test_rolling_stride_one_is_maximal_context():
    """S = 1: after the first window every token is scored with exactly ctx tokens of context."""
    n, c = 40, 6
    seen = _scored(rolling_windows(n, c, 1), n)
    assert all(ctx == min(t, c) for t, (_, ctx) in seen.items())


@pytest.mark.parametrize(
    "n,ctx,stride,exc",
    [
        (100, 1, None, UsageError),
        (100, 0, None, UsageError),
        (100, -3, None, UsageError),
        (100, 8, 9, UsageError),
        (100, 8, 0, UsageError),
        (100, 8, -1, UsageError),
        (1, 8, 4, DataError),
        (0, 8, 4, DataError),
    ],
)
def test_rolling_errors(n, ctx, stride, exc):
    """ctx < 2, stride outside 1 … ctx → UsageError; fewer than 2 tokens → DataError; one-line messages."""
    with pytest.raises(exc) as e:
        rolling_windows(n, ctx, stride)
    assert "\n" not in str(e.value)


def test_rolling_option_errors_checked_before_data():
    """A bad option is reported even when the text is also too short (the user fixes options first)."""
    with pytest.raises(UsageError):
        rolling_windows(1, 1)


# --------------------------------------------------------------------------------------------- llama.cpp


@pytest.mark.parametrize("ctx", [4, 5, 6, 7, 8, 16, 33, 512])
@pytest.mark.parametrize("extra", [0, 1, 3])
def test_llamacpp_chunks(ctx, extra):
    """n // ctx chunks of ctx tokens (partial tail dropped); chunk k scores its tokens ctx//2+1 … ctx−1,
    i.e. ctx − 1 − ctx//2 per chunk, with logits ctx//2 … ctx−2, each predicting the next stream token."""
    for n_chunks in (2, 3, 5):
        n = n_chunks * ctx + (extra % ctx)
        ws = llamacpp_windows(n, ctx, add_bos=False)
        assert len(ws) == n // ctx == n_chunks
        seen = _scored(ws, n)
        per_chunk = ctx - 1 - ctx // 2
        assert len(seen) == n_chunks * per_chunk
        for k, w in enumerate(ws):
            assert (w.start, w.length, w.n_scored) == (k * ctx, ctx, per_chunk)
            assert w.logit_index.tolist() == list(range(ctx // 2, ctx - 1))
            chunk_positions = sorted(t - k * ctx for t, (wi, _) in seen.items() if wi == k)
            assert chunk_positions == list(range(ctx // 2 + 1, ctx))
        for k in range(n_chunks):  # contexts in a chunk: ctx//2 + 1 … ctx − 1 tokens
            contexts = sorted(c for wi, c in seen.values() if wi == k)
            assert contexts == list(range(ctx // 2 + 1, ctx))


def test_llamacpp_bos_replacement():
    """add_bos: the first input of every chunk is BOS, the rest and the targets are untouched; the stream too."""
    ctx, n = 8, 30
    stream = _stream(n)
    ws = llamacpp_windows(n, ctx, add_bos=True)
    for w in ws:
        assert w.replace_first_with_bos
        ids = window_inputs(stream, w, bos_id=7)
        assert ids.shape == (1, ctx)
        assert ids[0, 0].item() == 7
        assert ids[0, 1:].tolist() == list(range(BASE + w.start + 1, BASE + w.start + ctx))
        assert window_targets(stream, w).tolist() == list(range(BASE + w.start + ctx // 2 + 1, BASE + w.start + ctx))
    assert torch.equal(stream, _stream(n))  # window_inputs clones before replacing
    with pytest.raises(UsageError):
        window_inputs(stream, ws[0], bos_id=None)


def test_llamacpp_without_bos_keeps_first_token():
    """add_bos=False: inputs are the raw chunk, and bos_id is ignored."""
    ws = llamacpp_windows(16, 8, add_bos=False)
    assert window_inputs(_stream(16), ws[1], bos_id=7)[0].tolist() == list(range(BASE + 8, BASE + 16))


def test_llamacpp_needs_two_chunks():
    """Fewer than 2·ctx tokens → DataError (llama-perplexity refuses too); exactly 2·ctx is fine."""
    with pytest.raises(DataError) as e:
        llamacpp_windows(15, 8, add_bos=True)
    assert "16" in str(e.value) and "\n" not in str(e.value)
    assert len(llamacpp_windows(16, 8, add_bos=True)) == 2


@pytest.mark.parametrize("ctx", [3, 2, 0])
def test_llamacpp_ctx_too_small(ctx):
    """ctx < 4 → UsageError."""
    with pytest.raises(UsageError):
        llamacpp_windows(100, ctx, add_bos=False)


def test_llamacpp_max_chunks():
    """max_chunks caps the chunk count (first chunks kept); larger than available changes nothing."""
    ws = llamacpp_windows(100, 8, add_bos=False, max_chunks=3)
    assert [w.start for w in ws] == [0, 8, 16]
    assert len(llamacpp_windows(100, 8, add_bos=False, max_chunks=1000)) == 12
    assert llamacpp_windows(100, 8, add_bos=False, max_chunks=None) == llamacpp_windows(100, 8, add_bos=False)


# ------------------------------------------------------------------------------------------------ describe


@pytest.mark.parametrize("n,ctx,stride", [(2, 2, 1), (11, 4, 4), (101, 16, 5), (64, 7, 7), (30, 3, 1)])
def test_describe_rolling_matches_tally(n, ctx, stride):
    """describe() = counts from the brute-force replay: n−1 scored, 1 context-only, min/mean/max context."""
    ws = rolling_windows(n, ctx, stride)
    contexts = [c for _, c in _scored(ws, n).values()]
    d = describe(ws, n)
    assert d == {
        "windows": len(ws),
        "stream_tokens": n,
        "scored_tokens": n - 1,
        "context_only_tokens": 1,
        "min_context": min(contexts),
        "mean_context": pytest.approx(sum(contexts) / len(contexts)),
        "max_context": max(contexts),
    }
    assert d["min_context"] == 1 and d["max_context"] == min(ctx, n - 1)


def test_describe_llamacpp():
    """llama.cpp, n = 100, ctx = 16: 6 chunks × 7 scored = 42; contexts 9 … 15 in every chunk."""
    ws = llamacpp_windows(100, 16, add_bos=True)
    d = describe(ws, 100)
    assert d["windows"] == 6
    assert d["scored_tokens"] == 42
    assert d["context_only_tokens"] == 58  # includes the 4 dropped tail tokens
    assert (d["min_context"], d["max_context"]) == (9, 15)
    assert d["mean_context"] == pytest.approx(12.0)


# ---- lm-eval: loglikelihood_rolling ------------------------------------------------------------------------
def _lm_eval_reference(token_list: list[int], prefix: int, ctx: int) -> list[tuple[list[int], list[int]]]:
    """lm-evaluation-harness 0.4.x, transcribed: get_rolling_token_windows(context_len=1) + make_disjoint_window,
    then the HF model's input ``(context + continuation)[-(ctx + 1):][:-1]``; returns (inputs, scored tokens)."""
    out = []
    if not token_list:
        return out
    first = min(ctx, len(token_list))
    pairs = [([prefix] + token_list[: first - 1], token_list[:first])]
    predicted = first
    while predicted < len(token_list):
        k = min(len(token_list) - predicted, ctx)
        end = predicted + k
        pairs.append((token_list[end - ctx - 1 : end - 1], token_list[end - k : end]))
        predicted += k
    for a, b in pairs:
        context = a[: len(a) - (len(b) - 1)]
        out.append(((context + b)[-(ctx + 1) :][:-1], b))
    return out


def _layout(windows):
    return [(w.start, w.length, w.first_scored, w.n_scored) for w in windows]


def test_lmeval_docstring_diagram():
    """One document of 9 tokens after P, ctx 4: the last window scores d8 after 4 tokens of context (filled)."""
    assert _layout(lmeval_windows([10], 4)) == [(0, 4, 0, 4), (4, 4, 0, 4), (5, 4, 3, 1)]


def test_lmeval_text_shorter_than_one_window():
    assert _layout(lmeval_windows([4], 8)) == [(0, 3, 0, 3)]  # P d0 d1 d2: inputs P d0 d1, scores d0 d1 d2


def test_lmeval_several_documents_never_cross():
    """P a0 a1 a2 | (empty) | P b0 … b4, ctx 3: b's last window starts inside b and is filled from b only."""
    ws = lmeval_windows([4, 0, 6], 3)
    assert _layout(ws) == [(0, 3, 0, 3), (4, 3, 0, 3), (6, 3, 1, 2)]
    assert [w.index for w in ws] == [0, 1, 2]


@pytest.mark.parametrize("lengths,ctx", [([2], 1), ([17], 4), ([5, 9, 1, 0, 33], 4), ([64, 65, 66], 16), ([7, 3], 8)])
def test_lmeval_windows_match_lm_eval(lengths, ctx):
    """Every window's inputs and scored tokens equal lm-eval's, document by document; every token once."""
    prefix, stream, docs = -1, [], []
    for d, n in enumerate(lengths):
        tokens = [100 * (d + 1) + i for i in range(max(n - 1, 0))]
        docs.append(tokens)
        stream += [prefix] + tokens if tokens else []
    want = [pair for tokens in docs for pair in _lm_eval_reference(tokens, prefix, ctx)]
    ids = torch.tensor(stream)
    ws = lmeval_windows([n if n > 1 else 0 for n in lengths], ctx) if ctx > 1 else None
    if ws is None:  # ctx 1 is below every protocol's minimum
        with pytest.raises(UsageError):
            lmeval_windows(lengths, ctx)
        return
    got = [(window_inputs(ids, w, None)[0].tolist(), window_targets(ids, w).tolist()) for w in ws]
    assert got == want
    assert all(w.first_scored + w.n_scored == w.length for w in ws)  # lm-eval scores a window's last logits


def test_lmeval_no_tokens_is_an_error():
    with pytest.raises(DataError):
        lmeval_windows([0, 0], 4)


# ---- gptq: non-overlapping windows of ctx, logits 0 … ctx−2 -----------------------------------------------
def test_gptq_docstring_diagram():
    assert _layout(gptq_windows(10, 4)) == [(0, 4, 0, 3), (4, 4, 0, 3)]
    seen = _scored(gptq_windows(10, 4), 10)
    assert sorted(seen) == [1, 2, 3, 5, 6, 7]  # t0, t4 (window starts) context only; t8, t9 dropped


def test_gptq_max_windows_and_short_text():
    assert len(gptq_windows(4096, 512, max_windows=3)) == 3
    assert len(gptq_windows(4096, 512)) == 8
    with pytest.raises(DataError):
        gptq_windows(511, 512)

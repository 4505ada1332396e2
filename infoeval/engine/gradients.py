"""The one backward pass: weight gradients of a loss of a window's logits, each handed over as soon as it is known.

A loss of logits (n, V) holds several (n, V) tensors at its peak: the logits, their log-softmax (kept for the
backward pass), the probabilities a sample is drawn from, and in the backward pass the gradients of both (on
Qwen3-0.6B's 151,936-wide head, 311 MB each for 512 positions in float32). Where the model's logits are its head
applied to its last hidden states (``shared.splits``), ``weight_grads`` runs the blocks to those states and the
head with the loss a chunk of rows at a time (``_ChunkedHead``): a chunk's logits are made in the forward pass,
made again in the backward pass, and let go each time, so at most a chunk's (rows, V) tensors are alive. The
chunks' gradients add up to the whole's (a sum over rows), and the loss of a chunk sees the same rows in the same
order as the whole (a CPU generator draws row after row: the same draws).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from infoeval.engine import forward
from infoeval.engine.roles import headless
from infoeval.engine.shared import splits

HEAD_CHUNK_BYTES = 64 << 20  # a chunk's float32 logits (rows × V × 4 B): ~105 rows at V = 151,936


def head_rows(vocab: int) -> int:
    """Rows per chunk of the head: enough for the head's matrix product to run at speed (at least 16), few enough
    that a chunk's logits take about HEAD_CHUNK_BYTES."""
    return max(16, HEAD_CHUNK_BYTES // (4 * vocab))


class _ChunkedHead(torch.autograd.Function):
    """loss(head(h)) for the rows of one chunk: nothing of size V is kept for the backward pass, which makes the
    chunk's logits again and differentiates through them (a rows loss that draws at random draws in the forward
    pass only: it returns its draws, which the backward pass gives it back)."""

    @staticmethod
    def forward(ctx, h, head, loss, *params):
        with torch.no_grad():
            value, drawn = loss(head(h), None)
        ctx.head, ctx.loss, ctx.drawn = head, loss, drawn
        ctx.save_for_backward(h, *params)
        return value

    @staticmethod
    def backward(ctx, grad):
        h, *params = ctx.saved_tensors
        wanted = [ctx.needs_input_grad[0], *ctx.needs_input_grad[3:]]
        leaf = h.detach().requires_grad_(wanted[0])
        inputs = [t for t, w in zip([leaf, *params], wanted) if w]
        with torch.enable_grad():
            value, _ = ctx.loss(ctx.head(leaf), ctx.drawn)
            got = iter(torch.autograd.grad(value, inputs, grad) if inputs else ())
        dh, *dparams = [next(got) if w else None for w in wanted]
        return (dh, None, None, *dparams)


def chunked_loss(model, inputs: torch.Tensor, keep, loss, rows: int | None = None) -> torch.Tensor:
    """Σ over the chunks of ``loss(logits of the chunk's rows, drawn)`` for the one window ``inputs`` (1, T), where
    the model's logits are its head of its hidden states; else ``loss`` of the whole window's logits. ``loss(z,
    drawn)`` → (a scalar, what it drew): ``drawn`` None in the forward pass, then what it drew there. ``rows``: rows
    per chunk (default ``head_rows``)."""
    with torch.no_grad():
        split = splits(model, inputs[:, :2])
    if not split:
        return loss(forward.forward_logits(model, inputs, keep)[0], None)[0]
    with headless(model) as head:
        h = forward.forward_logits(model, inputs, keep)[0]  # (n, hidden): the head's inputs
    size = rows or head_rows(int(head.weight.shape[0]))
    params = list(head.parameters())
    total = None
    for start in range(0, h.shape[0], size):
        part = _ChunkedHead.apply(h[start : start + size], head, loss, *params)
        total = part if total is None else total + part
    return total


def weight_grads(
    model,
    inputs: torch.Tensor,
    keep,
    loss,
    names: Sequence[str],
    each: Callable[[str, torch.Tensor], None],
    rows: int | None = None,
) -> None:
    """∂ Σ loss / ∂ weight of each named module (``chunked_loss``: ``loss(z, drawn)`` of the window's logits, a
    chunk of rows at a time), by one forward and one backward pass, handed to ``each(name, gradient)`` as soon as
    the backward pass has it and then let go: a few layers' gradients alive at a time, not the whole model's (on
    Qwen3-0.6B, 1.8 GB). The model's parameters and their ``.grad`` are left as they were."""
    modules = dict(model.named_modules())
    shared: dict[int, tuple[torch.nn.Parameter, list[str]]] = {}
    for n in names:  # a tied weight under two names: one hook, both told
        shared.setdefault(id(modules[n].weight), (modules[n].weight, []))[1].append(n)
    before = {id(p): (p.requires_grad, p.grad) for p in model.parameters()}
    hooks = []

    def consume(param, of):
        for n in of:
            each(n, param.grad)
        param.grad = None

    try:
        for p in model.parameters():
            p.requires_grad_(False)
        for w, of in shared.values():
            w.grad = None
            w.requires_grad_(True)
            hooks.append(w.register_post_accumulate_grad_hook(lambda param, of=of: consume(param, of)))
        with torch.inference_mode(False), torch.enable_grad():
            chunked_loss(model, inputs, keep, loss, rows).backward()
    finally:
        for h in hooks:
            h.remove()
        for p in model.parameters():
            p.requires_grad_(before[id(p)][0])
            p.grad = before[id(p)][1]

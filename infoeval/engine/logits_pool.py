"""Logits written into reused buffers on a CPU, instead of a fresh (n, V) tensor per forward pass.

A fresh tensor of a window's logits (ctx 512 × V 49,152 float32 = 100 MB) is above glibc's mmap threshold, so
every forward pass maps it anew and pays ~25,000 page faults (measured: 25–40 ms of a ~1.1 s SmolLM2 forward on
one core). ``pooled_head`` makes the model's head, a plain ``nn.Linear``, write
its product into a buffer of a ``LogitsPool``: one whose storage nobody else holds any more, so a reducer may
keep the reference's logits while it asks for a variant's (they get two buffers). The product is the very call
``nn.functional.linear`` makes (``at::linear`` folds the leading dimensions into one matrix product with the
transposed weight, ``addmm`` with a bias), so the logits are the same bits (tested).

Used only where it pays and is safe: a CPU tensor, a head that is exactly ``nn.Linear`` with no forward of its own
(accelerate's hooks and ``roles.linears_row_by_row`` set one) and no hooks, and torch's storage use count.
"""

from __future__ import annotations

import contextlib

import torch

from infoeval.engine.roles import linear_into

MAX_BUFFERS = 4  # more logits alive at once than this: fresh tensors for the others

_use_count = getattr(torch._C, "_storage_Use_Count", None)


def _holders(t: torch.Tensor) -> int:
    return _use_count(t.untyped_storage()._cdata)


class LogitsPool:
    """Flat buffers, each handed out again once no tensor but the pool's own views its storage."""

    def __init__(self, limit: int = MAX_BUFFERS) -> None:
        self.limit = limit
        self._buffers: list[tuple[torch.Tensor, int]] = []  # (buffer, its holders count when free)
        self.reused = 0

    def take(self, numel: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor | None:
        """A free flat buffer of ≥ ``numel`` elements (its first ``numel``), a new one, or None at the limit."""
        for k, (buf, free) in enumerate(self._buffers):
            if buf.dtype == dtype and buf.device == device and _holders(buf) <= free:
                if buf.numel() < numel:  # a longer window than before: this buffer grows
                    buf = torch.empty(numel, dtype=dtype, device=device)
                    self._buffers[k] = (buf, _holders(buf))
                else:
                    self.reused += 1
                return buf[:numel]
        if len(self._buffers) >= self.limit:
            return None
        buf = torch.empty(numel, dtype=dtype, device=device)
        self._buffers.append((buf, _holders(buf)))
        return buf[:numel]


def _poolable(head) -> bool:
    return (
        _use_count is not None
        and type(head) is torch.nn.Linear
        and "forward" not in vars(head)
        and not (head._forward_hooks or head._forward_pre_hooks)
        and head.weight.device.type == "cpu"
    )


@contextlib.contextmanager
def pooled_head(model: torch.nn.Module, pool: LogitsPool | None):
    """Within the block, ``model``'s head (``get_output_embeddings``) writes into ``pool``'s buffers where it can
    (see the module docstring); elsewhere, or with no pool, the model is left as it is."""
    get = getattr(model, "get_output_embeddings", None)
    head = get() if callable(get) else None
    if pool is None or head is None or not _poolable(head):
        yield model
        return

    def forward(x: torch.Tensor) -> torch.Tensor:
        w, b = head.weight, head.bias  # read at call time: a variant's pre-hooks may have swapped them in
        # at::linear's own path: a bias goes through addmm only for a 2-D or contiguous input
        fits = x.dtype == w.dtype and (b is None or x.dim() == 2 or x.is_contiguous())
        n = x.shape[:-1].numel()
        out = pool.take(n * w.shape[0], x.dtype, x.device) if fits else None
        if out is None:
            return torch.nn.functional.linear(x, w, b)
        out = linear_into(x.reshape(n, x.shape[-1]), w, b, out.view(n, w.shape[0]))
        return out.view(*x.shape[:-1], w.shape[0])

    head.forward = forward
    try:
        yield model
    finally:
        del head.forward


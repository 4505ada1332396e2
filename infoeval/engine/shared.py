"""Shared batches (``plan_shared``): windows of one length go through every role's decoder blocks together, once
per batch, and each window then gets its own step, its logits made from the blocks' output by the role's head::

    hidden[role] = model-without-head(inputs of the batch's windows)     (B, T, hidden), at the batch's start
    for each window k:  logits[role] = head(hidden[role][k, scored positions of window k])      (1, n, V)

A quantized variant then dequantizes its layers once per batch instead of once per window, and the memory stays
one window's logits per role plus (roles × B × T × hidden) floats. The logits are computed exactly as the
window's own forward pass computes them (its head on the same rows), which ``splits`` checks once per model on
a few tokens; a model whose forward does more after its head (a logit soft-cap, a scale) fails the check and its
windows go through one by one. Between the blocks and the heads the heap's free pages go back to the OS (one
``heap.release_freed_memory`` per batch), so the activations the blocks freed do not stay resident under the
logits. The blocks see a batch of B sequences, and every Linear layer gives the bits of one
sequence at a time (``roles.linears_row_by_row``: one product of the batch where that was checked to give them,
else one product per sequence; a BLAS may block B·T rows differently), so the numbers are the bits of
window-by-window forward passes. Every pass goes through ``engine.forward_logits``, the one forward pass.
"""

from __future__ import annotations

import weakref
from collections.abc import Collection, Mapping

import torch

from infoeval import heap
from infoeval.engine import forward
from infoeval.engine.batches import Batch
from infoeval.engine.clock import Clock
from infoeval.engine.roles import headless, linears_row_by_row

_SPLITS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def splits(model: torch.nn.Module, probe: torch.Tensor) -> bool:
    """Whether ``model``'s logits are exactly its head applied to what its forward pass gives the head, checked
    once per model on ``probe`` (1, T) ids: the same bits, shape and dtype."""
    if model not in _SPLITS:
        ok = callable(getattr(model, "get_output_embeddings", None)) and model.get_output_embeddings() is not None
        if ok:
            full = forward.forward_logits(model, probe, 0)
            with headless(model) as head:
                hidden = forward.forward_logits(model, probe, 0)
            split = head(hidden)
            ok = split.shape == full.shape and split.dtype == full.dtype and torch.equal(split, full)
        _SPLITS[model] = ok
    return _SPLITS[model]


def run_blocks(
    split: Mapping[str, tuple], inputs: torch.Tensor, b: Batch, clock: Clock, only: Mapping[str, Collection[int]]
) -> tuple[dict, dict]:
    """Each role's decoder blocks once on the rows of shared batch ``b``'s windows it runs on (``only``), then the
    heap's free pages back to the OS. ``split``: role → (module, its weights context), ``roles.parts``.
    Returns role → (B_role, T, hidden), the heads' inputs, and role → {window k of the batch: its row there}."""
    hidden, row = {}, {}
    for role, (module, active) in split.items():
        ks = [k for k, w in enumerate(b.windows) if role not in only or w.index in only[role]]
        row[role] = {k: j for j, k in enumerate(ks)}
        rows = inputs if len(ks) == len(b.windows) else inputs[ks]
        with clock.forward(role), active(), headless(module), linears_row_by_row(module):
            hidden[role] = forward.forward_logits(module, rows, 0)  # (B, T, hidden): the head's inputs
    with clock.forward():
        heap.release_freed_memory()  # the blocks' activations are free and the heads' logits come next (heap.py)
    return hidden, row

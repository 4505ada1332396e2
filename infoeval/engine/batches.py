"""Batches: which windows go through one forward pass together, and the column rows their scored positions
fill (``plan``: consecutive windows, ``plan_shared``: runs of one length that share the decoder blocks' pass).
Pure bookkeeping: no model runs here (``engine`` runs them)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from infoeval.input.windows import Window


@dataclass(frozen=True)
class Batch:
    """Windows that go through one forward pass together, and the column rows their scored positions fill.

    A batch of one window keeps exactly its scored logits (a tensor of positions); a batch of several needs
    windows of one length whose scored positions are the last n, and keeps the last n logits of each row.
    """

    windows: tuple[Window, ...]
    rows: slice
    shared: bool = False  # one pass of the decoder blocks for all windows, then a step per window (plan_shared)

    @property
    def keep(self) -> torch.Tensor | int:
        return self.windows[0].logit_index if len(self.windows) == 1 else self.windows[0].n_scored

    @property
    def label(self) -> str:
        w = self.windows
        return f"window {w[0].index}" if len(w) == 1 else f"windows {w[0].index}–{w[-1].index}"


def plan(windows: Sequence[Window], per_batch: int = 1) -> list[Batch]:
    """Consecutive windows ``per_batch`` at a time, with the rows of their scored positions in window order.

    >>> [b.rows for b in plan([Window(0, 0, 4, 0, 4), Window(1, 4, 4, 0, 4), Window(2, 8, 2, 0, 2)], 1)]
    [slice(0, 4, None), slice(4, 8, None), slice(8, 10, None)]
    """
    out, row = [], 0
    for i in range(0, len(windows), max(1, per_batch)):
        group = tuple(windows[i : i + max(1, per_batch)])
        if len(group) > 1:
            w0 = group[0]
            if (
                any((w.length, w.first_scored, w.n_scored) != (w0.length, w0.first_scored, w0.n_scored) for w in group)
                or w0.first_scored + w0.n_scored != w0.length
            ):
                raise ValueError("batched windows must share their length and score their last positions")
        n = sum(w.n_scored for w in group)
        out.append(Batch(group, slice(row, row + n)))
        row += n
    return out


def plan_shared(windows: Sequence[Window], tokens: int) -> list[Batch]:
    """Runs of consecutive windows of one length, as many as fit in ``tokens`` inputs (at least one), each run a
    shared batch: its windows go through the decoder blocks together and are reduced one by one (any scored
    positions). Rows as ``plan``'s.

    >>> windows = [Window(i, 4 * i, 4, 0, 4) for i in range(3)] + [Window(3, 12, 2, 0, 2)]
    >>> [(len(b.windows), b.rows) for b in plan_shared(windows, 8)]
    [(2, slice(0, 8, None)), (1, slice(8, 12, None)), (1, slice(12, 14, None))]
    """
    out, row, i = [], 0, 0
    while i < len(windows):
        j = i + 1
        while j < len(windows) and windows[j].length == windows[i].length and (j + 1 - i) * windows[i].length <= tokens:
            j += 1
        n = sum(w.n_scored for w in windows[i:j])
        out.append(Batch(tuple(windows[i:j]), slice(row, row + n), shared=j - i > 1))
        row, i = row + n, j
    return out


def each_window(b: Batch) -> list[Batch]:
    """A shared batch's windows, each a batch of its own with its rows."""
    starts = np.cumsum([0] + [w.n_scored for w in b.windows]) + b.rows.start
    return [Batch((w,), slice(int(a), int(z))) for w, a, z in zip(b.windows, starts[:-1], starts[1:])]

"""Two models on the same windows (target/teacher p and draft/student q): each window's scored logits of both,
as the models give them, handed to a per-window reduction through the engine; the reductions convert them to
float32 and reduce them a chunk of rows at a time (``infotheory.by_rows``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import torch

from infoeval import engine
from infoeval.input.prepare import Prepared

TARGET, OTHER = "the target", "the draft"
PairReducer = Callable[[slice, torch.Tensor, torch.Tensor, torch.Tensor], Mapping[str, torch.Tensor]]


def run_paired(
    p: Prepared,
    target,
    other,
    reduce_pair: PairReducer,
    schema: Mapping[str, type],
    on_forward: Callable[[], None] | None = None,
) -> dict[str, np.ndarray]:
    """``reduce_pair(rows, target logits, other logits, targets)`` on every window; returns the columns, with
    window, position, token_id and context of every scored position."""

    cut = getattr(other, "cut", lambda z: z)  # a draft's heads padded differently: the logits both have

    def reduce(step: engine.Step):
        zp = cut(step.logits[TARGET][0])
        zq = cut(step.logits[OTHER][0])
        return reduce_pair(step.batch.rows, zp, zq, step.targets[0])

    roles = {TARGET: target, OTHER: other}
    return engine.run(
        roles, p.stream.ids, engine.plan(p.windows), p.protocol.prefix_id, reduce, schema, None, on_forward
    )


def base_of(cols: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The identity columns of a paired run."""
    return {k: cols[k] for k in engine.IDENTITY}

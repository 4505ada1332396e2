"""Per-position columns: allocated once for every scored position and filled a batch of rows at a time, plus
the identity of each row (window, stream position, token id, context length)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from infoeval.input.windows import window_targets

IDENTITY = {"window": np.int32, "position": np.int64, "token_id": np.int64, "context": np.int32}


class Columns:
    """Per-position columns allocated once (at the first write, when trailing shapes are known) and filled by rows."""

    def __init__(self, n: int, schema: Mapping[str, type]):
        self.n, self.schema, self.data = n, dict(schema), {}

    def put(self, rows: slice, cols: Mapping[str, torch.Tensor | np.ndarray]) -> None:
        for k, v in cols.items():
            v = v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else np.asarray(v)
            if k not in self.data:
                self.data[k] = np.zeros((self.n, *v.shape[1:]), dtype=self.schema.get(k, v.dtype))
            self.data[k][rows] = v


def identity_columns(batch, stream_ids: torch.Tensor) -> dict[str, np.ndarray]:
    """window, stream position, token id and context length of every scored position of the batch."""
    parts = {k: [] for k in IDENTITY}
    for w in batch.windows:
        parts["window"].append(np.full(w.n_scored, w.index))
        parts["position"].append(np.arange(w.first_target, w.first_target + w.n_scored))
        parts["token_id"].append(window_targets(stream_ids, w).cpu().numpy())
        parts["context"].append(np.arange(w.first_scored + 1, w.first_scored + 1 + w.n_scored))
    return {k: np.concatenate(v) for k, v in parts.items()}


def as_numpy(cols: Mapping[str, torch.Tensor | np.ndarray]) -> dict[str, np.ndarray]:
    return {k: v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else np.asarray(v) for k, v in cols.items()}

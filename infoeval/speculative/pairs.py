"""Two models on the same windows: per window, the scored logits of the target (teacher) and of the draft
(student), with the identity columns of every scored position filled in as the windows go by."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from infoeval.errors import RuntimeFailure
from infoeval.engine import forward_scored
from infoeval.prepare import Prepared
from infoeval.windows import window_inputs, window_targets

BASE_DTYPES = {"window": np.int32, "position": np.int64, "token_id": np.int64, "context": np.int32}


def base_columns(p: Prepared) -> dict[str, np.ndarray]:
    n = sum(w.n_scored for w in p.windows)
    return {k: np.zeros(n, dtype) for k, dtype in BASE_DTYPES.items()}


def paired_logits(p: Prepared, target, other, base: dict[str, np.ndarray]) -> Iterator[tuple[slice, torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Yield (rows of the window in the columns, target logits, other logits, targets), float32, window by window;
    ``base`` gets window, position, token_id and context of each scored position."""
    device = next(target.parameters()).device
    off = 0
    for w in p.windows:
        inputs = window_inputs(p.stream.ids, w, p.protocol["prefix_id"]).to(device)
        targets = window_targets(p.stream.ids, w).to(device)
        zp = forward_scored(target, inputs, w).float()
        zq = forward_scored(other, inputs, w).float()
        if not (torch.isfinite(zp).all() and torch.isfinite(zq).all()):
            raise RuntimeFailure(f"non-finite logits in window {w.index}")
        sl = slice(off, off + w.n_scored)
        base["window"][sl] = w.index
        base["position"][sl] = np.arange(w.first_target, w.first_target + w.n_scored)
        base["token_id"][sl] = targets.cpu().numpy()
        base["context"][sl] = np.arange(w.first_scored + 1, w.first_scored + 1 + w.n_scored)
        yield sl, zp, zq, targets
        off += w.n_scored

"""The lockstep loop: each window goes once through the reference and once through each variant, and is
reduced at once to per-position columns. No (tokens × vocab) tensor outlives its window.

Only the scored positions go through the LM head (``logits_to_keep``), so context-only positions cost no
head FLOPs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from infoeval.errors import RuntimeFailure
from infoeval.infotheory import Workspace, compare, reference_stats
from infoeval.quant.apply import QuantizedVariant, swapped
from infoeval.tokens import TokenStream
from infoeval.windows import Window, window_inputs, window_targets

REF_COLUMNS = {
    "window": np.int32, "position": np.int64, "token_id": np.int64, "context": np.int32, "bytes": np.int64,
    "nll": np.float32, "entropy": np.float32, "argmax": np.int64,
}  # fmt: skip
VARIANT_COLUMNS = {"nll": np.float32, "kl": np.float32, "rkl": np.float32, "tv": np.float32, "entropy": np.float32, "top1": np.bool_}


@dataclass
class Columns:
    """Per-position columns (numpy), one dict for the reference and one per variant, in scored order."""

    reference: dict[str, np.ndarray]
    variants: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return int(self.reference["nll"].shape[0])


def forward_scored(model, inputs: torch.Tensor, window: Window) -> torch.Tensor:
    """Logits of the window's scored positions, shape (n_scored, V)."""
    keep = window.logit_index.to(inputs.device)
    out = model(input_ids=inputs, use_cache=False, logits_to_keep=keep)
    return out.logits[0]


class _ColumnStore:
    """Columns allocated once for every scored position and filled window by window: nothing long-lived is
    allocated inside the loop, so the heap does not fragment and memory stays flat as the corpus grows."""

    def __init__(self, n: int, schema: dict[str, type]):
        self.columns = {name: np.zeros(n, dtype=dtype) for name, dtype in schema.items()}

    def put(self, offset: int, cols: dict[str, torch.Tensor | np.ndarray]) -> None:
        for k, v in cols.items():
            v = v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else np.asarray(v)
            self.columns[k][offset : offset + v.shape[0]] = v


@torch.inference_mode()
def run_lockstep(
    model: torch.nn.Module,
    stream: TokenStream,
    windows: Sequence[Window],
    variants: Sequence[QuantizedVariant] = (),
    bos_id: int | None = None,
    on_forward: Callable[[], None] | None = None,
) -> Columns:
    """Evaluate the reference and every variant on every window, window by window."""
    device = next(model.parameters()).device
    n_total = sum(w.n_scored for w in windows)
    ref_store = _ColumnStore(n_total, REF_COLUMNS)
    var_store = {v.name: _ColumnStore(n_total, VARIANT_COLUMNS) for v in variants}
    ws = Workspace()
    offset = 0
    for w in windows:
        inputs = window_inputs(stream.ids, w, bos_id).to(device)
        targets = window_targets(stream.ids, w).to(device)
        ref = reference_stats(forward_scored(model, inputs, w), targets, ws)
        if not torch.isfinite(ref.nll).all():
            raise RuntimeFailure(f"the reference model produced non-finite log-probabilities in window {w.index}")
        if on_forward:
            on_forward()
        positions = torch.arange(w.first_target, w.first_target + w.n_scored)
        ref_store.put(
            offset,
            {
                "window": np.full(w.n_scored, w.index),
                "position": positions,
                "token_id": targets,
                "context": torch.arange(w.first_scored + 1, w.first_scored + 1 + w.n_scored),
                "bytes": stream.nbytes[w.first_target : w.first_target + w.n_scored],
                "nll": ref.nll,
                "entropy": ref.entropy,
                "argmax": ref.argmax,
            }
        )
        for v in variants:
            with swapped(model, v):
                logits = forward_scored(model, inputs, w)
            cols = compare(ref, logits, targets, ws)
            del logits
            if not torch.isfinite(cols["kl"]).all():
                raise RuntimeFailure(f"variant {v.name} produced non-finite log-probabilities in window {w.index}")
            var_store[v.name].put(offset, cols)
            if on_forward:
                on_forward()
        del ref
        offset += w.n_scored
    return Columns(ref_store.columns, {k: st.columns for k, st in var_store.items()})

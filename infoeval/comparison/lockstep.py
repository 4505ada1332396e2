"""The lockstep: the reference and every variant (and the noise floor, on its windows) on each window, reduced
at once to per-position columns. Per window the reference's logits are reduced to its statistics
(``infotheory.reference_stats``), then each variant's logits, one variant at a time, to its comparison with the
reference (``infotheory.compare``); only per-position numbers are kept."""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from infoeval import engine, switches
from infoeval.input.tokens import TokenStream
from infoeval.input.windows import Window
from infoeval.measure.infotheory import Workspace, compare, reference_stats
from infoeval.measure.topk import top_k_probs
from infoeval.quant.apply import QuantizedVariant, WithVariant
from infoeval.quant.floor import FLOOR, FloorVariant
from infoeval.quant.handlers import runnable

REFERENCE = "reference"
REF_COLUMNS = {
    **engine.IDENTITY,
    "bytes": np.int64,
    "nll": np.float32,
    "entropy": np.float32,
    "argmax": np.int64,
    "p_top1": np.float32,
}
SHARED_TOKENS = 2048  # inputs per shared pass of the decoder blocks (engine.plan_shared): 4 windows at ctx 512, so a
# variant dequantizes its layers once per 4 windows (6.7 % faster than window by window, ~+140 MiB peak; 0: window
# by window); longer windows, or a window of another length, go alone. See the README's speed section
TOP_COLUMNS = {"top_ids": np.int32, "top_p": np.float32}  # (n, k) each, with --topk K
FLOOR_COLUMNS = {"kl": np.float32, "top1": np.bool_}
FLOOR_STATISTICS = "floor statistics"  # the clock's name for the seconds of the floor's per-position statistics
VARIANT_COLUMNS = {
    "nll": np.float32,
    "kl": np.float32,
    "rkl": np.float32,
    "tv": np.float32,
    "entropy": np.float32,
    "top1": np.bool_,
}


@dataclass
class CompareColumns:
    """Per-position columns (numpy), one dict for the reference and one per variant, in scored order."""

    reference: dict[str, np.ndarray]
    variants: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    vocab: dict[int, str] = field(default_factory=dict)  # with --topk: id → text of every token in the columns
    floor: dict[str, np.ndarray] | None = None  # the noise floor's columns: filled on its windows' rows, 0 elsewhere

    @property
    def n(self) -> int:
        return int(self.reference["nll"].shape[0])

    def slice(self, a: int, b: int) -> CompareColumns:
        """Rows a … b−1 of every column."""
        return CompareColumns(
            {k: v[a:b] for k, v in self.reference.items()},
            {n: {k: v[a:b] for k, v in cols.items()} for n, cols in self.variants.items()},
            floor=None if self.floor is None else {k: v[a:b] for k, v in self.floor.items()},
        )

    @classmethod
    def concat(cls, parts: Sequence[CompareColumns]) -> CompareColumns:
        """The rows of ``parts`` one after the other."""
        first = parts[0]
        return cls(
            {k: np.concatenate([q.reference[k] for q in parts]) for k in first.reference},
            {
                n: {k: np.concatenate([q.variants[n][k] for q in parts]) for k in cols}
                for n, cols in first.variants.items()
            },
            floor=None
            if first.floor is None
            else {k: np.concatenate([q.floor[k] for q in parts]) for k in first.floor},
        )


def lockstep_reducer(
    variant_names: Sequence[str],
    top_k: int = 0,
    clock: engine.Clock | None = None,
    stored: Mapping[str, tuple] | None = None,
    floor_at: Collection[int] = (),
) -> engine.Reducer:
    """Reference statistics, then each variant against them, window by window (buffers reused across windows);
    each model's logits its own, or for a role in ``stored`` (role → (n, d) last hidden states of every row, and
    the head: ``comparison/reference_first.py``, ``engine/streaming.py``) the head applied to the step's rows of
    them; the noise floor's columns where it runs (``FLOOR in step.logits``: the windows ``engine.run(only=…)``
    gives it; a stored floor: the windows ``floor_at``; its statistics' seconds go to
    ``clock.roles[FLOOR_STATISTICS]``).
    Each model's entropies are checked finite, which they are exactly when its logits are (``engine.run`` leaves
    the check to this reducer: one pass over the logits fewer per model and window). With ``top_k`` every model's
    k most likely tokens and their probabilities too (``top_ids``, ``top_p``: (n, k) columns)."""
    workspace, stored, at = Workspace(), stored or {}, frozenset(floor_at)

    def logits(step: engine.Step, role: str) -> torch.Tensor:
        if role in stored:
            return stored_logits(stored[role], step.batch.rows, step.targets[0].device)
        return step.logits[role][0]

    def reduce(step: engine.Step) -> dict:
        targets = step.targets[0]
        z = logits(step, REFERENCE)
        ref = reference_stats(z, targets, workspace)
        engine.require_finite(ref.entropy, REFERENCE, step.batch)
        out = {
            "nll": ref.nll,
            "entropy": ref.entropy,
            "argmax": ref.argmax,
            "p_top1": torch.exp(-ref.log_sum),
        }  # max p = exp(max log p)
        if top_k:
            out["top_ids"], out["top_p"] = top_k_probs(z, top_k, log_normalizer=ref.max + ref.log_sum)
        for name in variant_names:
            zq = logits(step, name)
            columns = compare(ref, zq, targets, workspace)
            engine.require_finite(columns["entropy"], name, step.batch)
            out |= {f"{name}/{k}": columns[k] for k in VARIANT_COLUMNS}
            if top_k:
                out[f"{name}/top_ids"], out[f"{name}/top_p"] = top_k_probs(zq, top_k, max_log_prob=columns["max_logq"])
        if FLOOR in step.logits or FLOOR in stored and all(w.index in at for w in step.batch.windows):
            zf = logits(step, FLOOR)
            t0 = time.perf_counter()
            columns = compare(ref, zf, targets, workspace)
            engine.require_finite(columns["entropy"], FLOOR, step.batch)
            out |= {f"{FLOOR}/{k}": columns[k] for k in FLOOR_COLUMNS}
            if clock is not None:
                clock.roles[FLOOR_STATISTICS] = clock.roles.get(FLOOR_STATISTICS, 0.0) + time.perf_counter() - t0
        return out

    return reduce


def stored_logits(states, rows: slice, device: torch.device) -> torch.Tensor:
    """The reference's logits of column rows ``rows`` from its stored last hidden states and its head."""
    hidden, head = states
    return head(torch.from_numpy(np.ascontiguousarray(hidden[rows]))).to(device)


def run_lockstep(
    model,
    stream: TokenStream,
    windows: Sequence[Window],
    variants: Sequence[QuantizedVariant] = (),
    bos_id: int | None = None,
    on_forward=None,
    clock: engine.Clock | None = None,
    top_k: int = 0,
    floor: FloorVariant | None = None,
    floor_at: Collection[int] = (),
    stored: Mapping[str, tuple] | None = None,
) -> CompareColumns:
    """Evaluate the reference and every variant on every window, window by window (``clock``: ``engine.run``'s;
    ``top_k``: also every model's k most likely tokens per position); with ``floor``, the noise floor too, in the
    same lockstep, on the windows ``floor_at`` (indices) only. A role in ``stored`` (``lockstep_reducer``'s) does
    not run: its logits come from its stored states."""
    stored = stored or {}
    roles = {
        **({} if REFERENCE in stored else {REFERENCE: model}),
        **{v.name: runnable(model, v) for v in variants if v.name not in stored},
    }
    top = TOP_COLUMNS if top_k else {}
    ref_keys, var_keys = {**REF_COLUMNS, **top}, {**VARIANT_COLUMNS, **top}
    schema = {**ref_keys, **{f"{v.name}/{k}": t for v in variants for k, t in var_keys.items()}}
    names = [v.name for v in variants]
    only, at = {}, frozenset(floor_at)
    if floor is not None and any(w.index in at for w in windows):
        if FLOOR not in stored:
            roles[FLOOR], only[FLOOR] = WithVariant(model, floor), at
        schema |= {f"{FLOOR}/{k}": t for k, t in FLOOR_COLUMNS.items()}
    # with SHARED_TOKENS > ctx the variants' blocks see several windows at a time and dequantize once per batch
    shared = (len(roles) > 1 or bool(stored)) and not switches.off("shared_batches")
    batches = engine.plan_shared(windows, SHARED_TOKENS) if shared else engine.plan(windows)
    cols = engine.run(
        roles,
        stream.ids,
        batches,
        bos_id,
        lockstep_reducer(names, top_k, clock, stored, at),
        schema,
        stream.nbytes,
        on_forward,
        check_logits=False,
        clock=clock,
        only=only,
        device=next(iter(stored.values()))[1].weight.device if stored else None,
    )
    rows = cols["nll"].shape[0]
    floor_cols = (
        None if floor is None else {k: cols.get(f"{FLOOR}/{k}", np.zeros(rows, t)) for k, t in FLOOR_COLUMNS.items()}
    )
    return CompareColumns(
        {k: cols[k] for k in ref_keys}, {n: {k: cols[f"{n}/{k}"] for k in var_keys} for n in names}, floor=floor_cols
    )

"""The forward stage: the only code that runs a model. Everything else receives logits from here.

``run`` turns (models by role, token stream, windows) into per-position columns:

    for each batch of windows (one window, or several of one length batched together):
        inputs  = the windows' token ids (first token replaced by the prefix token where the window says so)
        for each role, when the reducer asks for it:
            logits = model(inputs, logits_to_keep = the scored positions)    (B, n, V), checked finite
        columns[batch.rows] = reducer(step)                                  per-position numbers only

The reducer is a command's own per-window reduction (``(step) → {column: (B·n,) tensor}``); it asks for each
role's logits in turn through ``step.logits[role]``, so only the logits it holds at once are alive, and no
(tokens × vocabulary) tensor outlives its batch. Columns are allocated once for every scored position.

Sharding: ``plan`` numbers the batches and fixes the rows every batch fills; ``run`` takes any subset of them
and fills only their rows. Under a launcher (torchrun, accelerate launch) each rank evaluates batches
``rank::world`` and ``run`` gathers every rank's rows (``distributed``), so all ranks return the full columns. The other entry points, for sampling and single predictions, are
``last_logits`` and ``CachedModel``.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from infoeval import distributed
from infoeval.errors import RuntimeFailure
from infoeval.windows import Window, window_inputs, window_targets

Reducer = Callable[["Step"], Mapping[str, "torch.Tensor | np.ndarray"]]
IDENTITY = {"window": np.int32, "position": np.int64, "token_id": np.int64, "context": np.int32}


def model_device(model, default: torch.device | None = None) -> torch.device:
    """The device of a model's first parameter (a wrapper's inner ``.model`` is looked at too)."""
    for m in (model, getattr(model, "model", None)):
        params = getattr(m, "parameters", None)
        if callable(params):
            first = next(iter(params()), None)
            if first is not None:
                return first.device
    return default if default is not None else torch.device("cpu")


def forward_logits(model, inputs: torch.Tensor, keep: torch.Tensor | int) -> torch.Tensor:
    """THE forward pass: logits of the kept positions of ``inputs`` (B, T) → (B, n, V), no cache."""
    return model(input_ids=inputs, use_cache=False, logits_to_keep=keep).logits


@torch.inference_mode()
def last_logits(model, inputs: torch.Tensor) -> torch.Tensor:
    """Next-token logits after each row of ``inputs`` (B, T) → (B, V)."""
    return forward_logits(model, inputs, 1)[:, -1]


@dataclass(frozen=True)
class Batch:
    """Windows that go through one forward pass together, and the column rows their scored positions fill.

    A batch of one window keeps exactly its scored logits (a tensor of positions); a batch of several needs
    windows of one length whose scored positions are the last n, and keeps the last n logits of each row.
    """

    windows: tuple[Window, ...]
    rows: slice

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
            if any((w.length, w.first_scored, w.n_scored) != (w0.length, w0.first_scored, w0.n_scored) for w in group) \
                    or w0.first_scored + w0.n_scored != w0.length:  # fmt: skip
                raise ValueError("batched windows must share their length and score their last positions")
        n = sum(w.n_scored for w in group)
        out.append(Batch(group, slice(row, row + n)))
        row += n
    return out


class RoleLogits(Mapping):
    """``logits[role]``: that role's logits for the current batch, computed when asked (and again if asked again)."""

    def __init__(self, roles: Mapping[str, object], inputs: dict, batch: Batch, on_forward: Callable[[], None] | None):
        self._roles, self._inputs, self._batch, self._on_forward = roles, inputs, batch, on_forward

    def __getitem__(self, role: str) -> torch.Tensor:
        model = self._roles[role]
        device = model_device(model, next(iter(self._inputs.values())).device)
        if device not in self._inputs:
            self._inputs[device] = next(iter(self._inputs.values())).to(device)
        logits = forward_logits(model, self._inputs[device], self._batch.keep)
        # a NaN or ±inf anywhere makes the sum non-finite; one reduction, no (n × V) mask (which costs ~20× more)
        if not torch.isfinite(logits.sum()):
            raise RuntimeFailure(f"{role} produced non-finite logits in {self._batch.label}")
        if self._on_forward:
            self._on_forward()
        return logits

    def __iter__(self) -> Iterator[str]:
        return iter(self._roles)

    def __len__(self) -> int:
        return len(self._roles)


@dataclass(frozen=True)
class Step:
    """What a reducer sees: the batch, its targets (B, n) on the first role's device, and the lazy logits."""

    batch: Batch
    targets: torch.Tensor
    logits: RoleLogits


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


def identity_columns(batch: Batch, stream_ids: torch.Tensor) -> dict[str, np.ndarray]:
    """window, stream position, token id and context length of every scored position of the batch."""
    parts = {k: [] for k in IDENTITY}
    for w in batch.windows:
        parts["window"].append(np.full(w.n_scored, w.index))
        parts["position"].append(np.arange(w.first_target, w.first_target + w.n_scored))
        parts["token_id"].append(window_targets(stream_ids, w).cpu().numpy())
        parts["context"].append(np.arange(w.first_scored + 1, w.first_scored + 1 + w.n_scored))
    return {k: np.concatenate(v) for k, v in parts.items()}


def _numpy(cols: Mapping[str, torch.Tensor | np.ndarray]) -> dict[str, np.ndarray]:
    return {k: v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else np.asarray(v) for k, v in cols.items()}


@torch.inference_mode()
def run(
    roles: Mapping[str, object], stream_ids: torch.Tensor, batches: Sequence[Batch], prefix_id: int | None,
    reducer: Reducer, schema: Mapping[str, type] | None = None, nbytes: np.ndarray | None = None,
    on_forward: Callable[[], None] | None = None, n_rows: int | None = None,
) -> dict[str, np.ndarray]:  # fmt: skip
    """Evaluate every batch with the roles the reducer asks for; returns the columns (identity columns, ``bytes``
    when ``nbytes`` is given, and the reducer's). ``n_rows`` defaults to the rows of ``batches``.

    Under a launcher (``distributed.launched()``) this rank evaluates its share of the batches and the rows of
    all ranks are gathered, so every rank returns the same columns as one process would."""
    device = model_device(next(iter(roles.values())))
    n = n_rows if n_rows is not None else max((b.rows.stop for b in batches), default=0)
    cols = Columns(n, {**IDENTITY, "bytes": np.int64, **(schema or {})})
    parallel = distributed.launched()
    done, error = [], None
    try:
        for b in distributed.shard(batches) if parallel else batches:
            inputs = torch.cat([window_inputs(stream_ids, w, prefix_id) for w in b.windows]).to(device)
            targets = torch.stack([window_targets(stream_ids, w) for w in b.windows]).to(device)
            part = identity_columns(b, stream_ids)
            if nbytes is not None:
                part["bytes"] = np.concatenate([nbytes[w.target_slice] for w in b.windows])
            part |= _numpy(reducer(Step(b, targets, RoleLogits(roles, {device: inputs}, b, on_forward))))
            if parallel:
                done.append((b.rows, part))
            else:
                cols.put(b.rows, part)
    except Exception as e:
        if not parallel:
            raise
        error = e
    if parallel:
        for rank_rows in distributed.gather(done, error, n):
            for rows, part in rank_rows:
                cols.put(rows, part)
    return cols.data


# ---- cached, token-by-token forwards (sampling) ------------------------------------------------------------
def new_cache(model):
    """An empty DynamicCache for ``model`` (a truncated draft gets one with its own number of layers)."""
    from transformers import DynamicCache

    try:
        return DynamicCache(config=model.config)
    except TypeError:  # older transformers
        return DynamicCache()


def crop_to(cache, length: int) -> None:
    """Keep the first ``length`` cached positions (a negative count removes from the end in every version)."""
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)


def _cache_kw(model) -> str:
    fwd = getattr(model, "forward", None) or model.model.forward
    params = inspect.signature(fwd).parameters
    return "cache" if "cache" in params else "past_key_values"


class CachedModel:
    """A model fed token by token with its own KV cache; counts and times its forward passes."""

    def __init__(self, model):
        self.model = model  # a module or a callable wrapper with a .config and a .model
        self.cache = new_cache(model)
        self.kw = _cache_kw(model)
        self.calls = 0
        self.seconds = 0.0

    @property
    def length(self) -> int:
        return self.cache.get_seq_length()

    def logits(self, ids: torch.Tensor, keep: int, finish: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """Feed ``ids`` (1-D) after the cached tokens; ``finish`` of the last ``keep`` logits (keep, V). The
        time counted includes ``finish`` (which should copy to the host, so that the device has finished)."""
        t0 = time.perf_counter()
        out = self.model(input_ids=ids[None], use_cache=True, logits_to_keep=keep, **{self.kw: self.cache})
        result = finish(out.logits[0, -keep:])
        self.seconds += time.perf_counter() - t0
        self.calls += 1
        return result


# ---- batched cached stepping (exact entropy coding) ---------------------------------------------------------
@torch.inference_mode()
def step_logits(model, cache, ids: torch.Tensor) -> torch.Tensor:
    """Feed one token per row, ``ids`` (B,), after the rows' cached tokens (every row as long as the others) and
    return the next-token logits (B, V), checked finite. A row's numbers depend on the shape of its batch, so a
    caller that needs the very same numbers twice (an entropy coder's encoder and decoder) steps the same rows
    together both times."""
    out = model(input_ids=ids[:, None], use_cache=True, logits_to_keep=1, **{_cache_kw(model): cache})
    logits = out.logits[:, -1]
    if not torch.isfinite(logits.sum()):
        raise RuntimeFailure(f"the model produced non-finite logits at cached position {cache.get_seq_length() - 1}")
    return logits

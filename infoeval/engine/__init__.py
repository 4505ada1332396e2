"""The forward stage: the window loop, the only code that runs a model (its calls: ``engine/forward.py``).

``run`` turns (models by role, token stream, windows) into per-position columns:

    for each batch of windows (one window, or several of one length batched together):
        inputs  = the windows' token ids (first token replaced by the prefix token where the window says so)
        for each role, when the reducer asks for it:
            logits = forward_logits(model, inputs, the scored positions)     (B, n, V), checked finite*
        columns[batch.rows] = reducer(step)                                  per-position numbers only

The reducer is a command's own per-window reduction (``(step) → {column: (B·n,) tensor}``); it asks for each
role's logits in turn through ``step.logits[role]``, so only the logits it holds at once are alive, and no
(tokens × vocabulary) tensor outlives its batch. Columns are allocated once for every scored position.
(*) by the engine, or by a reducer whose per-row numbers are finite exactly when the logits are
(``run(check_logits=False)``).

Sharding: ``plan`` numbers the batches and fixes the rows every batch fills; ``run`` takes any subset of them
and fills only their rows. Under a launcher (torchrun, accelerate launch) each rank evaluates batches
``rank::world`` and ``run`` gathers every rank's rows (``distributed``), so all ranks return the full columns. The other
entry points, for sampling and single predictions, are ``last_logits`` and ``CachedModel``.

Shared batches (``plan_shared``): windows of one length go through every role's decoder blocks together, once
per batch, and each window then gets its own step, its logits made from the blocks' output by the role's head
(``engine/shared.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from infoeval import distributed, heap
from infoeval.engine import forward

# plan, plan_shared: re-exported
from infoeval.engine.batches import Batch, each_window, plan, plan_shared  # noqa: F401
from infoeval.engine.clock import Clock
from infoeval.engine.columns import IDENTITY, Columns, as_numpy, identity_columns

# forward_logits, last_logits, CachedModel, step_logits; crop_to, new_cache: re-exported
from infoeval.engine.forward import CachedModel, forward_logits, last_logits, step_logits  # noqa: F401
from infoeval.engine.kvcache import crop_to, new_cache  # noqa: F401
from infoeval.engine.roles import model_device, parts
from infoeval.engine.shared import run_blocks, splits
from infoeval.errors import RuntimeFailure
from infoeval.input.windows import window_inputs, window_targets

Reducer = Callable[["Step"], Mapping[str, "torch.Tensor | np.ndarray"]]


def require_finite(values: torch.Tensor, role: str, batch: Batch) -> None:
    """The failure for non-finite logits unless every value is finite: the engine's own check (the logits' sum), or
    a reducer's per-row numbers where ``run(check_logits=False)`` leaves it to them (a NaN or ±inf logit makes its
    row's log-softmax sums, such as Σ p log p, NaN)."""
    if not torch.isfinite(values).all():
        raise RuntimeFailure(f"{role} produced non-finite logits in {batch.label}")


def _checked(logits: torch.Tensor, role: str, batch: Batch, on_forward, check: bool) -> torch.Tensor:
    if check:  # a NaN or ±inf anywhere makes the sum non-finite; one reduction, no (n × V) mask (~20× more)
        require_finite(logits.sum(), role, batch)
    if on_forward:
        on_forward()
    return logits


class RoleLogits(Mapping):
    """``logits[role]``: that role's logits for the current batch, computed when asked (and again if asked again);
    with ``hidden`` (a shared batch's blocks' output per role, and this window's index in it) only the head runs."""

    def __init__(
        self,
        roles: Mapping[str, object],
        inputs: dict,
        batch: Batch,
        on_forward: Callable[[], None] | None,
        hidden: tuple[dict, int] | None = None,
        check: bool = True,
        *,
        clock: Clock,
    ):
        self._roles, self._inputs, self._batch, self._on_forward, self._hidden = (
            roles,
            inputs,
            batch,
            on_forward,
            hidden,
        )
        self._check, self._clock = check, clock

    def __getitem__(self, role: str) -> torch.Tensor:
        with self._clock.forward(role):
            return _checked(self._logits(role), role, self._batch, self._on_forward, self._check)

    def _logits(self, role: str) -> torch.Tensor:
        if self._hidden is not None:
            states, k = self._hidden
            module, active = parts(self._roles[role])
            with active():
                return module.get_output_embeddings()(states[role][k : k + 1, self._batch.keep])
        model = self._roles[role]
        device = model_device(model, next(iter(self._inputs.values())).device)
        if device not in self._inputs:
            self._inputs[device] = next(iter(self._inputs.values())).to(device)
        return forward.forward_logits(model, self._inputs[device], self._batch.keep)

    def __contains__(self, role) -> bool:  # without computing anything (Mapping's would ask for the logits)
        return role in self._roles

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


def _active(roles: Mapping[str, object], only: Mapping[str, Collection[int]], windows) -> dict[str, object]:
    """The roles that run on ``windows``: every role, less those ``only`` restricts to windows none of which is here."""
    return {r: m for r, m in roles.items() if r not in only or any(w.index in only[r] for w in windows)}


def _steps(
    roles: Mapping[str, object],
    stream_ids: torch.Tensor,
    b: Batch,
    prefix_id: int | None,
    device,
    on_forward,
    check: bool,
    clock: Clock,
    only: Mapping[str, Collection[int]],
) -> Iterator[Step]:
    """The reducer's steps of batch ``b``: one, or one per window of a shared batch (whose blocks run first, once
    per role, on the rows of the windows the role runs on; window by window instead where a role's model does not
    ``splits``). A step's logits hold the roles that run on its windows (``only``)."""
    inputs = torch.cat([window_inputs(stream_ids, w, prefix_id) for w in b.windows]).to(device)
    split = {role: parts(model) for role, model in _active(roles, only, b.windows).items()} if b.shared else {}
    # a model placed by accelerate (device_map) keeps its per-module hooks: it goes window by window
    if b.shared and all(
        model_device(m, device) == device and not getattr(m, "hf_device_map", None) and splits(m, inputs[:1, :8])
        for m, _ in split.values()
    ):
        hidden, row = run_blocks(split, inputs, b, clock, only)
        for k, w in enumerate(each_window(b)):
            targets = window_targets(stream_ids, w.windows[0])[None].to(device)
            here = {r: roles[r] for r in hidden if k in row[r]}
            states = {r: hidden[r][row[r][k] : row[r][k] + 1] for r in here}
            yield Step(w, targets, RoleLogits(here, {}, w, on_forward, (states, 0), check, clock=clock))
        return
    for k, w in enumerate(each_window(b) if b.shared else [b]):
        w_inputs = inputs[k : k + 1] if b.shared else inputs  # a shared batch's windows share one length
        targets = torch.stack([window_targets(stream_ids, x) for x in w.windows]).to(device)
        here = _active(roles, only, w.windows)
        yield Step(w, targets, RoleLogits(here, {device: w_inputs}, w, on_forward, check=check, clock=clock))


@torch.inference_mode()
def run(
    roles: Mapping[str, object],
    stream_ids: torch.Tensor,
    batches: Sequence[Batch],
    prefix_id: int | None,
    reducer: Reducer,
    schema: Mapping[str, type] | None = None,
    nbytes: np.ndarray | None = None,
    on_forward: Callable[[], None] | None = None,
    n_rows: int | None = None,
    check_logits: bool = True,
    clock: Clock | None = None,
    only: Mapping[str, Collection[int]] | None = None,
    device: torch.device | None = None,
) -> dict[str, np.ndarray]:
    """Evaluate every batch with the roles the reducer asks for; returns the columns (identity columns, ``bytes``
    when ``nbytes`` is given, and the reducer's). ``n_rows`` defaults to the rows of ``batches``. Every role's
    logits are checked finite, unless ``check_logits`` is False: the reducer then checks (``require_finite``).
    A ``clock`` gets the seconds spent in the models and in the reducer (``Clock``; this rank's, under a launcher).
    ``only``: roles that run on some windows only (role → window indices): a step's ``logits`` hold a role only
    where it runs (``role in step.logits``), and a column the reducer fills for it only there stays 0 elsewhere.

    Under a launcher (``distributed.launched()``) this rank evaluates its share of the batches and the rows of
    all ranks are gathered, so every rank returns the same columns as one process would. ``device``: where the
    inputs go when no role is a model (a reducer that makes every logit from stored states)."""
    device = model_device(next(iter(roles.values()))) if roles else device or torch.device("cpu")
    n = n_rows if n_rows is not None else max((b.rows.stop for b in batches), default=0)
    cols = Columns(n, {**IDENTITY, "bytes": np.int64, **(schema or {})})
    parallel = distributed.launched()
    heap.steady_heap()  # every pass allocates the same activations: keep their pages (heap.py)
    done, error = [], None
    clock = clock if clock is not None else Clock()
    clock.measured = device.type == "cpu"
    try:
        for b in distributed.shard(batches) if parallel else batches:
            for step in _steps(roles, stream_ids, b, prefix_id, device, on_forward, check_logits, clock, only or {}):
                part = identity_columns(step.batch, stream_ids)
                if nbytes is not None:
                    part["bytes"] = np.concatenate([nbytes[w.target_slice] for w in step.batch.windows])
                forward_s, t0 = clock.forward_s, time.perf_counter()
                part |= as_numpy(reducer(step))
                # the reducer's own time: less the forward passes it asked for
                clock.reduce_s += time.perf_counter() - t0 - (clock.forward_s - forward_s)
                if parallel:
                    done.append((step.batch.rows, part))
                else:
                    cols.put(step.batch.rows, part)
    except Exception as e:
        if not parallel:
            raise
        error = e
    if parallel:
        # the rows this gather completes (the batches', not n_rows: a round of a sequential run fills only some)
        for rank_rows in distributed.gather(done, error, sum(b.rows.stop - b.rows.start for b in batches)):
            for rows, part in rank_rows:
                cols.put(rows, part)
    return cols.data

"""Quantizing split between the ranks: under a launcher every rank holds the same model, so each rank encodes only
its share of the layers, with every scheme, and sends it to the others (torch.distributed: gloo for CPU tensors,
NCCL for CUDA ones). Quantizing then costs each rank about 1/W of the work instead of all of it.

  ``owners``: layer → rank, the largest layers first, each to the rank with the fewest elements so far (the same
  on every rank: it depends on the shapes alone).
  ``layouts``: each rank's encodings as fixed regions of one flat byte buffer (``shared_layout.regions``: the
  most room a weight's fields may take), known to every rank before anything is encoded.
  ``encode_share``: this rank's layers encoded into its buffer by ``apply.encode_with_sqnr``, the function one
  process uses; returns their records (codes dtype, −0 count, SQNR) and Σw² per layer.
  ``start``: the ranks first agree that they hold the same model (sha256 or revision, dtype, device type and
  shapes; otherwise every rank encodes everything, as before); then each encodes its share; the records are
  all-gathered (a failure on any rank stops every rank with one line, ``distributed.gather``) and each rank's
  buffer is broadcast from it, raw (~100 MB in ~0.03 s over gloo on one machine; pickling it took 8 s).
  ``take``: a layer's PackedWeight as views of its owner's buffer, for ``apply.quantize_plan``.

Encodings are a pure function of the weight's bits, and the SQNR sums do not depend on the thread count
(``primitives.sum_of_squares``): every rank's variants are bit for bit those one process makes.
"""

from __future__ import annotations

import torch

from infoeval import distributed, heap, switches
from infoeval.quant.apply import encode_with_sqnr, plan_layers
from infoeval.quant.codes import PackedWeight
from infoeval.quant.primitives import signal_power
from infoeval.quant.schemes import Scheme
from infoeval.quant.shared_layout import field_sizes, read, region_view, regions, write


def owners(sizes: dict[str, int], world: int) -> dict[str, int]:
    """Layer → rank: largest first (ties in the given order), each to the least loaded rank (ties: the lowest)."""
    load = [0] * world
    owner = {}
    for name in sorted(sizes, key=lambda n: -sizes[n]):  # sorted is stable: ties keep the given order
        r = min(range(world), key=lambda k: load[k])
        owner[name] = r
        load[r] += sizes[name]
    return {name: owner[name] for name in sizes}


def layouts(shapes: dict[str, tuple[int, int]], schemes: list[Scheme], owner: dict[str, int], world: int):
    """Per rank: (name, scheme name) → field → (offset, bytes) of its layers' encodings, and its buffer's bytes."""
    out = []
    for r in range(world):
        fields = {(name, s.name): field_sizes(shape, s) for name, shape in shapes.items() if owner[name] == r
                  for s in schemes}  # fmt: skip
        out.append(regions(fields))
    return out


def encode_share(weights: dict[str, torch.Tensor], schemes: list[Scheme], layout: dict, buffer: torch.Tensor):
    """Encode each layer of ``layout`` with its scheme into ``buffer``; returns ((name, scheme name) → record with
    its SQNR, name → Σw²)."""
    by_name = {s.name: s for s in schemes}
    records, signals = {}, {}
    for k, (name, scheme_name) in enumerate(layout):
        w = weights[name]
        if name not in signals:
            signals[name] = signal_power(w)
        pw, sqnr = encode_with_sqnr(w, by_name[scheme_name], signals[name])
        records[name, scheme_name] = {"sqnr": sqnr, **write(region_view(buffer, layout[name, scheme_name]), pw)}
        if k % heap.TRIM_EVERY == heap.TRIM_EVERY - 1:
            heap.release_freed_memory()
    heap.release_freed_memory()
    return records, signals


class RankShare:
    """Every rank's encodings, as ``apply.quantize_plan`` takes them (``take``)."""

    def __init__(self, weights: dict[str, torch.Tensor], buffers: list[torch.Tensor], placed: list[dict],
                 records: list[dict], signals: list[dict]):  # fmt: skip
        self.pointers = {name: (w.data_ptr(), tuple(w.shape), w.dtype, w.device) for name, w in weights.items()}
        self.where = {key: (r, fields) for r, layout in enumerate(placed) for key, fields in layout.items()}
        self.buffers, self.records = buffers, {k: v for rec in records for k, v in rec.items()}
        self.signals = {k: v for sig in signals for k, v in sig.items()}

    def take(self, name: str, scheme: Scheme, w: torch.Tensor) -> tuple[PackedWeight, float, float] | None:
        """(stored weight, SQNR, Σw²) of layer ``name`` under ``scheme``, or None (not shared, or another tensor)."""
        key = (name, scheme.name)  # a scheme's name spells all of it (bits, group, symmetry)
        if key not in self.where:
            return None
        if self.pointers.get(name) != (w.data_ptr(), tuple(w.shape), w.dtype, w.device):
            return None
        r, fields = self.where[key]
        record = self.records[key]
        packed = read(region_view(self.buffers[r], fields), tuple(w.shape), scheme, w.dtype, record)
        return packed, record["sqnr"], self.signals[name]

    def release(self) -> None:
        """Drop this handle's buffers: the variants keep the views they took."""
        self.buffers, self.where = [], {}


def selected_weights(model: torch.nn.Module, include=(), exclude=()) -> dict[str, torch.Tensor]:
    """The 2-D weights of the Linear layers the schemes quantize (``apply.plan_layers``), by layer name."""
    modules = dict(model.named_modules())
    names = [name for name, selected, _ in plan_layers(model, list(include), list(exclude)) if selected]
    return {name: modules[name].weight.detach() for name in names if modules[name].weight.dim() == 2}


def _identity(info, weights: dict[str, torch.Tensor]) -> tuple | None:
    """What the ranks must agree on to share encodings (None: this rank cannot share)."""
    devices = {w.device for w in weights.values()}
    if not weights or len(devices) != 1 or (info.sha256 is None and info.revision is None):
        return None
    shapes = tuple((name, tuple(w.shape), str(w.dtype)) for name, w in weights.items())
    return info.sha256, info.revision, info.dtype, next(iter(devices)).type, shapes


def start(model: torch.nn.Module, info, schemes: list[Scheme], include=(), exclude=()) -> RankShare | None:
    """Under a launcher: each rank encodes its share of ``schemes``' layers and receives the others' (``info``: the
    loaded model's ``ModelInfo``); None without one, or where the ranks cannot share. A 16-bit cast (bf16, fp16)
    is made by every rank itself."""
    schemes = [s for s in schemes if not s.fmt]
    if not schemes or not distributed.launched() or switches.off("rank_share"):
        return None
    import torch.distributed as dist

    g = distributed.group()
    weights = selected_weights(model, include, exclude)
    mine = _identity(info, weights)
    everyone = distributed.gather([mine], None, counted=False)
    if mine is None or any(e[0] != mine for e in everyone):
        return None
    owner = owners({name: w.numel() for name, w in weights.items()}, g.world_size)
    placed = layouts({name: tuple(w.shape) for name, w in weights.items()}, schemes, owner, g.world_size)
    device = next(iter(weights.values())).device
    buffers = [torch.empty(n, dtype=torch.uint8, device=device) for _, n in placed]
    error, records, signals = None, {}, {}
    try:
        records, signals = encode_share(weights, schemes, placed[g.rank][0], buffers[g.rank])
    except Exception as exc:  # noqa: BLE001  (every rank raises it, at the gather)
        error = exc
    got = distributed.gather([records, signals], error, counted=False)
    g.encodings_made, g.encodings_received = len(records), sum(len(rec) for rec, _ in got) - len(records)
    for r, buffer in enumerate(buffers):
        if buffer.numel():
            dist.broadcast(buffer, src=r)
    return RankShare(weights, buffers, [p for p, _ in placed], [rec for rec, _ in got], [sig for _, sig in got])

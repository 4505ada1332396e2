"""The quantized weights of the layers a scheme selects (``selection.plan_layers``), and swapping them in and out.

The original weights are never copied, and a variant holds no float copy either: per quantized layer only its
integer codes, scales and zero points (``codes.PackedWeight``, about bits/32 of the float32 weight). ``swapped``
hooks the quantized modules: just before a module's forward pass its codes are dequantized into a flat buffer
shared by every layer (``DequantBuffers``: one per model, device and dtype, sized for the largest layer) and a
view of it replaces the module's weight Parameter for that forward pass only; the original Parameter comes back
right after. Replacing the Parameter object (never writing into it) quantizes a head tied to the embeddings
without touching the embeddings. The dequantized weight equals ``fake_quantize(w, scheme)`` bit for bit.

When autograd records the forward pass (grad enabled and an input requires grad) the weight would be kept for
the backward pass while the shared buffer is overwritten by the next layer, so the weight is then dequantized
into a fresh tensor instead.
"""

from __future__ import annotations

import contextlib
import weakref

import torch

from infoeval import heap
from infoeval.quant import codes, storage
from infoeval.quant.codes import PackedWeight
from infoeval.quant.formats.presets import Format
from infoeval.quant.formats.rounding import check_layer
from infoeval.quant.lazy import LazyWeight
from infoeval.quant.primitives import signal_power, sqnr_db
from infoeval.quant.recipe import Recipe, assign
from infoeval.quant.schemes import Scheme
from infoeval.quant.selection import plan_layers
from infoeval.quant.variant import LayerReport, QuantizedVariant


def tied_weights(model: torch.nn.Module) -> dict[str, str]:
    """{a parameter's name: the first other name of the same tensor} for every parameter two modules share (a head
    tied to the embeddings)."""
    owners: dict[int, list[str]] = {}
    for mname, mod in model.named_modules():
        for pname, p in mod.named_parameters(recurse=False):
            owners.setdefault(id(p), []).append(f"{mname}.{pname}" if mname else pname)
    return {name: next(o for o in names if o != name) for names in owners.values() if len(names) > 1 for name in names}


@torch.no_grad()
def quantize_variant(
    model: torch.nn.Module, scheme: Scheme, include=(), exclude=(), signals=None, lazy: bool = False
) -> QuantizedVariant:
    """Quantize the selected layers' weights (on their own device and dtype) and report every Linear layer
    (``lazy``: keep no codes, ``quantize_plan``)."""
    plan = [
        (name, scheme if selected else None, reason)
        for name, selected, reason in plan_layers(model, list(include), list(exclude))
    ]
    return quantize_plan(model, plan, scheme, signals=signals, lazy=lazy)


def encode_with_sqnr(
    w: torch.Tensor, scheme: Scheme, signal: float, keep: bool = False
) -> tuple[PackedWeight, float, torch.Tensor | None]:
    """A layer's stored weight, its SQNR (``signal``: its Σw², ``signal_power``) and, with ``keep``, ŵ (contiguous,
    the weight's dtype: the bits its codes dequantize to), else None: how every layer is encoded."""
    packed, w_hat = codes.encode_dequantized(w, scheme)
    if keep:
        w_hat = w_hat.contiguous()
        return packed, sqnr_db(w, w_hat, signal), w_hat
    return packed, sqnr_db(w, w_hat, signal, overwrite=True), None


def _encode_layer(name: str, w: torch.Tensor, scheme: Scheme, signals: dict[str, float], encoded: int, keep: bool):
    """(stored weight, SQNR, ŵ with ``keep``) of one layer (``encoded``: how many layers this variant encoded before
    it)."""
    if encoded % heap.TRIM_EVERY == heap.TRIM_EVERY - 1:
        heap.release_freed_memory()  # the freed temporaries of the last layers (heap.py)
    signal = signals.get(name)
    if signal is None:
        signal = signals[name] = signal_power(w)
    return encode_with_sqnr(w, scheme, signal, keep)


@torch.no_grad()
def quantize_plan(
    model: torch.nn.Module,
    plan,
    scheme: Scheme,
    label: str | None = None,
    signals: dict[str, float] | None = None,
    lazy: bool = False,
    ties: dict[str, str] | None = None,
    dequantized: bool = False,
) -> QuantizedVariant:
    """Quantize each layer of ``plan`` ((name, its scheme or None to skip, reason) per Linear layer and embedding)
    with its own scheme. With ``label`` the variant is a mix named ``label`` (``scheme``: its most common scheme);
    a layer is encoded the same way whatever else the plan holds, so a one-scheme plan gives ``quantize_variant``'s
    codes bit for bit. ``signals``: Σw² per layer name, filled and reused by the variants of one model (SQNR).
    ``lazy``: each layer's codes are made for its report and let go; the variant holds ``lazy.LazyWeight``s, made
    again at each forward pass (no stored bytes; its ``nbytes`` are the codes'); with ``dequantized`` too, it holds
    each layer's ŵ as encoded instead (the same bits, made once: a layer-streamed pass uses each weight once).
    ``ties``: ``tied_weights``' map (default: the model's now; a layer-streamed variant passes its skeleton's, taken
    before any part is loaded)."""
    modules = dict(model.named_modules())
    tied_to = tied_weights(model) if ties is None else ties
    signals = {} if signals is None else signals
    weights: dict[str, PackedWeight] = {}
    reports, chosen, stored = [], {}, 0
    for name, layer_scheme, reason in plan:
        w = modules[name].weight
        tied = tied_to.get(f"{name}.weight")
        if layer_scheme is None:
            reports.append(LayerReport(name, tuple(w.shape), False, reason, tied_to=tied))
            continue
        if isinstance(layer_scheme, Format):  # its blocks divide the layer, its weights are finite
            check_layer(layer_scheme, w, name)
        keep = lazy and dequantized
        packed, sqnr, w_hat = _encode_layer(name, w.data, layer_scheme, signals, len(weights), keep)
        if lazy:
            stored += packed.nbytes  # codes and scales, a shipped format's, or a 16-bit scheme's tensor
            packed = w_hat if keep else LazyWeight(w.data, layer_scheme)
        if layer_scheme.group_size is not None and layer_scheme.group_size >= w.shape[1]:
            reason += f"; group {layer_scheme.group_size} ≥ {w.shape[1]} inputs, so one group per row"
        elif layer_scheme.group_size is not None and w.shape[1] % layer_scheme.group_size:
            reason += f"; last group of each row has {w.shape[1] % layer_scheme.group_size} columns"
        if tied:
            reason += f"; tied to {tied}, which keeps its original weights"
        weights[name], chosen[name] = packed, layer_scheme
        reports.append(
            LayerReport(name, tuple(w.shape), True, reason, sqnr, tied, layer_scheme.name if label else None)
        )
    if not lazy:
        weights = storage.gather(weights)  # the variant's codes in one allocation (storage.py)
    heap.release_freed_memory()
    return QuantizedVariant(scheme, weights, tuple(reports), label, chosen if label else None, stored if lazy else None)


def recipe_plan(model: torch.nn.Module, recipe: Recipe, include=(), exclude=()) -> tuple[list, Scheme]:
    """The plan of the mix a recipe describes (each Linear layer with its own scheme) and its most common scheme; a
    unit that matches no Linear layer, or units that overlap with different schemes, are usage errors."""
    linears = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    plan = assign(recipe, linears, plan_layers(model, list(include), list(exclude)))
    counts: dict[str, int] = {}
    for _, s, _ in plan:
        if s is not None:
            counts[s.name] = counts.get(s.name, 0) + 1
    main = next(
        (s for _, s, _ in plan if s is not None and counts[s.name] == max(counts.values())), recipe.schemes()[0]
    )
    return plan, main


def recipe_variant(
    model: torch.nn.Module, recipe: Recipe, include=(), exclude=(), signals=None, lazy: bool = False
) -> QuantizedVariant:
    """The mix a recipe describes, named after the recipe (``recipe_plan``)."""
    plan, main = recipe_plan(model, recipe, include, exclude)
    return quantize_plan(model, plan, main, label=recipe.name, signals=signals, lazy=lazy)


def build_variants(
    model: torch.nn.Module, schemes, recipes=(), include=(), exclude=(), lazy: bool = False
) -> list[QuantizedVariant]:
    """One variant per scheme, then one per recipe (``lazy``: holding no codes); their names were checked when the
    run's settings were made (``quant.variant_settings.VariantSettings``)."""
    signals: dict[str, float] = {}  # Σw² per layer, for every variant's SQNR
    return [quantize_variant(model, s, include, exclude, signals, lazy) for s in schemes] + [
        recipe_variant(model, r, include, exclude, signals, lazy) for r in recipes
    ]


class DequantBuffers:
    """Flat scratch buffers of one model, per (kind, device, dtype), grown to the largest layer and reused by
    every layer of every variant in turn: "f32" holds the float32 weight, "i16"/"u8" the unpacked codes, "out"
    the weight cast to a bfloat16/float16 model's dtype."""

    def __init__(self):
        self.buffers: dict[tuple[str, torch.device, torch.dtype], torch.Tensor] = {}

    def reserve(self, variant: QuantizedVariant) -> None:
        """Grow the buffers to what dequantizing any layer of ``variant`` needs."""
        for key, n in variant.scratch.items():
            if key not in self.buffers or self.buffers[key].numel() < n:
                with torch.inference_mode(False):  # a normal tensor: writable in and out of inference mode
                    self.buffers[key] = torch.empty(n, dtype=key[2], device=key[1])

    def dequantize(self, packed: PackedWeight) -> torch.Tensor:
        """ŵ as a view of the shared buffers (valid until the next call); ``reserve`` its variant first."""
        dev, bufs = packed.device, self.buffers
        w = codes.dequantize_into(
            packed,
            bufs["f32", dev, torch.float32],
            bufs.get(("i16", dev, torch.int16)),
            bufs.get(("u8", dev, torch.uint8)),
        )
        if packed.dtype == torch.float32:
            return w
        return bufs["out", dev, packed.dtype][: packed.numel].view(packed.shape).copy_(w)


_BUFFERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def dequant_buffers(model: torch.nn.Module) -> DequantBuffers:
    """The model's shared dequantization buffers (made on first use, freed with the model)."""
    return _BUFFERS.setdefault(model, DequantBuffers())


def _records_grad(args, kwargs) -> bool:
    return torch.is_grad_enabled() and any(
        isinstance(a, torch.Tensor) and a.requires_grad for a in (*args, *kwargs.values())
    )


def _hook(module: torch.nn.Module, weight, bufs: DequantBuffers, original) -> list:
    """Hooks that put the dequantized weight in place of ``original`` for each forward pass of ``module``."""

    def before(mod, args, kwargs):
        if hasattr(weight, "materialize"):  # made for each pass from what it holds (the floor's: quant/floor.py)
            mod._parameters["weight"] = weight.materialize()
        elif not isinstance(weight, PackedWeight):  # a full weight (a 16-bit scheme's: cast to the module's dtype)
            mod._parameters["weight"] = weight if weight.dtype == original.dtype else weight.to(original.dtype)
        elif _records_grad(args, kwargs):  # autograd keeps the weight for backward: no shared buffer
            mod._parameters["weight"] = codes.dequantize(weight)
        else:
            mod._parameters["weight"] = bufs.dequantize(weight)

    def after(mod, args, kwargs, output):
        mod._parameters["weight"] = original

    return [
        module.register_forward_pre_hook(before, with_kwargs=True),
        module.register_forward_hook(after, with_kwargs=True),
    ]


@contextlib.contextmanager
def swapped(model: torch.nn.Module, variant: QuantizedVariant | None):
    """Within the block every forward pass of a quantized module computes with the variant's (dequantized)
    weight; outside its forward passes, and after the block, a module has its original Parameter."""
    if variant is None:
        yield model
        return
    modules = dict(model.named_modules())
    bufs = dequant_buffers(model)
    originals = {name: modules[name]._parameters["weight"] for name in variant.weights}
    handles = []
    try:
        bufs.reserve(variant)
        for name, weight in variant.weights.items():
            handles += _hook(modules[name], weight, bufs, originals[name])
        yield model
    finally:
        for handle in handles:
            handle.remove()
        for name, param in originals.items():
            modules[name]._parameters["weight"] = param


def full_weight(weight, dtype: torch.dtype) -> torch.Tensor:
    """A variant's weight of one layer as a tensor of its own (``dtype``: the module's)."""
    if isinstance(weight, PackedWeight):
        return codes.dequantize(weight)
    return weight.materialize() if hasattr(weight, "materialize") else weight.to(dtype)


def swap_in(model: torch.nn.Module, variant: QuantizedVariant) -> None:
    """Put the variant's weights, dequantized, in the model for good (new Parameters)."""
    modules = dict(model.named_modules())
    for name, weight in variant.weights.items():
        full = full_weight(weight, modules[name].weight.dtype)
        modules[name].weight = (
            full if isinstance(full, torch.nn.Parameter) else torch.nn.Parameter(full, requires_grad=False)
        )


@torch.no_grad()
def fake_quantize_(model: torch.nn.Module, scheme: Scheme, include=(), exclude=()) -> QuantizedVariant:
    """Quantize the model in place, for good (e.g. before saving a checkpoint); returns the report."""
    variant = quantize_variant(model, scheme, include, exclude)
    swap_in(model, variant)
    return variant


class WithVariant:
    """A callable model: ``m(input_ids=...)`` runs ``model`` with the variant's weights swapped in for the call
    (none: the model as it is). ``.model`` and ``.config`` are the shared module's."""

    def __init__(self, model: torch.nn.Module, variant: QuantizedVariant | None):
        self.model, self.variant = model, variant

    def __call__(self, **kwargs):
        with swapped(self.model, self.variant):
            return self.model(**kwargs)

    def active(self):
        """The context in which ``.model`` computes with the variant's weights (the engine runs parts of it)."""
        return swapped(self.model, self.variant)

    @property
    def config(self):
        return self.model.config

"""A method variant: the reference model with its selected ``nn.Linear`` layers replaced by a library's quantized
modules (its own kernels run in the forward pass). Everything else (embeddings, norms, the layers left as they
are) is the reference's own tensors, shared, not copied, so a variant costs only its quantized weights. Its
report holds, per layer, the bytes the library stores (codes, scales, zero points: every tensor of the module
but the bias) and the SQNR of the weight the module computes with, read back through the module itself."""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field

import torch

from infoeval.errors import UsageError
from infoeval.models.libraries import stored_bytes
from infoeval.quant.methods import MethodScheme, quiet_libraries
from infoeval.quant.selection import plan_layers
from infoeval.quant.variant import LayerReport


@dataclass(frozen=True)
class MethodLayer:
    report: LayerReport
    stored_bytes: int  # 0 where the layer is left as it is
    seconds: float  # in the library's quantization of this layer
    details: dict  # what the library chose for it (quanto: its group size)


@dataclass(frozen=True)
class MethodVariant:
    """A library-quantized copy of the reference (``model``) and its report; the engine runs it as a role."""

    scheme: MethodScheme
    model: torch.nn.Module
    layers: tuple[MethodLayer, ...]
    quantize_s: float  # seconds in the library's quantization (not in infoeval's report)
    extra: dict = field(default_factory=dict)  # a calibrated method's: its calibration, tuning seconds, kernel

    @property
    def name(self) -> str:
        return self.scheme.name

    def bits_per_weight(self) -> float:
        """Stored bits per quantized weight, codes, scales and zero points included (the units of ``mix``)."""
        q = [x for x in self.layers if x.report.quantized]
        params = sum(math.prod(x.report.shape) for x in q)
        return 8 * sum(x.stored_bytes for x in q) / params if params else 0.0

    def summary(self) -> dict:
        q = [x for x in self.layers if x.report.quantized]
        sq = [x.report.sqnr_db for x in q if x.report.sqnr_db is not None]
        return {
            "scheme": self.scheme.as_dict(),
            "layers_quantized": len(q),
            "layers_skipped": len(self.layers) - len(q),
            "params_quantized": sum(math.prod(x.report.shape) for x in q),
            "stored_bytes": sum(x.stored_bytes for x in q),
            "bits_per_weight": self.bits_per_weight(),
            "quantize_s": self.quantize_s,
            "sqnr_db_min": min(sq) if sq else None,
            "sqnr_db_mean": sum(sq) / len(sq) if sq else None,
            **self.extra,
            "layers": [{**x.report.as_dict(), "stored_bytes": x.stored_bytes, **x.details} for x in self.layers],
        }


@torch.inference_mode()  # as the engine runs: quanto's tensors made outside inference mode cannot be used inside it
def effective_weight(module: torch.nn.Module, in_features: int, like: torch.Tensor, rows: int = 1024) -> torch.Tensor:
    """The weight a module computes with, read through its forward pass: module(I) − module(0), one block of
    identity rows at a time (any kernel, any storage)."""
    zero = module(torch.zeros(1, in_features, dtype=like.dtype, device=like.device))
    parts = [
        module(torch.eye(in_features, dtype=like.dtype, device=like.device)[a : a + rows]) - zero
        for a in range(0, in_features, rows)
    ]
    return torch.cat(parts).t()


def sqnr_db(w: torch.Tensor, w_hat: torch.Tensor) -> float | None:
    w, w_hat = w.detach().double(), w_hat.detach().double()
    signal, noise = float(w.square().sum()), float((w - w_hat).square().sum())
    return 10 * math.log10(signal / noise) if noise > 0 else None


def _probe_copy(module: torch.nn.Module) -> torch.nn.Module:
    """A copy of a library's module to read its weight through, or the module itself where its tensors cannot be
    copied (quanto's; the tests check that a call leaves such a module as it was)."""
    try:
        return copy.deepcopy(module)
    except (RuntimeError, TypeError, NotImplementedError):
        return module


def _shared_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of the model's modules that shares every parameter and buffer with it."""
    memo = {id(t): t for t in [*model.parameters(), *model.buffers()]}
    return copy.deepcopy(model, memo)


@torch.inference_mode()  # as the engine runs: quanto's tensors made outside inference mode cannot be used inside it
def build_method_variant(
    model: torch.nn.Module, scheme: MethodScheme, include=(), exclude=(), tokenizer=None, calibration=None
) -> MethodVariant:
    """The library's quantized copy of ``model``: the layers --include/--exclude select (as for every scheme)
    replaced by the backend's modules; ``model`` itself is left as it is. A calibrated backend (AutoRound) learns
    from ``calibration`` (``quant/methods/calibration.py``) with ``tokenizer``."""
    adapter, plan = scheme.adapter(), plan_layers(model, list(include), list(exclude))
    copied, layers, extra = _shared_copy(model), [], {}
    with quiet_libraries():
        if getattr(adapter, "CALIBRATED", False):
            if calibration is None:
                raise UsageError(f"'{scheme.name}' learns from calibration text, and none was given")
            selected = [n for n, chosen, _ in plan if chosen and isinstance(model.get_submodule(n), torch.nn.Linear)]
            made, extra = adapter.quantize_model(model, tokenizer, selected, scheme.settings, calibration)
            extra = {**extra, "calibration": calibration.provenance}
            _replace(model, copied, adapter, plan, lambda name, source: made.get(name), layers)
        else:
            _replace(model, copied, adapter, plan, per_layer(adapter, scheme.settings), layers)
    seconds = extra.pop("quantize_s", sum(x.seconds for x in layers))
    return MethodVariant(scheme, copied.eval(), tuple(layers), seconds, extra)


def _per_layer(adapter, source: torch.nn.Linear, settings: dict) -> tuple[torch.nn.Module, int, float]:
    """A per-layer backend's module for one Linear, the bytes it stores and the seconds it took."""
    t0 = time.perf_counter()
    quantized = adapter.quantize_linear(source, settings).eval()  # in eval mode from the first call, as it runs
    return quantized, stored_bytes(quantized), time.perf_counter() - t0


def quantize_layer(adapter, name: str, source, selected: bool, reason: str, make):
    """One layer of a method variant: (the module ``make(name, source)`` gives for it, or None where it is left as it
    is, and its report: the bytes the module stores, the seconds it took, its SQNR read back through it)."""
    made = make(name, source) if selected and isinstance(source, torch.nn.Linear) else None
    if made is None:
        why = (
            reason
            if not selected or not isinstance(source, torch.nn.Linear)
            else f"{adapter.__name__.rsplit('.', 1)[-1]} does not quantize it"
        )
        shape = tuple(getattr(source, "weight", torch.empty(0)).shape)
        return None, MethodLayer(LayerReport(name, shape, False, why), 0, 0.0, {})
    quantized, stored, seconds = made
    # read through a copy: a library may change its module at the first call (bitsandbytes repacks for its CPU kernel)
    w_hat = effective_weight(_probe_copy(quantized), source.in_features, source.weight)
    report = LayerReport(name, tuple(source.weight.shape), True, reason, sqnr_db(source.weight, w_hat))
    details = adapter.describe(quantized) if hasattr(adapter, "describe") else {}
    return quantized, MethodLayer(report, stored, seconds, details)


def per_layer(adapter, settings: dict):
    """``quantize_layer``'s ``make`` for a backend that quantizes one Linear at a time."""
    return lambda name, source: _per_layer(adapter, source, settings)


def _replace(model, copied, adapter, plan, make, layers: list) -> None:
    """Replace each selected Linear of ``copied`` by the module ``make(name, source)`` gives (None: the library left
    that layer as it is); report every layer."""
    for name, selected, reason in plan:
        quantized, layer = quantize_layer(adapter, name, model.get_submodule(name), selected, reason, make)
        if quantized is not None:
            parent, _, child = name.rpartition(".")
            setattr(copied.get_submodule(parent) if parent else copied, child, quantized)
        layers.append(layer)

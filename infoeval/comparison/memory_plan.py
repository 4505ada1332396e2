"""quantize-compare's peak memory, estimated before any weight loads, from the model's config (``models.shapes``:
parameter counts on the meta device), the variants' stored bytes (``quant.footprint``), the vocabulary and the
context. The lockstep holds every model at once:

    peak ≈ process + weights + Σ variants' codes + dequantization buffers + logits + activations

    process         the interpreter, torch, transformers, the tokenizer and the text (measured: PROCESS_BYTES)
    weights         the reference's parameters in the run's dtype
    variants        every scheme's and recipe's codes, scales and zero points (``footprint.plan_nbytes``); a
                    library method's variant as a copy of the model; a saved checkpoint as its parameters
    dequantization  the shared buffers sized for the largest quantized layer (``apply.DequantBuffers``)
    logits          LOGIT_COPIES float32 (ctx × V) tensors alive at once per window (the reference's kept for every
                    variant, the variant's being compared, the next one being made; fitted, see below)
    activations     each role's decoder output for a shared batch (roles × batch tokens × hidden floats)

PROCESS_BYTES and LOGIT_COPIES were fitted on two measured runs (``benchmarks/scale.py``: SmolLM2-135M, V = 49,152,
and a Qwen3-0.6B-shaped model, V = 151,936; the three default schemes, 1,024 tokens, ctx 512, float32) and checked on
a third (Qwen3-1.7B-shaped); the record holds each estimate beside the measured peak.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from infoeval.comparison.lockstep import SHARED_TOKENS
from infoeval.comparison.variants import plan_variants
from infoeval.input.settings import ModelSettings, VariantSettings
from infoeval.models import resolve_device, resolve_dtype
from infoeval.models.shapes import ModelShape, model_shape
from infoeval.quant.footprint import plan_nbytes, scratch_nbytes
from infoeval.quant.recipe import assign
from infoeval.quant.selection import plan_layers

MIB = 2**20
PROCESS_BYTES = 550 * MIB  # fitted (module docstring)
LOGIT_COPIES = 3  # fitted (module docstring)
PLANS = ("lockstep",)


@dataclass(frozen=True)
class MemoryEstimate:
    """A plan's estimated peak, in bytes, by part (the module docstring's terms)."""

    plan: str
    parts: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.parts.values())

    def parts_mib(self) -> dict[str, float]:
        return {k: round(v / MIB, 1) for k, v in self.parts.items()}

    def to_json(self) -> dict:
        return {"plan": self.plan, "peak_bytes": self.total, "parts_bytes": dict(self.parts)}


def variant_bytes(shape: ModelShape, settings: VariantSettings) -> dict[str, int]:
    """Bytes each variant the settings name keeps while the lockstep runs (the module docstring's ``variants``)."""
    planned = plan_variants(settings)
    layers = plan_layers(shape.meta, list(settings.include), list(settings.exclude))
    linears = [n for n, m in shape.meta.named_modules() if isinstance(m, torch.nn.Linear)]
    out = {
        s.name: plan_nbytes(shape.meta, [(n, s if sel else None, r) for n, sel, r in layers], shape.dtype)
        for s in planned.schemes
    }
    out |= {r.name: plan_nbytes(shape.meta, assign(r, linears, layers), shape.dtype) for r in planned.recipes}
    out |= {m.name: shape.parameter_bytes for m in planned.methods}
    out |= {
        name: model_shape(spec, shape.dtype).parameter_bytes
        for name, spec in zip(planned.checkpoints, settings.checkpoints)
    }
    return out


def _scratch(shape: ModelShape, settings: VariantSettings) -> int:
    """The dequantization buffers: the largest any scheme's variant needs, over the quantized layers."""
    planned = plan_variants(settings)
    schemes = list(planned.schemes) + [s for r in planned.recipes for s in r.schemes()]
    layers = plan_layers(shape.meta, list(settings.include), list(settings.exclude))
    return max((scratch_nbytes(shape.meta, s, shape.dtype, layers) for s in schemes), default=0)


def estimate_lockstep(shape: ModelShape, settings: VariantSettings, ctx: int) -> MemoryEstimate:
    """The lockstep's peak (module docstring) for windows of ``ctx`` tokens."""
    variants = variant_bytes(shape, settings)
    roles = 1 + len(variants) + (settings.floor != "off")
    batch_tokens = max(ctx, SHARED_TOKENS // ctx * ctx)
    return MemoryEstimate(
        "lockstep",
        {
            "process": PROCESS_BYTES,
            "weights": shape.parameter_bytes,
            "variants": sum(variants.values()),
            "dequantization": _scratch(shape, settings),
            "logits": int(LOGIT_COPIES * ctx * shape.vocab * 4),
            "activations": roles * batch_tokens * shape.hidden * 4,
        },
    )


def estimate_run(
    model_settings: ModelSettings, variant_settings: VariantSettings, ctx: int, plan: str = "lockstep"
) -> MemoryEstimate:
    """The estimated peak of quantize-compare on the settings' model and variants, loading no weight."""
    plan_variants(variant_settings)  # a bad scheme, recipe or name fails before the model is read
    dtype = resolve_dtype(model_settings.dtype, resolve_device(model_settings.device))
    shape = model_shape(model_settings.model, dtype)
    return estimate_lockstep(shape, variant_settings, ctx)

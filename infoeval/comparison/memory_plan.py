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

reference-first (``comparison/reference_first.py``) holds no codes and one model of its own at a time:

    peak ≈ process + weights + the largest model variant + quantization + logits + activations + states

    quantization    the lazy variants' fake quantization of the largest quantized layer (QUANTIZE_COPIES floats)
    states          the reference's last hidden states, tokens × hidden floats (past SPILL_BYTES: a file)

layer-streamed (``comparison/streamed.py``) holds no model: one part at a time, read from the checkpoint:

    peak ≈ process + every role's running hidden states (the model's dtype) + every role's last hidden states
           (float32) + what the model gives each layer (masks) + the largest of its phases: the capture (the
           embeddings), the layers (the largest layer, its quantized copy, quantization, and the next layer read
           ahead on the host unless the budget leaves no room for it: ``engine/stream_layout.py``), the statistics
           (the head, each variant's quantized head, the logits)

PROCESS_BYTES and LOGIT_COPIES were fitted on two measured runs (``benchmarks/scale.py``: SmolLM2-135M, V = 49,152,
and a Qwen3-0.6B-shaped model, V = 151,936; the three default schemes, 1,024 tokens, ctx 512, float32) and checked on
a third (Qwen3-1.7B-shaped); the record holds each estimate beside the measured peak.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch

from infoeval import distributed
from infoeval.comparison.lockstep import SHARED_TOKENS
from infoeval.comparison.reference_first import SPILL_BYTES
from infoeval.engine.stream_layout import FASTEST
from infoeval.input.settings import ModelSettings
from infoeval.models import resolve_device, resolve_dtype
from infoeval.models.objects import ModelObject
from infoeval.models.shapes import ModelShape, model_shape
from infoeval.quant.footprint import plan_nbytes, scratch_nbytes
from infoeval.quant.recipe import assign
from infoeval.quant.schemes import Scheme
from infoeval.quant.selection import plan_layers
from infoeval.quant.variant_settings import VariantSettings

MIB = 2**20
PROCESS_BYTES = 550 * MIB  # fitted (module docstring)
LOGIT_COPIES = 3  # fitted (module docstring)
QUANTIZE_COPIES = 4  # float32 copies of a layer fake quantization holds at once (blocks, codes, scales, result)


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


def variant_bytes(shape: ModelShape, settings: VariantSettings) -> tuple[dict, dict]:
    """Bytes of each variant the settings name: (the schemes' and recipes' codes, the models of their own: a library
    method's as a copy of the model, a checkpoint as its parameters, a module passed in as its own)."""
    layers = plan_layers(shape.meta, list(settings.include), list(settings.exclude))
    linears = [n for n, m in shape.meta.named_modules() if isinstance(m, torch.nn.Linear)]
    codes = {
        s.name: plan_nbytes(shape.meta, [(n, s if sel else None, r) for n, sel, r in layers], shape.dtype)
        for s in settings.plain
    }
    codes |= {r.name: plan_nbytes(shape.meta, assign(r, linears, layers), shape.dtype) for r in settings.recipes}
    models = {m.name: shape.parameter_bytes for m in settings.methods}
    models |= {m.name: 0 for m in settings.modules}  # in memory already: the memory available excludes them
    models |= {c.name: model_shape(c.source, shape.dtype).parameter_bytes for c in settings.checkpoints}
    return codes, models


def _scratch(shape: ModelShape, settings: VariantSettings) -> int:
    """The dequantization buffers: the largest any scheme's variant needs, over the quantized layers."""
    schemes = list(settings.plain) + [s for r in settings.recipes for s in r.schemes()]
    layers = plan_layers(shape.meta, list(settings.include), list(settings.exclude))
    return max((scratch_nbytes(shape.meta, s, shape.dtype, layers) for s in schemes), default=0)


def _common(shape: ModelShape, ctx: int, roles: int) -> dict[str, int]:
    """The parts every plan has: the process, the reference's weights, the logits, the roles' shared-batch states."""
    batch_tokens = max(ctx, SHARED_TOKENS // ctx * ctx)
    return {
        "process": PROCESS_BYTES,
        "weights": shape.parameter_bytes,
        "logits": int(LOGIT_COPIES * ctx * shape.vocab * 4),
        "activations": roles * batch_tokens * shape.hidden * 4,
    }


def estimate_lockstep(shape: ModelShape, settings: VariantSettings, ctx: int) -> MemoryEstimate:
    """The lockstep's peak (module docstring) for windows of ``ctx`` tokens."""
    codes, models = variant_bytes(shape, settings)
    roles = 1 + len(codes) + len(models) + (settings.floor != "off")
    parts = _common(shape, ctx, roles)
    parts |= {
        "variants": sum(codes.values()) + sum(models.values()),
        "dequantization": _scratch(shape, settings),
    }
    return MemoryEstimate("lockstep", parts)


def estimate_reference_first(
    shape: ModelShape, settings: VariantSettings, ctx: int, tokens: int | None
) -> MemoryEstimate:
    """reference-first's peak (``comparison/reference_first.py``): no codes (the lazy variants make each layer when a
    pass needs it: QUANTIZE_COPIES float32 copies of the largest quantized layer), the largest model of its own at
    once, the stored states (``tokens`` × hidden floats, at most SPILL_BYTES in memory; None: the whole text)."""
    codes, models = variant_bytes(shape, settings)
    roles = len(codes) + (settings.floor != "off")
    layers = plan_layers(shape.meta, list(settings.include), list(settings.exclude))
    largest = scratch_nbytes(shape.meta, Scheme(8, None), torch.float32, layers) if codes else 0
    states = SPILL_BYTES if tokens is None else min(SPILL_BYTES, tokens * shape.hidden * 4)
    if distributed.launched():  # every rank holds every rank's states, gathered (no file)
        states = 2 * tokens * shape.hidden * 4 if tokens is not None else 2 * SPILL_BYTES
    parts = _common(shape, ctx, max(roles, 1))
    parts |= {
        "variants": max(models.values(), default=0),
        "quantization": QUANTIZE_COPIES * largest,
        "states": states,
    }
    return MemoryEstimate("reference-first", parts)


def _layer_bytes(shape: ModelShape) -> tuple[int, int, int]:
    """(the largest decoder layer's parameters, its largest Linear weight: elements; the embeddings' bytes)."""
    from infoeval.quant.selection import decoder_prefix

    modules = dict(shape.meta.named_modules())
    layers = modules.get(decoder_prefix(shape.meta) or "", ())
    sizes = [sum(p.numel() for p in layer.parameters()) for layer in layers]
    linears = [m.weight.numel() for layer in layers for m in layer.modules() if isinstance(m, torch.nn.Linear)]
    embed = shape.meta.get_input_embeddings().weight.numel()
    return max(sizes, default=0), max(linears, default=0), embed


def estimate_streamed(
    shape: ModelShape, settings: VariantSettings, ctx: int, tokens: int, layout=FASTEST, on_host: bool = True
) -> MemoryEstimate:
    """The layer-streamed plan's peak (module docstring) over ``tokens`` scored tokens in windows of ``ctx`` in the
    memory it runs in (``on_host``: the host's, else a device's, where a layer read ahead does not wait and parked
    hidden states are one window's)."""
    codes, _ = variant_bytes(shape, settings)
    roles = 1 + len(codes) + len(settings.methods) + (settings.floor != "off")
    size = torch.empty((), dtype=shape.dtype).element_size()
    layer, linear, embed = _layer_bytes(shape)
    head = shape.meta.get_output_embeddings()
    names = {id(m): n for n, m in shape.meta.named_modules()}
    planned = plan_layers(shape.meta, list(settings.include), list(settings.exclude))
    heads = 1 + len(codes) * any(sel and name == names.get(id(head)) for name, sel, _ in planned)
    windows = -(-tokens // ctx)
    phases = {  # what each phase of the pass holds besides what it keeps throughout; they do not overlap
        "capture": embed * size,
        "layers": (3 if layout.read_ahead and on_host else 2) * layer * size + QUANTIZE_COPIES * linear * 4,
        # the lockstep's logits, and each stored role's made again from its states by its head
        "statistics": heads * shape.head_bytes + int((LOGIT_COPIES + 1) * ctx * shape.vocab * 4),
    }
    held = 1 if layout.parked and not on_host else windows  # the windows whose states are on the device
    parts = {
        "process": PROCESS_BYTES,
        "hidden": (roles + 1 if held == windows else 2) * held * ctx * shape.hidden * size,
        "states": roles * tokens * shape.hidden * 4,
        "given": 2 * held * ctx * ctx * 4,
        "largest_phase": max(phases.values()),
    }
    return MemoryEstimate("streamed", parts)


def estimate_run(
    model_settings: ModelSettings,
    variant_settings: VariantSettings,
    ctx: int,
    plan: str = "lockstep",
    tokens: int | None = None,
    layout=FASTEST,
) -> MemoryEstimate:
    """The estimated peak of quantize-compare under ``plan`` on the settings' model and variants (``tokens``: the
    scored tokens, None: unknown), loading no weight."""
    device = resolve_device(model_settings.device)
    dtype = resolve_dtype(model_settings.dtype, device)
    shape = model_shape(model_settings.model, dtype)
    if plan == "streamed":
        est = estimate_streamed(shape, variant_settings, ctx, tokens, layout, device.type == "cpu")
    elif plan == "reference-first":
        est = estimate_reference_first(shape, variant_settings, ctx, tokens)
    else:
        est = estimate_lockstep(shape, variant_settings, ctx)
    if isinstance(model_settings.model, ModelObject):  # a model passed in is in memory already
        return dataclasses.replace(est, parts={**est.parts, "weights": 0})
    return est

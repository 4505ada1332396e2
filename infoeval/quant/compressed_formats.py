"""Shipped float formats as compressed-tensors folders, which compressed-tensors and transformers load by themselves
(and vLLM serves): FP8 E4M3 per channel (``fp8``: llm-compressor's FP8_DYNAMIC weights), per tensor (``fp8-tensor``:
FP8) and in 128×128 blocks (``fp8-b128``: FP8_BLOCK, as DeepSeek-V3 ships), stored "naive-quantized" (the E4M3
weight and its scales: what compressed-tensors infers for weights-only float schemes, as llm-compressor saves them);
NVFP4
(``nvfp4``: NVFP4A16's weights, E2M1 in blocks of 16 with E4M3 block scales and an fp32 global scale), stored
"nvfp4-pack-quantized".

Each layer's scales are infoeval's own (``formats.scaling``, which follows compressed-tensors operation for operation)
and its weight is set to ŵ before compressed-tensors' compressor runs: the compressor's round(clamp(ŵ / s)) gives
back exactly infoeval's elements (ŵ / s is within a float32 rounding of an element, far inside half an element's
spacing), so the folder holds the very codes the in-process format computes with, and loading it gives ŵ again
(``models.shipped`` unpacks NVFP4 in the requested dtype: compressed-tensors' default would round ŵ to bfloat16).
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from infoeval.errors import UsageError, spell
from infoeval.models.libraries import quiet_checkpoint_io, quiet_libraries
from infoeval.quant.formats.presets import Format
from infoeval.quant.formats.rounding import check_layer, dequantize_blocks, largest_magnitude, quantize_blocks
from infoeval.quant.formats.scaling import nvfp4_global
from infoeval.quant.packed import refuse_tied
from infoeval.quant.selection import plan_layers

_FP8 = {"num_bits": 8, "type": "float", "symmetric": True}
WRITABLE = {  # preset → (compressed-tensors' QuantizationArgs of the weights, its storage format)
    "fp8": ({**_FP8, "strategy": "channel"}, "naive-quantized"),
    "fp8-tensor": ({**_FP8, "strategy": "tensor"}, "naive-quantized"),
    "fp8-b128": ({**_FP8, "strategy": "block", "block_structure": [128, 128]}, "naive-quantized"),
    "nvfp4": (
        {"num_bits": 4, "type": "float", "symmetric": True, "strategy": "tensor_group", "group_size": 16},
        "nvfp4-pack-quantized",
    ),
}


def check_writable(model: torch.nn.Module, fmt, include=(), exclude=()) -> list[str]:
    """The layers to write; a usage error (one line) for a format compressed-tensors does not store, a tied layer,
    or a layer the format refuses (``rounding.check_layer``)."""
    check_storable(fmt)
    names = [n for n, selected, _ in plan_layers(model, list(include), list(exclude)) if selected]
    modules = dict(model.named_modules())
    refuse_tied(model, names, "compressed-tensors")
    for n in names:
        check_layer(fmt, modules[n].weight.data, n)
    return names


def check_storable(fmt) -> None:
    """A usage error (one line) for a scheme compressed-tensors' float formats do not store (checked before loading)."""
    if not isinstance(fmt, Format) or fmt.name not in WRITABLE:
        raise UsageError(
            f"{spell('format')} compressed-tensors stores {', '.join(WRITABLE)}, not {getattr(fmt, 'name', fmt)}; "
            f"use {spell('format')} pack-quantized for int4 schemes or fake for any"
        )


@torch.no_grad()
def save_compressed_format(model: torch.nn.Module, fmt: Format, names: list[str], out) -> None:
    """Quantize ``names`` in ``fmt`` and save ``model`` (modified in place) as a compressed-tensors folder."""
    ct = _library()
    args, storage = WRITABLE[fmt.name]
    args = dict(args, scale_dtype=torch.float8_e4m3fn) if fmt.name == "nvfp4" else args
    modules = dict(model.named_modules())
    made = {n: _quantized(modules[n].weight.data, fmt) for n in names}
    ignore = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and n not in made]
    config = ct.QuantizationConfig(
        config_groups={"group_0": ct.QuantizationScheme(targets=["Linear"], weights=ct.QuantizationArgs(**args))},
        ignore=ignore,
        format=storage,
        quantization_status=ct.QuantizationStatus.FROZEN,
    )
    with quiet_checkpoint_io():
        ct.apply_quantization_config(model, config)
        for n, (w_hat, scale, tensor_scale) in made.items():
            lin = modules[n]
            if tensor_scale is not None:
                lin.weight_global_scale.copy_(tensor_scale.reshape(lin.weight_global_scale.shape))
            lin.weight_scale.copy_(scale.reshape(lin.weight_scale.shape).to(lin.weight_scale.dtype))
            lin.weight.copy_(w_hat.to(lin.weight.dtype))
        compressor = ct.ModelCompressor.from_pretrained_model(model, quantization_format=storage)
        compressor.compress_model(model)
        model.save_pretrained(out)
    compressor.update_config(out)


def _quantized(w: torch.Tensor, fmt: Format) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """ŵ (out, in) float32, the scale as compressed-tensors stores it ((rows / R, cols / C) blocks; NVFP4's is its
    E4M3 value s · g) and NVFP4's global scale g (None for FP8)."""
    x = w.to(torch.float32)
    values, multiplier, offset, layout = quantize_blocks(x, fmt)
    w_hat = dequantize_blocks(values, multiplier, offset, layout, inplace=True)
    big_r, big_c = layout[4], layout[5]
    if fmt.name != "nvfp4":
        return w_hat, multiplier.reshape(big_r, big_c), None
    g = nvfp4_global(largest_magnitude(x))
    return w_hat, (multiplier * g).reshape(big_r, big_c), g.reshape(1)


def _library():
    """compressed-tensors' quantization API, or a usage error naming the extra to install."""
    try:
        with quiet_libraries():
            from compressed_tensors import quantization
            from compressed_tensors.compressors import ModelCompressor
    except ImportError:
        raise UsageError(
            f"{spell('format')} compressed-tensors needs the compressed-tensors package: pip install 'infoeval[packed]'"
        ) from None
    return SimpleNamespace(
        ModelCompressor=ModelCompressor,
        **{k: getattr(quantization, k) for k in ("QuantizationArgs", "QuantizationConfig", "QuantizationScheme")},
        QuantizationStatus=quantization.QuantizationStatus,
        apply_quantization_config=quantization.apply_quantization_config,
    )

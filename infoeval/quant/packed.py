"""Real 4-bit storage: compressed-tensors' "pack-quantized" format, which transformers loads on CPU and GPU.

Offered for symmetric int4 schemes whose group size divides every quantized layer's input width (or per
channel): the format has no partial last group (compressed-tensors 0.20 refuses to dequantize one). Our codes
(−7…7, scale = max|w|/7) are stored as they are (the format's range is −8…7, 8 codes per int32 word), so the
loaded model computes exactly what the in-memory fake quantization computes.
"""

from __future__ import annotations

from pathlib import Path

import torch

from infoeval.errors import UsageError, spell
from infoeval.models.libraries import quiet_checkpoint_io
from infoeval.quant.primitives import dequantize_codes, quantize_codes
from infoeval.quant.schemes import Scheme
from infoeval.quant.selection import plan_layers


def check_packable(model: torch.nn.Module, scheme: Scheme, include=(), exclude=()) -> list[str]:
    """The layers to pack; a usage error (one line) when the scheme or a layer's width does not fit the format."""
    if not isinstance(scheme, Scheme) or scheme.bits != 4 or not scheme.symmetric:  # a shipped format too
        raise UsageError(
            f"{spell('format')} pack-quantized stores symmetric int4 schemes only, not {scheme.name}; use "
            f"{spell('format')} fake"
        )
    names = [n for n, selected, _ in plan_layers(model, list(include), list(exclude)) if selected]
    modules = dict(model.named_modules())
    refuse_tied(model, names, "pack-quantized")
    for n in names:
        in_f = modules[n].weight.shape[1]
        if scheme.group_size is not None and in_f % scheme.group_size:
            raise UsageError(
                f"{scheme.name}: layer {n} has {in_f} inputs, not a multiple of {scheme.group_size}, and "
                "pack-quantized "
                f"has no partial groups; use a group size dividing {in_f}, int4-channel, or {spell('format')} fake"
            )
    return names


def refuse_tied(model: torch.nn.Module, names: list[str], storage: str) -> None:
    """A usage error naming the first of ``names`` whose weight another parameter shares: ``storage`` keeps one
    tensor per name and cannot store a tied layer."""
    shared = {}
    for pname, param in model.named_parameters(remove_duplicate=False):
        shared.setdefault(id(param), []).append(pname)
    modules = dict(model.named_modules())
    for n in names:
        if len(shared.get(id(modules[n].weight), [])) > 1:
            raise UsageError(
                f"layer {n} shares its weight with {shared[id(modules[n].weight)][0]}; {storage} cannot "
                f"store a tied layer: {spell('exclude')} it or use {spell('format')} fake"
            )


@torch.no_grad()
def save_pack_quantized(model: torch.nn.Module, scheme: Scheme, names: list[str], out: Path) -> None:
    """Quantize ``names`` with ``scheme`` and save ``model`` (modified in place) as a pack-quantized checkpoint."""
    try:
        from compressed_tensors.compressors import ModelCompressor
        from compressed_tensors.quantization import (
            QuantizationArgs,
            QuantizationConfig,
            QuantizationScheme,
            QuantizationStatus,
            apply_quantization_config,
        )
    except ImportError:
        raise UsageError(
            f"{spell('format')} pack-quantized needs the compressed-tensors package: pip install 'infoeval[packed]'"
        ) from None
    modules = dict(model.named_modules())
    codes = {n: quantize_codes(modules[n].weight.data, scheme)[:2] for n in names}
    args = {"num_bits": 4, "type": "int", "symmetric": True}
    args.update(
        {"strategy": "channel"} if scheme.group_size is None else {"strategy": "group", "group_size": scheme.group_size}
    )
    ignore = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and n not in codes]
    config = QuantizationConfig(
        config_groups={"group_0": QuantizationScheme(targets=["Linear"], weights=QuantizationArgs(**args))},
        ignore=ignore,
        format="pack-quantized",
        quantization_status=QuantizationStatus.FROZEN,
    )
    apply_quantization_config(model, config)
    for n, (q, s) in codes.items():
        lin = modules[n]
        lin.weight_scale.copy_(s.reshape(lin.weight_scale.shape).to(lin.weight_scale.dtype))
        # the weight set to s·q, so that the compressor's round(clamp(w/s)) gives back exactly q
        lin.weight.copy_(
            dequantize_codes(q, s, torch.zeros_like(s, dtype=torch.int32), scheme.group_size).to(lin.weight.dtype)
        )
    compressor = ModelCompressor.from_pretrained_model(model, quantization_format="pack-quantized")
    with quiet_checkpoint_io():  # compressed-tensors draws its own progress bars per layer
        compressor.compress_model(model)
        model.save_pretrained(out)
    compressor.update_config(out)

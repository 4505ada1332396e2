"""torchao (the ``torchao`` package): weight-only quantization with torchao's tensor subclasses, applied with its
public ``quantize_`` (what transformers' ``TorchAoConfig`` calls). Each selected ``nn.Linear`` becomes a new
``nn.Linear`` whose weight is torchao's quantized tensor; its forward runs torchao's kernels for that tensor.

Specs, the same on every device:

* ``int8`` / ``int8-g<N>``: ``Int8WeightOnlyConfig``, symmetric, a scale per output channel or per group of N;
* ``int<bits>-g<N>`` / ``int<bits>-channel`` (bits 1 to 7): ``IntxWeightOnlyConfig`` with ``torch.int<bits>``
  codes, symmetric, a scale per group (or channel). torchao keeps these codes unpacked, one int8 per weight,
  so they store 8 bits per weight (the bits report says so); its packed int4 kernels need CUDA;
* ``float8``: ``Float8WeightOnlyConfig``, float8 e4m3 codes with a scale per output channel.
"""

from __future__ import annotations

import re

import torch

from infoeval.errors import UsageError

_SPEC = re.compile(r"^(?:(float8)|int(\d)(?:-(channel|g(\d+)))?)$")


def parse(spec: str, text: str) -> tuple[dict, int, int | None]:
    """(torchao's settings, bits, group size or None per channel) of a spec such as ``int4-g128``."""
    m = _SPEC.match(spec)
    bits = 8 if m and m.group(1) else int(m.group(2)) if m else None
    group = int(m.group(4)) if m and m.group(4) else None
    if (
        not m
        or not 1 <= bits <= 8
        or (group is not None and group < 1)
        or (bits < 8 and m.group(3) is None and not m.group(1))
    ):
        raise UsageError(
            f"'{text}' is not a torchao scheme; give torchao:int8, torchao:int8-g<N>, torchao:int<1-7>-g<N>, "
            "torchao:int<1-7>-channel "
            "or torchao:float8 (torchao:int4-g128)"
        )
    return (
        {"kind": "float8" if m.group(1) else "int8" if bits == 8 else "intx", "bits": bits, "group_size": group},
        bits,
        group,
    )


def config(settings: dict):
    """torchao's config object for ``settings``."""
    from torchao.quantization import Float8WeightOnlyConfig, Int8WeightOnlyConfig, IntxWeightOnlyConfig
    from torchao.quantization.granularity import PerAxis, PerGroup, PerRow

    group = settings["group_size"]
    if settings["kind"] == "float8":
        return Float8WeightOnlyConfig()
    if settings["kind"] == "int8":
        return Int8WeightOnlyConfig(granularity=PerGroup(group) if group else PerRow())
    return IntxWeightOnlyConfig(
        weight_dtype=getattr(torch, f"int{settings['bits']}"), granularity=PerGroup(group) if group else PerAxis(0)
    )


def quantize_linear(linear: torch.nn.Linear, settings: dict) -> torch.nn.Module:
    """A new Linear holding ``linear``'s parameters, quantized by ``torchao.quantization.quantize_`` (which gives it
    a new weight; ``linear`` is left as it is)."""
    from torchao.quantization import quantize_

    group = settings["group_size"]
    if group and linear.in_features % group:
        raise UsageError(
            "torchao needs each row's inputs to be a multiple of the group size: this model has rows of "
            f"{linear.in_features}, "
            f"not a multiple of {group}; give a group size that divides {linear.in_features}"
        )
    module = torch.nn.Linear(
        linear.in_features, linear.out_features, bias=linear.bias is not None, device="meta", dtype=linear.weight.dtype
    )
    module.weight = linear.weight
    if linear.bias is not None:
        module.bias = linear.bias
    holder = torch.nn.Sequential(module)
    quantize_(holder, config(settings))
    return holder[0]

"""HQQ (Half-Quadratic Quantization, the ``hqq`` package): calibration-free, per-group asymmetric codes whose zero
points and scales are optimized by half-quadratic splitting. Each selected ``nn.Linear`` becomes hqq's own
``HQQLinear`` (its public API, as transformers' ``HqqConfig`` integration does), which dequantizes in its forward
pass with hqq's PyTorch backend; scales and zero points are kept in the model's dtype.

Specs: ``int<bits>`` (groups of 64, hqq's default), ``int<bits>-g<N>``, ``int<bits>-channel`` (one group per row).
"""

from __future__ import annotations

import re

import torch

from infoeval.errors import UsageError

_SPEC = re.compile(r"^int(\d+)(?:-(channel|g(\d+)))?$")
BITS = (8, 6, 5, 4, 3, 2, 1)
DEFAULT_GROUP = 64


def parse(spec: str, text: str) -> tuple[dict, int, int | None]:
    """(hqq's settings, bits, group size or None per channel) of a spec such as ``int4-g64``."""
    m = _SPEC.match(spec)
    bits = int(m.group(1)) if m else None
    group = None if m and m.group(2) == "channel" else int(m.group(3)) if m and m.group(3) else DEFAULT_GROUP
    if not m or bits not in BITS or (group is not None and (group < 8 or group % 8)):
        raise UsageError(
            f"'{text}' is not an hqq scheme; give hqq:int<bits>[-g<N>|-channel] with bits in "
            f"{', '.join(map(str, BITS))} "
            "and N a multiple of 8 (hqq:int4-g64, hqq:int8-channel)"
        )
    return {"nbits": bits, "group_size": group}, bits, group


def quantize_linear(linear: torch.nn.Linear, settings: dict) -> torch.nn.Module:
    """hqq's HQQLinear of ``linear`` (left as it is), on its device, computing in its dtype."""
    from hqq.core.quantize import BaseQuantizeConfig, HQQBackend, HQQLinear

    HQQLinear.set_backend(HQQBackend.PYTORCH)
    config = BaseQuantizeConfig(nbits=settings["nbits"], group_size=settings["group_size"])
    w = linear.weight
    return HQQLinear(linear, quant_config=config, del_orig=False, compute_dtype=w.dtype, device=str(w.device))

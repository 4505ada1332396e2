"""optimum-quanto (the ``optimum-quanto`` package): weight-only quantization with quanto's own tensors. Each
selected ``nn.Linear`` becomes quanto's ``QLinear`` (``QLinear.from_module``, then ``freeze``: the public API its
``quantize``/``freeze`` apply to a whole model, and transformers' ``QuantoConfig`` calls), which computes with
quanto's kernels (on a CPU, its PyTorch fallbacks).

Specs: ``int8`` (one scale per output channel), ``int4`` and ``int2`` (asymmetric: a scale and a shift per group;
quanto picks the group: 128 inputs, or the largest multiple of 32 below that divides the row, else the whole row),
``float8`` (float8 e4m3 codes with a scale per output channel). Scales are kept in the model's dtype.
"""

from __future__ import annotations

import torch

from infoeval.errors import UsageError

QTYPES = {
    "int8": ("qint8", 8, None),
    "int4": ("qint4", 4, 128),
    "int2": ("qint2", 2, 128),
    "float8": ("qfloat8", 8, None),
}


def parse(spec: str, text: str) -> tuple[dict, int, int | None]:
    """(quanto's settings, bits, nominal group size) of a spec such as ``int4``."""
    if spec not in QTYPES:
        raise UsageError(
            f"'{text}' is not a quanto scheme; give quanto:{', quanto:'.join(QTYPES)} (quanto picks the group "
            "size itself)"
        )
    qtype, bits, group = QTYPES[spec]
    return {"weights": qtype}, bits, group


def quantize_linear(linear: torch.nn.Linear, settings: dict) -> torch.nn.Module:
    """quanto's frozen QLinear of ``linear`` (left as it is: quanto's module takes new quantized weights)."""
    from optimum.quanto import qtypes
    from optimum.quanto.nn import QLinear

    module = QLinear.from_module(linear, weights=qtypes[settings["weights"]])
    module.freeze()
    return module


def describe(module: torch.nn.Module) -> dict:
    """The group size quanto chose for this layer (None: one scale per output channel)."""
    return {"group_size": module.weight_group_size}

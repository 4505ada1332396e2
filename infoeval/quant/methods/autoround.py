"""AutoRound (the ``auto-round`` package): weight rounding and clipping learned block by block on calibration
text with signed gradient descent, then exported and run by AutoRound's own inference kernels.

Through its public API, as a user would: ``AutoRound(model, tokenizer, bits=…, group_size=…, sym=…, iters=…,
dataset=<the calibration chunks>, nsamples=…, seqlen=…, seed=…)`` on a copy of the reference, ``quantize()``,
``save_quantized(<a temporary folder>, format="auto_round")``, and transformers' ``from_pretrained`` of that
folder with ``AutoRoundConfig(backend="auto")``, which on a CPU picks AutoRound's CPU kernels (``auto_round_kernel``
from ``auto-round-lib``; without it, its PyTorch kernels). The loaded model's quantized modules replace the
selected layers of the variant; everything else stays the reference's own. The layers left out (--exclude)
are kept at 16 bits in AutoRound's ``layer_config``, so the blocks after them are tuned as they will run.

Specs: ``int<bits>`` (groups of 128, AutoRound's default), ``int<bits>-g<N>``, ``int<bits>-channel``, bits 2, 3,
4 or 8; ``-asym`` for zero points; ``-iters<N>`` (default 200, AutoRound's; ``-iters50`` is its "light" recipe,
``-iters0`` its round-to-nearest).
Tuning runs in the model's dtype without autocast (``amp=False``) and without ``torch.compile``.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import re
import tempfile
import time

import torch

from infoeval.errors import UsageError

_SPEC = re.compile(r"^int(\d)(?:-(channel|g(\d+)))?(-asym)?(?:-iters(\d+))?$")
BITS = (2, 3, 4, 8)
DEFAULT_GROUP, DEFAULT_ITERS, BATCH = 128, 200, 8  # AutoRound's defaults
CALIBRATED = True  # needs calibration text (quant/methods/calibration.py)


def parse(spec: str, text: str) -> tuple[dict, int, int | None]:
    """(AutoRound's settings, bits, group size or None per channel) of a spec such as ``int4-g128-iters50``."""
    m = _SPEC.match(spec)
    bits = int(m.group(1)) if m else None
    group = None if m and m.group(2) == "channel" else int(m.group(3)) if m and m.group(3) else DEFAULT_GROUP
    iters = int(m.group(5)) if m and m.group(5) else DEFAULT_ITERS
    if not m or bits not in BITS or (group is not None and (group < 8 or group % 8)):
        raise UsageError(
            f"'{text}' is not an autoround scheme; give autoround:int<bits>[-g<N>|-channel][-asym][-iters<N>] "
            "with bits in "
            f"{', '.join(map(str, BITS))}, N a multiple of 8 (autoround:int4-g128, "
            "autoround:int4-g128-iters50; -iters0 is its round-to-nearest)"
        )
    return (
        {"bits": bits, "group_size": group if group else -1, "sym": not m.group(4), "iters": iters, "amp": False},
        bits,
        group,
    )


@contextlib.contextmanager
def _quiet():
    """AutoRound's and transformers' progress bars and notices kept off the terminal (INFOEVAL_DEBUG shows them),
    and torch's print options as they were (AutoRound sets them for the whole process)."""
    import logging

    import auto_round  # noqa: F401  (its import sets its logger's level: set it after)

    from infoeval.quant.methods import kept_print_options

    logger = logging.getLogger("autoround")
    level = logger.level
    try:
        with kept_print_options():
            if os.environ.get("INFOEVAL_DEBUG"):
                yield
                return
            logger.setLevel(logging.ERROR)
            with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
                yield
    finally:
        logger.setLevel(level)


def quantize_model(
    model: torch.nn.Module, tokenizer, selected: list[str], settings: dict, calibration
) -> tuple[dict, dict]:
    """({name: (AutoRound's module, bytes its checkpoint stores for it, 0.0)}, what it took) for the ``selected``
    Linear layers of ``model`` (left as it is), tuned on ``calibration.samples``."""
    import copy

    from auto_round import AutoRound

    group = settings["group_size"]
    rows = sorted(
        {
            model.get_submodule(n).in_features
            for n in selected
            if group > 0 and model.get_submodule(n).in_features % group
        }
    )
    if rows:
        raise UsageError(
            "AutoRound's kernels need each row's inputs to be a multiple of the group size: this model has "
            f"rows of {rows[0]}, "
            f"not a multiple of {group}; give a group size that divides {rows[0]}"
        )
    device = next(model.parameters()).device
    skip = {
        n: {"bits": 16} for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and n not in set(selected)
    }
    samples = calibration.samples
    t0 = time.perf_counter()
    with _quiet(), torch.inference_mode(False), torch.enable_grad():  # it learns by gradient descent
        ar = AutoRound(
            copy.deepcopy(model),
            tokenizer,
            bits=settings["bits"],
            group_size=settings["group_size"],
            sym=settings["sym"],
            iters=settings["iters"],
            dataset=[row[None, :] for row in samples],
            nsamples=samples.shape[0],
            seqlen=samples.shape[1],
            batch_size=min(BATCH, samples.shape[0]),
            seed=calibration.provenance["seed"],
            amp=settings["amp"],
            enable_torch_compile=False,
            device_map=_device_map(device),
            layer_config=skip,
        )
        ar.quantize()
        tune_s = time.perf_counter() - t0
        with tempfile.TemporaryDirectory(prefix="infoeval-autoround-") as folder:
            ar.save_quantized(folder, format="auto_round")
            del ar
            modules = _load_modules(folder, selected, next(model.parameters()).dtype, device)
    return modules, {"tune_s": tune_s, "quantize_s": time.perf_counter() - t0, "kernel": _kernel(modules)}


def _device_map(device: torch.device):
    return "cpu" if device.type == "cpu" else f"{device.type}:{device.index or 0}"


def _load_modules(folder: str, selected: list[str], dtype: torch.dtype, device: torch.device) -> dict:
    """The exported checkpoint loaded with AutoRound's kernels for ``device``: each selected layer's module and
    the bytes its tensors take in the checkpoint (the codes, scales and zero points; not a bias)."""
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM, AutoRoundConfig

    loaded = AutoModelForCausalLM.from_pretrained(
        folder, dtype=dtype, device_map=_device_map(device), quantization_config=AutoRoundConfig(backend="auto")
    )
    sizes: dict[str, int] = {}
    for path in sorted(p for p in os.listdir(folder) if p.endswith(".safetensors")):
        with safe_open(os.path.join(folder, path), framework="pt") as f:
            for key in f.keys():
                layer, _, tensor = key.rpartition(".")
                if tensor != "bias":
                    t = f.get_slice(key)
                    sizes[layer] = sizes.get(layer, 0) + math.prod(t.get_shape()) * _itemsize(t.get_dtype())
    out = {}
    for name in selected:
        module = loaded.get_submodule(name)
        out[name] = (
            (module, sizes.get(name, 0), 0.0) if not isinstance(module, torch.nn.Linear) else None
        )  # seconds: in tune_s
    return out


def _itemsize(dtype: str) -> int:
    return {"I8": 1, "U8": 1, "I16": 2, "F16": 2, "BF16": 2, "I32": 4, "F32": 4, "I64": 8, "F64": 8}[dtype]


def describe(module: torch.nn.Module) -> dict:
    """The kernel module that runs the layer and the bytes it holds in memory (its own packing of the codes)."""
    from infoeval.quant.methods.variant import stored_bytes

    return {"kernel": f"{type(module).__module__}.{type(module).__name__}", "kernel_bytes": stored_bytes(module)}


def _kernel(modules: dict) -> str | None:
    kinds = sorted({f"{type(m).__module__}.{type(m).__name__}" for m, _, _ in filter(None, modules.values())})
    return ", ".join(kinds) or None

"""Shipped quantized checkpoints: which library's format a folder holds, the library it needs, how it loads, and
what its provenance records.

A folder saved by transformers with a library's config carries ``quantization_config`` in its ``config.json``
(bitsandbytes, torchao, compressed-tensors, AutoRound, GPTQ, AWQ, ...) and loads through ``from_pretrained``,
which calls that library. Two libraries save in their own layout, which transformers does not load: HQQ
(``qmodel.pt``, ``AutoHQQHFModel.save_quantized``) and quanto (``quanto_qmap.json``,
``QuantizedModelForCausalLM.save_pretrained``); each loads through its library's own loader. GPTQ and AWQ
folders load through transformers' path where ``gptqmodel`` is installed, else through AutoRound's kernels
(``AutoRoundConfig``), which read both layouts. A format whose library is missing is a usage error naming the
extra to install; a load the library refuses on this device is one line (exit 2), never a traceback.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import torch

from infoeval.errors import DeviceError, UsageError
from infoeval.models.libraries import quiet_checkpoint_io


@dataclass(frozen=True)
class Format:
    name: str  # the checkpoint's quant_method, or the library's own layout
    packages: tuple[str, ...]  # import names; the first one installed loads it
    distribution: str  # the library's name on PyPI (its version in provenance)
    extra: str  # pip install 'infoeval[<extra>]'


FORMATS = {
    "bitsandbytes": Format("bitsandbytes", ("bitsandbytes",), "bitsandbytes", "bnb"),
    "torchao": Format("torchao", ("torchao",), "torchao", "torchao"),
    "compressed-tensors": Format("compressed-tensors", ("compressed_tensors",), "compressed-tensors", "packed"),
    "auto-round": Format("auto-round", ("auto_round",), "auto-round", "autoround"),
    "gptq": Format("gptq", ("gptqmodel", "auto_round"), "auto-round", "autoround"),
    "awq": Format("awq", ("gptqmodel", "auto_round"), "auto-round", "autoround"),
    "hqq": Format("hqq", ("hqq",), "hqq", "hqq"),
    "quanto": Format("quanto", ("optimum.quanto",), "optimum-quanto", "quanto"),
}
HQQ_FILE, QUANTO_FILE = "qmodel.pt", "quanto_qmap.json"


def checkpoint_format(folder: Path) -> tuple[str, dict] | None:
    """(format name, its quantization settings) of a model folder; None for a plain float checkpoint."""
    folder = Path(folder)
    if (folder / HQQ_FILE).is_file():
        return "hqq", {"quant_method": "hqq", "layout": "hqq AutoHQQHFModel.save_quantized"}
    if (folder / QUANTO_FILE).is_file():
        qmap = json.loads((folder / QUANTO_FILE).read_text(encoding="utf-8"))
        weights = sorted({v.get("weights") for v in qmap.values()} - {None})
        return "quanto", {
            "quant_method": "quanto",
            "layout": "optimum-quanto QuantizedModelForCausalLM",
            "weights": weights,
        }
    config = folder / "config.json"
    qc = json.loads(config.read_text(encoding="utf-8")).get("quantization_config") if config.is_file() else None
    return (method_name(qc), qc) if qc else None


def method_name(qc: dict) -> str:
    """A ``quantization_config``'s method as FORMATS names it (``auto_round`` → ``auto-round``)."""
    return str(qc.get("quant_method", "unknown")).lower().replace("_", "-")


def _installed(package: str) -> bool:
    from infoeval.models.libraries import installed

    return installed(package)


def loader_package(name: str, folder: Path) -> str | None:
    """The installed library that loads format ``name`` (None: a format infoeval does not know, left to
    transformers); a usage error naming the extra when none is installed."""
    fmt = FORMATS.get(name)
    if fmt is None:
        return None
    for package in fmt.packages:
        if _installed(package):
            return package
    needs = " or ".join(fmt.packages)
    raise UsageError(
        f"'{folder}' is a {name} checkpoint, which needs {needs} (not installed): pip install 'infoeval[{fmt.extra}]'"
    )


def load_shipped(folder: Path, name: str, package: str | None, dtype: torch.dtype, device: torch.device, device_map):
    """The model of a quantized checkpoint, loaded by its library on ``device`` (or by ``device_map``); any
    failure of the library is one line naming the format and the device."""
    with quiet_checkpoint_io():
        return _load(folder, name, package, dtype, device, device_map)


def _load(folder: Path, name: str, package: str | None, dtype: torch.dtype, device: torch.device, device_map):
    from transformers import AutoModelForCausalLM

    # on a CPU the libraries load where they are; elsewhere each places its own tensors (no .to() after)
    placement = device_map or ({"": str(device)} if device.type != "cpu" else None)
    try:
        if name == "hqq":
            from hqq.models.hf.base import AutoHQQHFModel

            return AutoHQQHFModel.from_quantized(str(folder), device=str(device), compute_dtype=dtype)
        if name == "quanto":
            from optimum.quanto import QuantizedModelForCausalLM

            return QuantizedModelForCausalLM.from_pretrained(str(folder))._wrapped.to(device)
        extra = {}
        if name in ("gptq", "awq") and package == "auto_round":
            from transformers import AutoRoundConfig

            extra["quantization_config"] = AutoRoundConfig(backend="auto")
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, device_map=placement, **extra)
        compressor = getattr(getattr(model, "hf_quantizer", None), "compressor", None)
        if compressor is not None and hasattr(model, "ct_decompress_hook"):
            # compressed-tensors decompresses by a hook at the first forward, which the engine's own head would
            # break: decompress now (the call removes the hook)
            with _fp4_unpacked_as(dtype):
                compressor.decompress_model(model)
        return model
    except (
        ImportError,
        RuntimeError,
        ValueError,
        NotImplementedError,
        AssertionError,
        TypeError,
        KeyError,
        OSError,
    ) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise DeviceError(f"the {name} checkpoint '{folder}' did not load on {device}: {first}") from None


@contextlib.contextmanager
def _fp4_unpacked_as(dtype: torch.dtype):
    """compressed-tensors unpacks NVFP4's E2M1 codes to bfloat16 whatever dtype the model loads in, so that its
    dequantized weights are ŵ rounded to bfloat16; here they are unpacked in ``dtype`` (E2M1 values are exact in
    any float dtype), so that ŵ = values · (E4M3 scale / global scale) is computed, and kept, in that dtype: the
    product the kernel's float32 accumulation sees, and what the in-process format computes."""
    try:
        from compressed_tensors.compressors.nvfp4 import base
    except ImportError:  # another compressed-tensors layout: its own behaviour
        yield
        return
    unpack = getattr(base, "unpack_fp4_from_uint8", None)
    if unpack is None:
        yield
        return
    base.unpack_fp4_from_uint8 = lambda a, m, n, **_: unpack(a, m, n, dtype=dtype)
    try:
        yield
    finally:
        base.unpack_fp4_from_uint8 = unpack


def describe(name: str, settings: dict, package: str | None, model: torch.nn.Module, folder: Path) -> dict:
    """The provenance of a quantized checkpoint: its format, method settings (bits, group, symmetry, layout),
    the library and version that loaded it, and the bits per weight of its stored tensors."""
    from infoeval.models.stored_bits import stored_bits

    fmt = FORMATS.get(name)
    dist = fmt.distribution if fmt is not None and package != "gptqmodel" else (package or "transformers")
    try:
        lib_version = version(dist)
    except PackageNotFoundError:
        lib_version = None
    return {
        "format": name,
        **_settings(name, settings, model),
        "library": dist,
        "library_version": lib_version,
        "loader": package or "transformers",
        "config": settings,
        **stored_bits(folder, model),
    }


def _settings(name: str, qc: dict, model: torch.nn.Module) -> dict:
    """bits, group size and symmetry as the format records them (None where it does not)."""
    if name == "bitsandbytes":
        four = qc.get("load_in_4bit") or qc.get("_load_in_4bit")
        return {
            "bits": 4 if four else 8,
            "group_size": 64 if four else None,
            "symmetric": True,
            "packing": qc.get("bnb_4bit_quant_type") if four else "llm.int8",
        }
    if name in ("auto-round", "gptq", "awq"):
        return {
            "bits": qc.get("bits"),
            "group_size": qc.get("group_size"),
            "symmetric": qc.get("sym"),
            "packing": qc.get("packing_format") or qc.get("checkpoint_format") or qc.get("version") or name,
        }
    if name == "compressed-tensors":
        weights = next(iter((qc.get("config_groups") or {}).values()), {}).get("weights") or {}
        return {
            "bits": weights.get("num_bits"),
            "group_size": weights.get("group_size"),
            "symmetric": weights.get("symmetric"),
            "packing": qc.get("format"),
        }
    if name == "torchao":
        return _torchao_settings(qc)
    if name == "hqq":
        return _hqq_settings(model)
    if name == "quanto":
        w = qc.get("weights") or []
        return {
            "bits": int(w[0][4:]) if len(w) == 1 and w[0].startswith("qint") else None,
            "group_size": None,
            "symmetric": None,
            "packing": ",".join(w),
        }
    return {"bits": qc.get("bits"), "group_size": qc.get("group_size"), "symmetric": None, "packing": None}


def _torchao_settings(qc: dict) -> dict:
    quant = (qc.get("quant_type") or {}).get("default") or qc.get("quant_type") or {}
    kind, data = str(quant.get("_type", "")), quant.get("_data") or {}
    dtype = str((data.get("weight_dtype") or {}).get("_data", data.get("weight_dtype", "")))
    bits = next((b for b in (8, 4, 3, 2, 1, 5, 6, 7) if f"int{b}" in dtype.lower() or f"int{b}" in kind.lower()), None)
    gran = (data.get("granularity") or {}).get("_data") or {}
    group = data.get("group_size") or gran.get("group_size")
    return {"bits": bits, "group_size": group, "symmetric": None, "packing": kind or None}


def _hqq_settings(model: torch.nn.Module) -> dict:
    for module in model.modules():
        config = getattr(module, "quant_config", None)
        params = config.get("weight_quant_params") if isinstance(config, dict) else None
        if params:
            return {
                "bits": params.get("nbits"),
                "group_size": params.get("group_size"),
                "symmetric": False,
                "packing": "hqq",
            }
    return {"bits": None, "group_size": None, "symmetric": False, "packing": "hqq"}

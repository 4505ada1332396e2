"""Model loading: a Hugging Face folder, a hub id, a .gguf file or the built-in ``smollm2-135m``.

Nothing else in infoeval imports transformers' loading API. A GGUF file is dequantized by transformers on
first use (slow: ~25 s for SmolLM2-135M) and cached as safetensors under ``$INFOEVAL_CACHE`` (default
``~/.cache/infoeval``), keyed by the file's sha256, so later runs load in a few seconds.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path

import torch

from infoeval import distributed
from infoeval.errors import DeviceError, ModelLoadError, UsageError, spell
from infoeval.models.files import (
    BUILTIN,
    cached_gguf_bits,
    cached_sha256,
    gguf_cache_dir,
    gguf_file,
)
from infoeval.models.libraries import transformers_quietly
from infoeval.models.records import LoadedModel, ModelInfo, TokenizerInfo, tokenizer_info  # noqa: F401
from infoeval.models.sources import from_folder, from_hub, hub_quantization, load_folder

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")
_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


def resolve_device(device: str) -> torch.device:
    """auto → cuda when available else cpu; cuda without a GPU is a usage error; under a launcher a plain cuda is
    this rank's ``cuda:LOCAL_RANK``."""
    d = device.lower()
    if d == "auto":
        return distributed.local_device(torch.device("cuda" if torch.cuda.is_available() else "cpu"))
    if d.startswith("cuda"):
        if not torch.cuda.is_available():
            raise DeviceError(
                f"{spell('device')} {device} was asked for but no CUDA device is available; use {spell('device')} "
                "cpu or auto"
            )
        return distributed.local_device(torch.device(d))
    if d == "cpu":
        return torch.device("cpu")
    raise UsageError(f"unknown device '{device}'; allowed: auto, cpu, cuda, cuda:N")


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """auto → float32 on CPU, bfloat16 on CUDA. On a CPU bfloat16 stays an option: measured on SmolLM2
    (benchmarks/floor.py) it was 1.64× faster, but its noise floor is 72 % of int8-channel's float32 KL, not the
    tenth asked (docs/metrics.md, Resolution)."""
    d = dtype.lower()
    if d == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if d not in _DTYPES:
        raise UsageError(f"unknown dtype '{dtype}'; allowed: auto, float32, bfloat16, float16")
    return _DTYPES[d]


def native_bfloat16(device: torch.device) -> bool:
    """Whether ``device`` computes in bfloat16 natively: a CUDA GPU, or a CPU with bfloat16 instructions (oneDNN's
    check: AVX512-BF16 or AMX), where a bfloat16 matrix product reads half the bytes of a float32 one."""
    if device.type == "cuda":
        return True
    try:
        return device.type == "cpu" and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a torch built without oneDNN
        return False


@contextlib.contextmanager
def _quiet_transformers():
    """Silence transformers' warnings and tqdm bars during loading (INFOEVAL_DEBUG=1 keeps them), and the libraries'
    notices as transformers imports them (``transformers_quietly``)."""
    from transformers.utils import logging as hf_logging

    transformers_quietly()

    if os.environ.get("INFOEVAL_DEBUG"):
        yield
        return
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    old_tqdm = os.environ.get("TQDM_DISABLE")
    os.environ["TQDM_DISABLE"] = "1"  # the GGUF loader uses tqdm directly
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        hf_logging.enable_progress_bar()
        if old_tqdm is None:
            os.environ.pop("TQDM_DISABLE", None)
        else:
            os.environ["TQDM_DISABLE"] = old_tqdm


def load_model(spec: str, device: torch.device, dtype: torch.dtype, device_map: str | None = None) -> LoadedModel:
    """Load a causal LM and its tokenizer from a built-in name, a .gguf file, a folder or a hub id (or take a
    ``ModelObject``, a model already in memory, as it is: ``models/objects.py``)."""
    from infoeval.models.objects import ModelObject, load_object

    if isinstance(spec, ModelObject):
        return load_object(spec, device, dtype, device_map)
    info: dict = {"spec": spec, "dtype": str(dtype).replace("torch.", ""), "device": str(device)}
    with _quiet_transformers():
        gguf = gguf_file(spec)
        if gguf is not None:
            if not gguf.is_file():
                raise ModelLoadError(f"GGUF file '{spec}' does not exist; pass an existing .gguf file")
            digest = cached_sha256(gguf)  # hashing the file took 0.1 s of every run
            try:
                folder = gguf_cache_dir(gguf, digest)
            except (ValueError, OSError, KeyError) as e:
                raise ModelLoadError(f"cannot load GGUF file '{gguf}': {str(e).splitlines()[0]}") from None
            model, tok = from_folder(folder, dtype, device_map)
            add_bos = json.loads((folder / "infoeval-source.json").read_text()).get("gguf_add_bos")
            info.update(
                kind="gguf",
                path=str(gguf.resolve()),
                sha256=digest,
                cache=str(folder),
                gguf_add_bos=add_bos,
                quantization=cached_gguf_bits(gguf, digest),
            )
            tok_source = f"transformers GGUF conversion of {gguf.name}"
        elif Path(spec).exists():
            model, tok, folder_info = load_folder(Path(spec), device, dtype, device_map)
            info.update(folder_info)
            tok_source = f"{type(tok).__name__} from {spec}"
        elif _HUB_ID.match(spec):
            model, tok = from_hub(spec, dtype, device_map)
            info.update(
                kind="hub",
                revision=getattr(model.config, "_commit_hash", None),
                quantization=hub_quantization(spec, model),
            )
            tok_source = f"{type(tok).__name__} from hub {spec}"
        else:
            raise ModelLoadError(
                f"model '{spec}' is neither an existing file or folder nor a hub id; pass a model folder, a .gguf "
                f"file, a hub id (org/name) or {' or '.join(repr(b) for b in BUILTIN)}"
            )
    if device_map is None and not (info.get("kind") == "folder" and info.get("quantization")):
        model.to(device)  # a shipped quantized folder is placed by its library as it loads
    model.eval()
    info = ModelInfo(
        **info,
        architecture=(getattr(model.config, "architectures", None) or [type(model).__name__])[0],
        model_type=model.config.model_type,
        n_parameters=sum(p.numel() for p in model.parameters()),
        tokenizer=tokenizer_info(tok, tok_source),
    )
    return LoadedModel(model, tok, info)

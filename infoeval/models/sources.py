"""Where a model's weights and tokenizer come from: a Hugging Face folder (a float checkpoint through
transformers, a shipped quantized one through its library) or a hub id (the local cache first, the hub only when
it can be reached), and a hub checkpoint's quantization. ``load_model`` (the package) chooses among them."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from infoeval import distributed
from infoeval.errors import ModelLoadError
from infoeval.models.files import weights_digest


def from_folder(folder: Path | str, dtype: torch.dtype, device_map, local_files_only: bool = False):
    """(model, tokenizer) of a folder or hub id through transformers; a model that is not a causal LM fails."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    kw = {"local_files_only": local_files_only}
    config = AutoConfig.from_pretrained(folder, **kw)
    # under a launcher with --device-map, each rank's replica spreads over its own group of GPUs
    placement = {"device_map": device_map}
    max_memory = distributed.replica_max_memory() if device_map else None
    if max_memory:
        placement["max_memory"] = max_memory
    try:
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, **placement, **kw)
    except ValueError as e:
        if "Unrecognized configuration class" in str(e):
            raise ModelLoadError(
                f"'{folder}' holds a {config.model_type} model, which is not a causal language model"
            ) from None
        raise
    tok = AutoTokenizer.from_pretrained(folder, **kw)
    return model, tok


def load_folder(folder: Path, device: torch.device, dtype: torch.dtype, device_map):
    """(model, tokenizer, provenance) of a model folder: a float checkpoint through transformers, a shipped
    quantized one through its library (``models/shipped.py``)."""
    from infoeval.models.shipped import checkpoint_format, describe, load_shipped, loader_package

    if not (folder.is_dir() and (folder / "config.json").is_file()):
        raise ModelLoadError(f"'{folder}' is not a Hugging Face model folder (no config.json)")
    info = {"kind": "folder", "path": str(folder.resolve()), "sha256": weights_digest(folder)}
    shipped = checkpoint_format(folder)
    if shipped is None:
        model, tok = from_folder(folder, dtype, device_map)
        return model, tok, info
    from transformers import AutoTokenizer

    name, settings = shipped
    package = loader_package(name, folder)
    model = load_shipped(folder, name, package, dtype, device, device_map)
    tok = AutoTokenizer.from_pretrained(folder)
    return model, tok, info | {"quantization": describe(name, settings, package, model, folder)}


def hub_quantization(repo_id: str, model) -> dict | None:
    """A hub checkpoint's quantization (from its snapshot in the local cache); None for a float one."""
    qc = getattr(model.config, "quantization_config", None)
    if not qc:
        return None
    from huggingface_hub import try_to_load_from_cache

    from infoeval.models.shipped import FORMATS, describe, method_name

    qc = qc if isinstance(qc, dict) else qc.to_dict()
    name = method_name(qc)
    config = try_to_load_from_cache(repo_id, "config.json")
    folder = Path(config).parent if isinstance(config, str) else Path("/nonexistent")
    fmt = FORMATS.get(name)
    return describe(name, qc, fmt.packages[0] if fmt else None, model, folder)


def _hub_reachable(timeout: float = 3.0) -> bool:
    """One TCP connection to the hub's host: tells "offline" apart quickly, before huggingface_hub's retries."""
    import socket
    from urllib.parse import urlparse

    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return False
    from huggingface_hub import constants

    url = urlparse(constants.ENDPOINT)
    try:
        with socket.create_connection((url.hostname, url.port or 443), timeout=timeout):
            return True
    except OSError:
        return False


def from_hub(repo_id: str, dtype: torch.dtype, device_map):
    """The local Hugging Face cache first; the hub only when it can be reached."""
    try:
        return from_folder(repo_id, dtype, device_map, local_files_only=True)
    except OSError:
        pass
    if not _hub_reachable():
        raise ModelLoadError(
            f"model '{repo_id}' is not a local folder and not in the Hugging Face cache, and the hub cannot be "
            "reached; "
            f"download it where there is internet (`hf download {repo_id}`) or pass a local folder"
        )
    try:
        return from_folder(repo_id, dtype, device_map)
    except OSError as e:
        raise ModelLoadError(f"cannot load '{repo_id}' from the Hugging Face hub: {str(e).splitlines()[0]}") from None

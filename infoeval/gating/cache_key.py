"""The cache key of a reference file (``infoeval reference --cache-key``): what the file would hold, known before
anything loads, so that CI can restore a reference built on an earlier run (``actions/cache``) and build it again
exactly when something it depends on changed:

    model      a folder: the sha256 of each weight file, config.json and each tokenizer file (tokenizer_config.json
               without the ``added_tokens_decoder`` infoeval may add beside a tokenizer.json: it is read from
               there); a GGUF file or the built-in model: the file's sha256; a hub id: the commit it resolves to
    text       the sha256 of the text as the protocol reads it (and of its documents, for lm-eval's), and how
               many tokens are scored
    protocol   its name, ctx, stride and prefix
    reference  top-K, tail samples, seed, format, head, the dtype and the device type (each changes the numbers),
               and the reference file's format version

Paths, times and the machine are not in it: the same inputs give the same key on any machine. The key is
``infoeval-ref-<model name>-<32 hex digits of the sha256 of the parts' canonical JSON>`` (the name a label).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from infoeval.errors import RuntimeFailure, UsageError, spell

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "added_tokens.json",
)


def _tokenizer_config_digest(path: Path, has_tokenizer_json: bool) -> str:
    """sha256 of tokenizer_config.json as canonical JSON, without the added tokens a tokenizer.json already holds."""
    config = json.loads(path.read_text(encoding="utf-8"))
    if has_tokenizer_json:
        config.pop("added_tokens_decoder", None)
    return hashlib.sha256(json.dumps(config, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def folder_identity(folder: Path) -> dict:
    """{file name: sha256} of a model folder's weights, config and tokenizer files."""
    from infoeval.models.files import cached_sha256, weight_files

    weights = weight_files(folder)
    if not weights:
        raise UsageError(f"model folder '{folder}' holds no weights (.safetensors, .bin or .pt)")
    files = {p.name: cached_sha256(p) for p in weights}
    for name in ("model.safetensors.index.json", "config.json", *TOKENIZER_FILES):
        path = folder / name
        if name == "tokenizer_config.json" and path.is_file():
            files[name] = _tokenizer_config_digest(path, (folder / "tokenizer.json").is_file())
        elif path.is_file():
            files[name] = cached_sha256(path)
    return dict(sorted(files.items()))


def hub_commit(repo: str, revision: str | None = None) -> str:
    """The commit a hub id resolves to now (``huggingface_hub``); a runtime failure where the hub cannot say."""
    try:
        from huggingface_hub import HfApi

        return HfApi().model_info(repo, revision=revision).sha
    except Exception as e:  # noqa: BLE001  (offline, a private repo, a typo: one line)
        raise RuntimeFailure(
            f"cannot resolve the hub id '{repo}' to a commit for the cache key ({type(e).__name__}); download the "
            "model to a folder and give the folder"
        ) from None


def model_identity(spec) -> dict:
    """What identifies the model a spec names, by content (module docstring)."""
    from infoeval.models.files import cached_sha256, gguf_file

    if not isinstance(spec, str):
        raise UsageError(f"{spell('cache_key')} needs a model spec (a folder, a .gguf file or a hub id), not an object")
    gguf = gguf_file(spec)
    if gguf is not None:
        if not gguf.is_file():
            raise UsageError(f"GGUF file '{spec}' does not exist")
        return {"kind": "gguf", "name": gguf.stem, "sha256": cached_sha256(gguf)}
    if Path(spec).is_dir():
        return {"kind": "folder", "name": Path(spec).resolve().name, "files": folder_identity(Path(spec))}
    if re.fullmatch(r"[\w.-]+/[\w.-]+", spec) and not Path(spec).exists():
        return {"kind": "hub", "name": spec, "commit": hub_commit(spec)}
    raise UsageError(f"model '{spec}' is not a folder, a .gguf file or a hub id (org/name)")


def text_identity(text_settings, window_settings) -> dict:
    """The sha256 of the text as the protocol reads it (and of its documents), and the tokens scored."""
    from infoeval.input.protocols import REGISTRY

    text, documents = REGISTRY[window_settings.protocol].load(text_settings)
    out = {"sha256": text.sha256, "max_tokens": text_settings.max_tokens}
    if documents is not None:
        joined = "\x1e".join(documents.texts).encode("utf-8")
        out["documents_sha256"] = hashlib.sha256(joined).hexdigest()
    return out


def cache_key_parts(request) -> dict:
    """The parts of a ``ReferenceRequest``'s cache key (module docstring); loads no weights."""
    from infoeval.gating.reference_file import FORMAT_VERSION
    from infoeval.models import resolve_device, resolve_dtype

    device = resolve_device(request.model.device)
    w = request.window
    return {
        "model": model_identity(request.model.model),
        "text": text_identity(request.text, w),
        "protocol": {"name": w.protocol, "ctx": w.ctx, "stride": w.stride or w.ctx, "prefix": w.prefix},
        "reference": {
            "top_k": request.top_k,
            "tail_samples": request.tail_samples,
            "seed": request.seed,
            "format": request.format,
            "head": request.head if request.format == "hidden" else None,
            "dtype": str(resolve_dtype(request.model.dtype, device)).replace("torch.", ""),
            "device": device.type,
            "format_version": FORMAT_VERSION,
        },
    }


def cache_key(parts: dict) -> str:
    """``infoeval-ref-<model name>-<32 hex digits>`` of the parts' canonical JSON (a folder's or file's name is a
    label only: the same files under another name give the same digest; a hub id is the identity)."""
    model = (
        parts["model"] if parts["model"]["kind"] == "hub" else {k: v for k, v in parts["model"].items() if k != "name"}
    )
    hashed = {**parts, "model": model}
    digest = hashlib.sha256(json.dumps(hashed, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:32]
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", parts["model"]["name"]).strip("-")[:48] or "model"
    return f"infoeval-ref-{name}-{digest}"


@dataclass(frozen=True)
class CacheKey:
    """``reference --cache-key``'s result: the key and what it was made from."""

    key: str
    parts: dict

    @classmethod
    def of(cls, request) -> CacheKey:
        parts = cache_key_parts(request)
        return cls(cache_key(parts), parts)

    def to_json(self) -> dict:
        return {"command": "reference", "cache_key": self.key, "parts": self.parts}

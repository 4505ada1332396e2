"""A model folder as a skeleton: its config's model with every parameter on the meta device (buffers such as the
rotary frequencies real) and its tokenizer, nothing of the weights read; and its tensors (``TensorFiles``: which
safetensors file holds each), read one part at a time, counted. A layer-streamed pass (``engine/streaming.py``)
materializes the parts it needs from them."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from infoeval.errors import RuntimeFailure, UsageError, spell
from infoeval.models.files import BUILTIN, SafetensorsTensor, checkpoint_tensors, gguf_file, weights_digest
from infoeval.models.records import LoadedModel, ModelInfo, tokenizer_info


def skeleton(folder: Path, dtype: torch.dtype) -> torch.nn.Module:
    """The model of ``folder``'s config with every parameter on the meta device (buffers real), nothing read."""
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(folder)
    with init_empty_weights(include_buffers=False):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.tie_weights()  # a tied head is the embeddings' Parameter, as from_pretrained leaves it
    return model.eval()


def streamable_folder(spec) -> Path:
    """The folder a streamed pass reads: a model folder with safetensors; anything else is refused with one line
    naming what can be streamed."""
    what = None
    if not isinstance(spec, str):
        what = "a model object in memory"
    elif spec.lower() in BUILTIN or gguf_file(spec) is not None:
        what = "a GGUF file"
    elif not Path(spec).is_dir():
        what = "not a folder here (a hub id: download it first, e.g. huggingface-cli download ORG/NAME --local-dir DIR)"
    elif not any(Path(spec, name).is_file() for name in ("model.safetensors", "model.safetensors.index.json")):
        found = sorted(p.name for p in Path(spec).iterdir() if p.suffix in (".bin", ".gguf", ".pt", ".pth"))
        what = f"a folder without safetensors ({', '.join(found) or 'no weights'})"
    if what is not None:
        raise UsageError(
            f"{spell('stream')} layers reads a model folder's safetensors (model.safetensors or a sharded "
            f"model.safetensors.index.json); '{spec}' is {what}"
        )
    return Path(spec)


def is_streamable(spec) -> bool:
    """Whether ``spec`` is a model folder a streamed pass can read."""
    try:
        streamable_folder(spec)
    except UsageError:
        return False
    return True


def load_skeleton(spec, device: torch.device, dtype: torch.dtype) -> LoadedModel:
    """A model folder's skeleton and tokenizer as a ``LoadedModel`` (its provenance as ``load_model`` records a
    folder: the weights' sha256, the architecture, the parameter count)."""
    from transformers import AutoTokenizer

    folder = streamable_folder(spec)
    model = skeleton(folder, dtype)
    tok = AutoTokenizer.from_pretrained(folder)
    info = ModelInfo(
        spec=spec,
        kind="folder",
        dtype=str(dtype).replace("torch.", ""),
        device=str(device),
        architecture=(getattr(model.config, "architectures", None) or [type(model).__name__])[0],
        model_type=model.config.model_type,
        n_parameters=sum(p.numel() for p in model.parameters()),
        tokenizer=tokenizer_info(tok, f"{type(tok).__name__} from {spec}"),
        path=str(folder.resolve()),
        sha256=weights_digest(folder),
    )
    return LoadedModel(model, tok, info)


def storage_read_bytes() -> int | None:
    """Bytes this process has had read from storage so far (Linux's /proc/self/io ``read_bytes``: page-cache hits
    excluded), or None where the kernel does not say."""
    try:
        with open("/proc/self/io", encoding="ascii") as f:
            return int(dict(line.split(":", 1) for line in f)["read_bytes"])
    except (OSError, KeyError, ValueError):
        return None


@dataclass
class Reads:
    """What a pass read from the checkpoint (the tensors' bytes; the storage's, where the kernel says) and where its
    time went."""

    bytes: int = 0
    read_s: float = 0.0
    compute_s: float = 0.0
    storage_bytes: int | None = None


@dataclass
class TensorFiles:
    """The tensors of a folder's safetensors (one file, or a sharded index): where each lies, read one at a time."""

    folder: Path
    tensors: dict[str, SafetensorsTensor]
    reads: Reads = field(default_factory=Reads)

    @classmethod
    def of(cls, folder: Path) -> TensorFiles:
        return cls(folder, checkpoint_tensors(streamable_folder(str(folder))))

    def read(
        self, names: dict[str, str], dtype: torch.dtype | None = None, device: torch.device | None = None
    ) -> dict[str, torch.Tensor]:
        """{key: tensor} for {key: the checkpoint's tensor name}: each read from its file (in file order) into memory
        of its own, then cast to ``dtype`` (floating tensors) and placed on ``device`` where given (``place``)."""
        missing = [name for name in names.values() if name not in self.tensors]
        if missing:
            raise RuntimeFailure(f"the checkpoint in '{self.folder}' has no tensor '{missing[0]}'")
        t0, out = time.perf_counter(), {}
        for key, name in sorted(names.items(), key=lambda kv: (self.tensors[kv[1]].file, self.tensors[kv[1]].start)):
            meta = self.tensors[name]
            with open(meta.file, "rb") as fh:
                t = meta.read(fh)
            self.reads.bytes += meta.nbytes
            out[key] = t
        self.reads.read_s += time.perf_counter() - t0
        return place(out, dtype, device) if dtype is not None or device is not None else out

    def advise(self, names: Sequence[str]) -> None:
        """Ask the kernel to read these tensors' bytes into its page cache now (``posix_fadvise`` WILLNEED: the disk
        reads run while the caller computes, in the kernel's memory, not this process's), so that their ``read``
        later copies from memory. Each file's ranges merged; a no-op where the call does not exist."""
        if not hasattr(os, "posix_fadvise"):
            return
        ranges: dict[Path, list[tuple[int, int]]] = {}
        for name in names:
            meta = self.tensors[name]
            ranges.setdefault(meta.file, []).append((meta.start, meta.start + meta.nbytes))
        for path, spans in ranges.items():
            merged: list[list[int]] = []
            for a, b in sorted(spans):
                if merged and a <= merged[-1][1]:
                    merged[-1][1] = max(merged[-1][1], b)
                else:
                    merged.append([a, b])
            fd = os.open(path, os.O_RDONLY)
            try:
                for a, b in merged:
                    os.posix_fadvise(fd, a, b - a, os.POSIX_FADV_WILLNEED)
            finally:
                os.close(fd)


def place(tensors: dict[str, torch.Tensor], dtype: torch.dtype | None, device: torch.device | None) -> dict:
    """``tensors``, each replaced by itself cast to ``dtype`` (floating ones) and moved to ``device`` (None: as it
    is), one at a time: each one's source let go before the next is made."""
    for k, t in tensors.items():
        tensors[k] = t.to(
            device=device or t.device, dtype=dtype if dtype is not None and t.is_floating_point() else t.dtype
        )
    return tensors

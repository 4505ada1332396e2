"""A model folder as a skeleton: its config's model with every parameter on the meta device (buffers such as the
rotary frequencies real) and its tokenizer, nothing of the weights read; and its tensors (``TensorFiles``: which
safetensors file holds each), read one part at a time, counted. A layer-streamed pass (``engine/streaming.py``)
materializes the parts it needs from them."""

from __future__ import annotations

import threading
import time
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
    read_s: float = 0.0  # reading (in the reader thread when the pass reads ahead: beside the compute)
    wait_s: float = 0.0  # the pass waiting for a read
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
        self,
        names: dict[str, str],
        dtype: torch.dtype | None = None,
        device: torch.device | None = None,
        pool: BufferPool | None = None,
    ) -> dict[str, torch.Tensor]:
        """{key: tensor} for {key: the checkpoint's tensor name}: each read from its file (in file order) into memory
        of its own (one of ``pool``'s where it has one), then cast to ``dtype`` (floating tensors) and placed on
        ``device`` where given (``place``)."""
        missing = [name for name in names.values() if name not in self.tensors]
        if missing:
            raise RuntimeFailure(f"the checkpoint in '{self.folder}' has no tensor '{missing[0]}'")
        t0, out = time.perf_counter(), {}
        for key, name in sorted(names.items(), key=lambda kv: (self.tensors[kv[1]].file, self.tensors[kv[1]].start)):
            meta = self.tensors[name]
            with open(meta.file, "rb") as fh:
                t = meta.read(fh, pool.take(meta.shape, meta.dtype) if pool is not None else None)
            self.reads.bytes += meta.nbytes
            out[key] = t
        self.reads.read_s += time.perf_counter() - t0
        return place(out, dtype, device)


class BufferPool:
    """Tensors a pass freed, kept for its next reads of their shape and dtype (the next decoder layer's): reading
    into memory already touched costs a copy, not page faults and fresh memory. A tensor is kept only where nothing
    else holds its storage. Thread-safe (the reader thread takes, the pass gives)."""

    def __init__(self):
        self._free: dict[tuple, list[torch.Tensor]] = {}
        self._lock = threading.Lock()

    def give(self, tensors) -> None:
        for t in tensors:
            alone = torch._C._storage_Use_Count(t.untyped_storage()._cdata) <= 2  # t's, and the one asking
            if t.device.type == "cpu" and alone and t.is_contiguous() and t.storage_offset() == 0:
                with self._lock:
                    self._free.setdefault((tuple(t.shape), t.dtype), []).append(t.detach())

    def take(self, shape: tuple, dtype: torch.dtype) -> torch.Tensor | None:
        with self._lock:
            stack = self._free.get((tuple(shape), dtype))
            return stack.pop() if stack else None

    def clear(self) -> None:
        with self._lock:
            self._free.clear()


def place(tensors: dict[str, torch.Tensor], dtype: torch.dtype | None, device: torch.device | None) -> dict:
    """``tensors``, each replaced by itself cast to ``dtype`` (floating ones) and moved to ``device`` (None: as it
    is), one at a time: each one's source let go before the next is made."""
    for k, t in tensors.items():
        tensors[k] = t.to(
            device=device or t.device, dtype=dtype if dtype is not None and t.is_floating_point() else t.dtype
        )
    return tensors

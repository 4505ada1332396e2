"""A model folder as a skeleton: its config's model with every parameter on the meta device (buffers such as the
rotary frequencies real) and its tokenizer, nothing of the weights read; and its tensors (``TensorFiles``: which
safetensors file holds each), read one part at a time, counted. A layer-streamed pass (``engine/streaming.py``)
materializes the parts it needs from them."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from infoeval.errors import RuntimeFailure, UsageError, spell
from infoeval.models.arenas import ALIGN, Arenas, past_the_cache, read_range, runs
from infoeval.models.files import BUILTIN, SafetensorsTensor, checkpoint_tensors, gguf_file, weights_digest
from infoeval.models.libraries import transformers_quietly
from infoeval.models.records import LoadedModel, ModelInfo, tokenizer_info


def skeleton(folder: Path, dtype: torch.dtype) -> torch.nn.Module:
    """The model of ``folder``'s config with every parameter on the meta device (buffers real), nothing read."""
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    transformers_quietly()
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
    direct: bool = False  # past the page cache (``arenas.past_the_cache``: the files larger than memory)

    @classmethod
    def of(cls, folder: Path) -> TensorFiles:
        tensors = checkpoint_tensors(streamable_folder(str(folder)))
        return cls(folder, tensors, direct=past_the_cache(sum(t.nbytes for t in tensors.values())))

    def read(
        self,
        names: dict[str, str],
        dtype: torch.dtype | None = None,
        device: torch.device | None = None,
        arenas: Arenas | None = None,
    ) -> dict[str, torch.Tensor]:
        """{key: tensor} for {key: the checkpoint's tensor name}: each file's tensors read as few byte ranges, in file
        order, into page-aligned memory (one of ``arenas``' where given; ``models/arenas.py``; past the page cache
        where ``direct``), each tensor a view of it, then cast to ``dtype`` (floating tensors) and placed on
        ``device`` where given (``place``)."""
        missing = [name for name in names.values() if name not in self.tensors]
        if missing:
            raise RuntimeFailure(f"the checkpoint in '{self.folder}' has no tensor '{missing[0]}'")
        t0, out, by_file = time.perf_counter(), {}, {}
        for key, name in names.items():
            by_file.setdefault(self.tensors[name].file, []).append((key, self.tensors[name]))
        for file, metas in sorted(by_file.items()):
            for lo, hi in runs([(m.start, m.start + m.nbytes) for _, m in metas]):
                arena = arenas.take(hi - lo + 2 * ALIGN) if arenas is not None else None
                chunk = read_range(file, lo, hi, arena, self.direct)
                for key, meta in metas:
                    if key not in out and lo <= meta.start and meta.start + meta.nbytes <= hi:
                        out[key] = _view(chunk, meta.start - lo, meta)
            self.reads.bytes += sum(m.nbytes for _, m in metas)
        self.reads.read_s += time.perf_counter() - t0
        return place(out, dtype, device)


def _view(chunk: torch.Tensor, offset: int, meta: SafetensorsTensor) -> torch.Tensor:
    """``meta``'s tensor as a view of ``chunk`` (uint8) from ``offset``; a copy where its bytes are not aligned to its
    element size."""
    raw = chunk[offset : offset + meta.nbytes]
    if raw.storage_offset() % meta.dtype.itemsize:
        raw = raw.clone()
    return raw.view(meta.dtype).view(meta.shape)


def place(tensors: dict[str, torch.Tensor], dtype: torch.dtype | None, device: torch.device | None) -> dict:
    """``tensors``, each replaced by itself cast to ``dtype`` (floating ones) and moved to ``device`` (None: as it
    is), one at a time: each one's source let go before the next is made."""
    for k, t in tensors.items():
        tensors[k] = t.to(
            device=device or t.device, dtype=dtype if dtype is not None and t.is_floating_point() else t.dtype
        )
    return tensors

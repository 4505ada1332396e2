"""Bits per weight of a quantized checkpoint, read from the tensors it stores.

A layer counts as quantized when its stored tensors are more than a float ``weight`` (and ``bias``): integer or
byte codes, scales, zero points, a library's state. Its bits are every byte stored under its name but the
bias, over the weights of the original ``nn.Linear`` (its shape in the model built from ``config.json`` on the
meta device). Safetensors files are read from their headers; a checkpoint in a library's own pickle (HQQ's
``qmodel.pt``) is measured by its loaded modules' state dicts, which are what it saves; a GGUF file by its
tensors' types (the transformer blocks' 2-D tensors, the layers infoeval's schemes quantize).
"""

from __future__ import annotations

import json
import math
import struct
from collections import Counter
from pathlib import Path

import torch

_BYTES = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "U16": 2,
    "I16": 2,
    "F16": 2,
    "BF16": 2,
    "U32": 4,
    "I32": 4,
    "F32": 4,
    "U64": 8,
    "I64": 8,
    "F64": 8,
}
_FLOAT = {"F16", "BF16", "F32", "F64"}
_PLAIN = {"weight", "bias"}


def stored_bits(folder: Path, model: torch.nn.Module) -> dict:
    """{bits_per_weight, layers_quantized, params_quantized, stored_bytes, bits_source} of a checkpoint folder."""
    shapes = linear_shapes(model)
    files = safetensors_files(Path(folder))
    if files:
        layers = _layers_from_files(files, shapes)
        source = "safetensors"
    else:
        layers = _layers_from_modules(model, shapes)
        source = "module state"
    return _summary(layers, shapes, source)


def _summary(layers: dict[str, int], shapes: dict[str, int], source: str) -> dict:
    params = sum(shapes[n] for n in layers)
    stored = sum(layers.values())
    return {
        "bits_per_weight": 8 * stored / params if params else None,
        "layers_quantized": len(layers),
        "layers_skipped": len(shapes) - len(layers),
        "params_quantized": params,
        "stored_bytes": stored,
        "bits_source": source,
    }


def linear_shapes(model: torch.nn.Module) -> dict[str, int]:
    """{layer name: weights} of every ``nn.Linear`` of the architecture, from the model's config on the meta
    device (a quantized model's own modules no longer say their original shape the same way)."""
    from transformers import AutoModelForCausalLM

    config = model.config.__class__.from_dict(
        {k: v for k, v in model.config.to_dict().items() if k != "quantization_config"}
    )
    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(config)
    return {n: m.in_features * m.out_features for n, m in skeleton.named_modules() if isinstance(m, torch.nn.Linear)}


def safetensors_files(folder: Path) -> list[Path]:
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        return sorted({folder / f for f in json.loads(index.read_text())["weight_map"].values()})
    return sorted(folder.glob("*.safetensors"))


def _header(path: Path) -> dict:
    with open(path, "rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        return json.loads(fh.read(n))


def _owner(key: str, shapes: dict[str, int]) -> tuple[str, str] | None:
    """(layer, the tensor's name under it) for a stored key, by its longest prefix that names a layer."""
    parts = key.split(".")
    for i in range(len(parts) - 1, 0, -1):
        name = ".".join(parts[:i])
        if name in shapes:
            return name, ".".join(parts[i:])
    return None


def _layers_from_files(files: list[Path], shapes: dict[str, int]) -> dict[str, int]:
    """{quantized layer: bytes stored for it but its bias}."""
    size: dict[str, int] = {}
    quantized: set[str] = set()
    for path in files:
        for key, meta in _header(path).items():
            owner = _owner(key, shapes) if key != "__metadata__" else None
            if owner is None:
                continue
            layer, tensor = owner
            if tensor not in _PLAIN or meta["dtype"] not in _FLOAT:
                quantized.add(layer)
            if tensor != "bias":
                size[layer] = size.get(layer, 0) + math.prod(meta["shape"]) * _BYTES[meta["dtype"]]
    return {n: size[n] for n in sorted(quantized)}


def _layers_from_modules(model: torch.nn.Module, shapes: dict[str, int]) -> dict[str, int]:
    """{layer: bytes of its state dict but the bias} for the layers a library replaced (not a plain Linear)."""
    from infoeval.models.libraries import stored_bytes

    return {n: stored_bytes(m) for n, m in model.named_modules() if n in shapes and type(m) is not torch.nn.Linear}


def gguf_bits(path: Path) -> dict:
    """Bits per weight of a GGUF file's transformer blocks' 2-D tensors (``blk.*``), and the count of each
    tensor type in the file."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    blocks = [t for t in reader.tensors if t.name.startswith("blk.") and len(t.shape) >= 2]
    params = sum(int(t.n_elements) for t in blocks)
    stored = sum(int(t.n_bytes) for t in blocks)
    types = Counter(t.tensor_type.name for t in reader.tensors)
    return {
        "format": "gguf",
        "bits_per_weight": 8 * stored / params if params else None,
        "layers_quantized": len(blocks),
        "params_quantized": params,
        "stored_bytes": stored,
        "bits_source": "gguf",
        "tensor_types": dict(sorted(types.items())),
    }

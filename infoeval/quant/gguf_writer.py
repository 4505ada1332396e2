"""GGUF files of llama.cpp's block types, written with the gguf package (``infoeval quantize --format gguf``).

The source is a GGUF model (the built-in ``smollm2-135m`` or a .gguf file): each 2-D matrix of its transformer
blocks (``blk.N.*``: the attention and MLP projections, the layers infoeval quantizes by default) is dequantized to
float32 by gguf's ``quants.dequantize`` (the weights transformers loads as the reference) and quantized again to the
chosen type by gguf's ``quants.quantize``, whose codes ``formats.ggml_blocks`` matches bit for bit; every other
tensor (embeddings, norms, the output head) and every metadata field are copied as they are, as llama.cpp's
``llama-quantize --allow-requantize`` does. The file's ``infoeval.quantization`` field records the scheme, the
source's hash and each matrix's SQNR. Rows are blocks of 32 along the input dimension, so the row order of the
GGUF layout (llama.cpp permutes Q and K) does not change a code: loading the file gives the in-process format's ŵ.

A transformers folder has no GGUF layout to copy: convert it with llama.cpp's ``convert_hf_to_gguf.py`` first.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from infoeval.errors import UsageError, spell
from infoeval.quant.formats.presets import Format

GGUF_TYPES = {"q8_0": "Q8_0", "q4_0": "Q4_0", "q4_1": "Q4_1", "q5_0": "Q5_0", "q5_1": "Q5_1", "gguf-mxfp4": "MXFP4"}
FILE_TYPES = {"Q8_0": 7, "Q4_0": 2, "Q4_1": 3, "Q5_0": 8, "Q5_1": 9, "MXFP4": 38}  # llama.cpp's LLAMA_FTYPE_MOSTLY_*
REPORT_KEY = "infoeval.quantization"


def check_gguf_request(fmt, source: Path | None, out: Path, include=(), exclude=()) -> None:
    """Before anything is read: a GGUF type, a GGUF source, an output path ending in .gguf, no layer selection."""
    if not isinstance(fmt, Format) or fmt.name not in GGUF_TYPES:
        raise UsageError(
            f"{spell('format')} gguf stores {', '.join(GGUF_TYPES)}, not {getattr(fmt, 'name', fmt)}; use "
            f"{spell('format')} compressed-tensors for fp8 and nvfp4, or fake for any"
        )
    if source is None:
        raise UsageError(
            f"{spell('format')} gguf re-quantizes a GGUF model (smollm2-135m or a .gguf file); convert a transformers "
            "folder with llama.cpp's convert_hf_to_gguf.py first"
        )
    if include or exclude:
        raise UsageError(
            f"{spell('format')} gguf quantizes every matrix of the transformer blocks; {spell('include')} and "
            f"{spell('exclude')} are for the other formats"
        )
    if Path(out).suffix.lower() != ".gguf":
        raise UsageError(f"{spell('out')} {out}: a GGUF file's name ends in .gguf")


def write_gguf(source: Path, fmt: Format, out: Path, report: dict) -> dict:
    """Write ``source`` re-quantized to ``fmt``'s GGUF type at ``out`` (the caller's temporary file, renamed into
    place when this returns); returns the per-matrix summary that ``report`` gets as ``quantization``."""
    gguf = _library()
    reader = gguf.GGUFReader(str(source))
    target = getattr(gguf.GGMLQuantizationType, GGUF_TYPES[fmt.name])
    layers, arrays = [], []
    for t in reader.tensors:
        shape = [int(x) for x in reversed(t.shape)]  # numpy order: rows × row length
        if t.name.startswith("blk.") and len(shape) == 2:
            w = gguf.quants.dequantize(t.data, t.tensor_type).reshape(shape).astype(np.float32)
            codes = gguf.quants.quantize(w, target)
            w_hat = gguf.quants.dequantize(codes, target).reshape(shape)
            layers.append({"name": t.name, "shape": shape, "sqnr_db": _sqnr_db(w, w_hat)})
            arrays.append((t.name, codes, target))
        else:
            raw = t.tensor_type not in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16)
            arrays.append((t.name, np.asarray(t.data).reshape(shape[:-1] + [-1]), t.tensor_type if raw else None))
    if not layers:
        raise UsageError(f"{source} holds no matrix of transformer blocks (blk.N.*) to quantize")
    summary = {
        "layers_quantized": len(layers),
        "layers_skipped": 0,
        "sqnr_db_min": min(r["sqnr_db"] for r in layers),
        "sqnr_db_mean": sum(r["sqnr_db"] for r in layers) / len(layers),
        "params_quantized": sum(r["shape"][0] * r["shape"][1] for r in layers),
        "layers": layers,
    }
    writer = gguf.GGUFWriter(str(out), reader.fields["general.architecture"].contents())
    _copy_fields(gguf, reader, writer, FILE_TYPES[GGUF_TYPES[fmt.name]])
    writer.add_string(REPORT_KEY, json.dumps({**report, "quantization": summary}, default=str))
    for name, data, raw_dtype in arrays:
        writer.add_tensor(name, data, raw_dtype=raw_dtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return summary


def _copy_fields(gguf, reader, writer, file_type: int) -> None:
    """Every metadata field of the source but the header's own, ``general.file_type`` set to the new type's."""
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key in ("general.architecture", REPORT_KEY):
            continue
        value = file_type if key == "general.file_type" else field.contents()
        sub = field.types[1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key, value, field.types[0], sub_type=sub)


def _sqnr_db(w: np.ndarray, w_hat: np.ndarray) -> float:
    """10·log10(Σw² / Σ(w − ŵ)²), in float64 (inf for an exact layer)."""
    signal, noise = float(np.sum(w.astype(np.float64) ** 2)), float(np.sum((w - w_hat).astype(np.float64) ** 2))
    return float("inf") if noise == 0 else 10 * float(np.log10(signal / noise))


def _library():
    try:
        import gguf
    except ImportError:
        raise UsageError(f"{spell('format')} gguf needs the gguf package: pip install gguf") from None
    return gguf

"""`infoeval quantize`: write a fake-quantized checkpoint that transformers loads back as it is.

The weights are stored dequantized (ŵ = s·(q − z), in the model's dtype) as safetensors next to the config and
tokenizer, so any transformers release loads them with ``from_pretrained`` and computes exactly what the in-memory
fake quantization computes. The scheme and the per-layer report (SQNR of every layer, and the reason for every skipped
one) go into ``infoeval-quantization.json``; ``config.json`` gets ``infoeval_quantization`` naming the scheme.

``fmt="pack-quantized"`` stores real int4 codes instead (see packed.py); ``fmt="compressed-tensors"`` a shipped float
format's codes (FP8 per channel, per tensor or in 128×128 blocks, NVFP4; see compressed_formats.py).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from infoeval.errors import UsageError, spell
from infoeval.input.provenance import provenance
from infoeval.input.settings import ModelSettings
from infoeval.models import load_model, resolve_device, resolve_dtype
from infoeval.models.files import gguf_file, sha256_file
from infoeval.output.results import atomic_path, check_folder_option
from infoeval.quant.apply import quantize_variant, recipe_variant, swap_in
from infoeval.quant.compressed_formats import check_storable, check_writable, save_compressed_format
from infoeval.quant.gguf_writer import check_gguf_request, write_gguf
from infoeval.quant.packed import check_packable, save_pack_quantized
from infoeval.quant.recipe import Recipe
from infoeval.quant.schemes import Scheme
from infoeval.quant.variant_settings import one_quantization, parse_one

REPORT_FILE = "infoeval-quantization.json"


FORMATS = ("fake", "pack-quantized", "compressed-tensors", "gguf")
STORAGE = {
    "fake": "dequantized float weights",
    "pack-quantized": "compressed-tensors pack-quantized int4 codes",
    "compressed-tensors": "compressed-tensors naive-quantized (FP8) / nvfp4-pack-quantized codes",
    "gguf": "GGUF blocks (the gguf package's quantizers)",
}


def quantize_checkpoint(
    model_settings: ModelSettings,
    scheme_name: str | Scheme,
    out: Path,
    include=(),
    exclude=(),
    force: bool = False,
    fmt: str = "fake",
    recipe: Path | Recipe | None = None,
) -> dict:
    """Load, quantize, save to ``out`` atomically (a temp folder renamed at the end). ``fmt`` "fake" stores the
    dequantized weights; "pack-quantized" real int4 codes (compressed-tensors). ``recipe``: a recipe file (a scheme
    per layer) instead of ``scheme_name``; stored fake-quantized."""
    scheme = parse_one(scheme_name, methods=False)
    mix = one_quantization(None, recipe)  # a recipe read and checked, or None
    if fmt == "gguf":
        return _quantize_gguf(model_settings.model, scheme, Path(out), force, mix, include, exclude)
    out = _checked_out(fmt, mix, out, force)
    if fmt == "compressed-tensors":
        check_storable(scheme)  # before anything loads
    device = resolve_device(model_settings.device)
    loaded = load_model(
        model_settings.model, device, resolve_dtype(model_settings.dtype, device), model_settings.device_map
    )
    packed = _layers_to_store(loaded.model, scheme, fmt, include, exclude)
    if mix is None:
        variant = quantize_variant(loaded.model, scheme, include, exclude)  # the report (SQNR); weights not swapped yet
    else:
        variant = recipe_variant(loaded.model, mix, include, exclude)
    summary = variant.summary()
    if not summary["layers_quantized"]:  # before anything is written: a copy of the model is no checkpoint
        raise UsageError(
            f"no layer left to quantize: {spell('include')} {list(include) or 'default'} and {spell('exclude')} "
            f"{list(exclude)} leave "
            f"none of the model's {summary['layers_skipped']} linear layers; loosen {spell('exclude')} or widen "
            f"{spell('include')}"
        )
    report = {
        "format": "infoeval fake-quantized checkpoint (dequantized weights)",
        "provenance": provenance(
            "quantize", model=loaded.info, scheme=variant.name, format=fmt, recipe=mix.source if mix else None
        ).to_json(),
        "scheme": summary["scheme"],
        "storage": STORAGE[fmt],
        "quantization": summary,
    }
    _save(loaded, variant, scheme, packed, fmt, report, out)
    return {
        "out": str(out),
        "scheme": variant.name,
        "format": fmt,
        "layers_quantized": summary["layers_quantized"],
        "layers_skipped": summary["layers_skipped"],
        "sqnr_db_min": summary["sqnr_db_min"],
        "sqnr_db_mean": summary["sqnr_db_mean"],
        "params_quantized": summary["params_quantized"],
        "files": sorted(p.name for p in out.iterdir()),
    }


def _quantize_gguf(model: str, scheme, out: Path, force: bool, mix, include, exclude) -> dict:
    """``--format gguf``: the source GGUF re-quantized to one GGUF type (gguf_writer.py), one file at ``out``."""
    if mix is not None:
        raise UsageError(f"{spell('recipe')} checkpoints are written with {spell('format')} fake (gguf holds one type)")
    source = gguf_file(model)
    check_gguf_request(scheme, source, out, include, exclude)
    if out.exists() and not force:
        raise UsageError(f"output file '{out}' already exists; choose another {spell('out')} or pass {spell('force')}")
    report = {
        "format": "infoeval GGUF checkpoint",
        "provenance": provenance(
            "quantize", scheme=scheme.name, format="gguf", source=str(source), source_sha256=sha256_file(source)
        ).to_json(),
        "scheme": scheme.as_dict(),
        "storage": STORAGE["gguf"],
    }
    with atomic_path(out) as tmp:  # never a half-written file
        summary = write_gguf(source, scheme, tmp, report)
    return {
        "out": str(out),
        "scheme": scheme.name,
        "format": "gguf",
        **{k: v for k, v in summary.items() if k != "layers"},
        "files": [out.name],
    }


def _layers_to_store(model, scheme, fmt: str, include, exclude) -> list[str] | None:
    """The layers a real-codes format writes, checked before anything is quantized (None for fake weights)."""
    if fmt == "pack-quantized":
        return check_packable(model, scheme, include, exclude)
    if fmt == "compressed-tensors":
        return check_writable(model, scheme, include, exclude)
    return None


def _checked_out(fmt: str, mix, out: Path, force: bool) -> Path:
    """``out`` as a Path once the request is known to be writable: a known format, a recipe only as fake weights,
    and no existing folder unless ``force``."""
    if fmt not in FORMATS:
        raise UsageError(f"unknown {spell('format')} '{fmt}'; allowed: {', '.join(FORMATS)}")
    if mix is not None and fmt != "fake":
        raise UsageError(
            f"{spell('recipe')} checkpoints are written with {spell('format')} fake ({fmt} holds one scheme)"
        )
    out = Path(out)
    check_folder_option(out, spell("out"))
    if out.exists() and not force:
        raise UsageError(
            f"output folder '{out}' already exists; choose another {spell('out')} or pass {spell('force')}"
        )
    return out


def _save(loaded, variant, scheme, packed, fmt: str, report: dict, out: Path) -> None:
    """Write the quantized model, its tokenizer and ``report`` into a temp folder beside ``out``, then rename it
    to ``out`` (replacing it); on any failure the temp folder is removed and ``out`` is left as it was."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        model = loaded.model
        model.config.infoeval_quantization = {"scheme": variant.name, "format": fmt, "report": REPORT_FILE}
        if any(r.quantized and r.tied_to for r in variant.layers):
            model.config.tie_word_embeddings = False  # the quantized head no longer equals the embeddings
        if packed is None:
            swap_in(model, variant)
            model.save_pretrained(tmp)
        elif fmt == "compressed-tensors":
            save_compressed_format(model, scheme, packed, tmp)
        else:
            save_pack_quantized(model, scheme, packed, tmp)
        loaded.tokenizer.save_pretrained(tmp)
        (tmp / REPORT_FILE).write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def saved_scheme(folder: Path) -> str | None:
    """The scheme recorded in a checkpoint written by `infoeval quantize`, if any."""
    f = Path(folder) / REPORT_FILE
    if not f.is_file():
        return None
    return json.loads(f.read_text(encoding="utf-8"))["scheme"]["name"]

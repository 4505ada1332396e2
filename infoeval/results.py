"""The result schema (JSON), provenance, and atomic CSV/JSON writing."""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import sys
import tempfile
from importlib import metadata
from pathlib import Path

import numpy as np
import pandas as pd

from infoeval import __version__
from infoeval.metrics import METRICS

SCHEMA_VERSION = 1
CSV_COLUMNS = [
    "variant", "bits", "group_size", "symmetric", "tokens", "bytes",
    "ppl", "ppl_se", "ln_ppl_ratio", "ln_ppl_ratio_se", "ppl_ratio",
    "kl_mean", "kl_se", "kl_p50", "kl_p90", "kl_p99", "kl_p999", "kl_max",
    "top1", "top1_se", "rkl_mean", "tv_mean",
    "bits_per_token", "bits_per_byte", "bits_per_byte_delta",
    "layers_quantized", "layers_skipped", "sqnr_db_min", "sqnr_db_mean",
]  # fmt: skip
_PACKAGES = ("torch", "transformers", "tokenizers", "safetensors", "numpy", "pandas", "gguf", "accelerate", "typer", "rich")


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"infoeval": __version__, "python": platform.python_version()}
    for pkg in _PACKAGES:
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def metric_meta(names) -> dict:
    return {
        n: {"unit": METRICS[n].unit, "higher_is_better": METRICS[n].higher_is_better, "description": METRICS[n].description}
        for n in names
        if n in METRICS
    }


def _clean(obj):
    """JSON-safe: NaN/inf become null, numpy scalars become Python numbers."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write to a temporary file beside ``path`` and rename it into place: never a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json(path: Path, result: dict) -> None:
    text = json.dumps(_clean(result), indent=2, ensure_ascii=False, allow_nan=False)
    atomic_write_bytes(path, (text + "\n").encode("utf-8"))


def write_frame(path: Path, frame: pd.DataFrame) -> None:
    atomic_write_bytes(path, frame.to_csv(index=False).encode("utf-8"))


def summary_frame(result: dict) -> pd.DataFrame:
    """One row for the reference and one per variant, with the stable CSV_COLUMNS."""
    rows = [{"variant": "reference", **result["reference"]}]
    for v in result.get("variants", []):
        q = v.get("quantization", {})
        s = q.get("scheme", {})
        rows.append(
            {
                "variant": v["name"],
                "bits": s.get("bits"),
                "group_size": s.get("group_size"),
                "symmetric": s.get("symmetric"),
                "bytes": result["reference"].get("bytes"),
                "layers_quantized": q.get("layers_quantized"),
                "layers_skipped": q.get("layers_skipped"),
                "sqnr_db_min": q.get("sqnr_db_min"),
                "sqnr_db_mean": q.get("sqnr_db_mean"),
                **v["metrics"],
            }
        )
    frame = pd.DataFrame(rows).reindex(columns=CSV_COLUMNS)
    for col in ("bits", "group_size", "tokens", "bytes", "layers_quantized", "layers_skipped"):
        frame[col] = frame[col].astype("Int64")  # integers stay integers beside the reference's empty cells
    frame["symmetric"] = frame["symmetric"].astype("boolean")
    return frame


def positions_frame(reference: dict[str, np.ndarray], variants: dict[str, dict[str, np.ndarray]]) -> pd.DataFrame:
    """Long format: one row per scored position and variant (only reference columns without variants)."""
    base = pd.DataFrame(
        {
            "window": reference["window"],
            "position": reference["position"],
            "token_id": reference["token_id"],
            "context": reference["context"],
            "bytes": reference["bytes"],
            "nll_ref": reference["nll"],
            "entropy_ref": reference["entropy"],
        }
    )
    if not variants:
        return base
    frames = []
    for name, cols in variants.items():
        f = base.copy()
        f.insert(5, "variant", name)
        f["nll"] = cols["nll"]
        f["entropy"] = cols["entropy"]
        f["kl"] = cols["kl"]
        f["rkl"] = cols["rkl"]
        f["tv"] = cols["tv"]
        f["top1_match"] = cols["top1"].astype(np.int8)
        frames.append(f)
    return pd.concat(frames, ignore_index=True)


def compress_frame(result: dict) -> pd.DataFrame:
    """compress-bits summary: the model's ideal code length, then each compressor, on the same bytes."""
    ref = result["reference"]
    rows = [{"method": "model", "bytes": None, "bits": ref["total_bits"], "bits_per_byte": ref["bits_per_byte"]}]
    rows += [{k: r[k] for k in ("method", "bytes", "bits", "bits_per_byte")} for r in result["compressors"]]
    frame = pd.DataFrame(rows)
    frame["bits_vs_model"] = frame["bits"] / ref["total_bits"]
    frame["bytes"] = frame["bytes"].astype("Int64")
    return frame


def output_paths(csv: Path | None, json_: Path | None, positions: Path | None, out_dir: Path | None, default_dir: Path) -> dict[str, Path]:
    """Where each output goes: only the files named explicitly, or all three in a folder (``out_dir``, else
    ``default_dir``, i.e. results/<run-name>/), with explicitly named files taking their own path."""
    explicit = {k: v for k, v in (("json", json_), ("csv", csv), ("positions", positions)) if v is not None}
    if explicit and out_dir is None:
        return explicit
    folder = out_dir or default_dir
    return {"json": folder / "result.json", "csv": folder / "summary.csv", "positions": folder / "positions.csv", **explicit}


def write_outputs(paths: dict[str, Path], result: dict, summary, positions) -> list[str]:
    """Write result JSON, summary and positions CSV (each built only if wanted) atomically; return the paths."""
    makers = {"json": lambda p: write_json(p, result), "csv": lambda p: write_frame(p, summary()),
              "positions": lambda p: write_frame(p, positions())}  # fmt: skip
    for key, path in paths.items():
        makers[key](path)
    return [str(p) for p in paths.values()]


def command_line() -> list[str]:
    return [Path(sys.argv[0]).name, *sys.argv[1:]]

"""Typed results: the provenance every result carries (built by ``provenance`` only), the ``Result`` base of every
command's result (``to_json()`` is its result file), and atomic CSV/JSON writing.

Schema 2 (renames from 1): the metric definitions (unit, direction, description) of every result sit under
``metric_definitions`` (they were ``metrics``, and ``metrics_meta`` in gate results); a key named ``metrics``
always holds values.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
import os
import platform
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import ClassVar

import numpy as np
import pandas as pd
import torch

from infoeval import __version__, distributed
from infoeval.measure.metrics import definitions
from infoeval.measure.stats import SE_METHOD

SCHEMA_VERSION = 3  # 3: batch-means standard errors (``standard_errors``), llama.cpp's under llamacpp_*
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


@dataclass(frozen=True)
class Provenance:
    """Where a result comes from: the command line, when, which model (file hash or revision), which text (hash),
    tokenizer and window protocol, dtype, device, thread count (per rank), number of ranks and package
    versions; ``extra`` holds what a command adds (a draft, a reference file, a prompt, ...)."""

    command: str
    argv: tuple[str, ...]
    created: str
    versions: Mapping[str, str | None]
    torch_threads: int
    model: Mapping | None = None
    text: Mapping | None = None
    protocol: Mapping | None = None
    dtype: str | None = None
    device: str | None = None
    world_size: int = 1
    parallel: Mapping | None = None  # under a launcher: backend, bytes and rows gathered on rank 0
    extra: Mapping = field(default_factory=dict)

    def to_json(self) -> dict:
        own = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        return {k: v for k, v in own.items() if v is not None} | dict(self.extra)


def provenance(command: str, *, model=None, text=None, protocol: Mapping | None = None, dtype: str | None = None,
               device: str | None = None, **extra) -> Provenance:  # fmt: skip
    """The one place provenance is assembled: ``model`` a ``models.ModelInfo`` (its dtype and device are taken
    unless given), ``text`` a ``text.Text``; keyword extras go under their own names."""
    model_json = model.to_json() if model is not None else None
    group = distributed.group() if distributed.launched() else distributed.Group()
    return Provenance(
        command=command, argv=tuple(command_line()), created=now_iso(), versions=versions(),
        torch_threads=torch.get_num_threads(), model=model_json, text=text.provenance() if text is not None else None,
        protocol=protocol, dtype=dtype or (model.dtype if model is not None else None),
        device=device or (model.device if model is not None else None), world_size=group.world_size,
        parallel=group.to_json() if group.world_size > 1 else None, extra=extra,
    )  # fmt: skip


@dataclass(frozen=True)
class Result:
    """Base of every command's result: provenance and timings (seconds per stage), plus the command's own fields
    (declared by each subclass, in the order they appear in the JSON). ``FAMILY`` names the metric definitions."""

    provenance: Provenance
    timings: Mapping[str, float]
    FAMILY: ClassVar[str] = ""

    def to_json(self) -> dict:
        own = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("provenance", "timings")}
        return jsonable({
            "schema": f"infoeval/{self.provenance.command}/{SCHEMA_VERSION}", **own,
            "provenance": self.provenance.to_json(), "timings": dict(self.timings),
            "metric_definitions": definitions(self.FAMILY), "standard_errors": SE_METHOD,
        })  # fmt: skip


def jsonable(obj):
    """Plain JSON types: typed records (``to_json()`` or dataclass fields) become dicts, tuples lists."""
    if hasattr(obj, "to_json"):
        return jsonable(obj.to_json())
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {k: jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    return obj


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


def write_json(path: Path, result) -> None:
    text = json.dumps(_clean(jsonable(result)), indent=2, ensure_ascii=False, allow_nan=False)
    atomic_write_bytes(path, (text + "\n").encode("utf-8"))


def write_frame(path: Path, frame: pd.DataFrame) -> None:
    atomic_write_bytes(path, frame.to_csv(index=False).encode("utf-8"))


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

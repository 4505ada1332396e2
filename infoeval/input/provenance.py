"""Provenance: where a result comes from (the command line, when, which model, text, tokenizer and window
protocol, dtype, device, threads, ranks and package versions). Built by ``provenance`` only; every result
carries one (``infoeval.output.results.Result``), and the input stage fills it as it prepares a run.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import platform
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import torch

from infoeval import __version__, distributed

_PACKAGES = (
    "torch",
    "transformers",
    "tokenizers",
    "safetensors",
    "numpy",
    "pandas",
    "gguf",
    "accelerate",
    "typer",
    "rich",
)


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


def provenance(
    command: str,
    *,
    model=None,
    text=None,
    protocol: Mapping | None = None,
    dtype: str | None = None,
    device: str | None = None,
    **extra,
) -> Provenance:
    """The one place provenance is assembled: ``model`` a ``models.ModelInfo`` (its dtype and device are taken
    unless given), ``text`` a ``text.Text``; keyword extras go under their own names."""
    model_json = model.to_json() if model is not None else None
    group = distributed.group() if distributed.launched() else distributed.Group()
    return Provenance(
        command=command,
        argv=tuple(command_line()),
        created=now_iso(),
        versions=versions(),
        torch_threads=torch.get_num_threads(),
        model=model_json,
        text=text.provenance() if text is not None else None,
        protocol=protocol,
        dtype=dtype or (model.dtype if model is not None else None),
        device=device or (model.device if model is not None else None),
        world_size=group.world_size,
        parallel=group.to_json() if group.world_size > 1 else None,
        extra=extra,
    )


def command_line() -> list[str]:
    return [Path(sys.argv[0]).name, *sys.argv[1:]]

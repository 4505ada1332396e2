"""Corpora: a UTF-8 file, the standard library's documentation (default), WikiText-2, Tiny Shakespeare.

``python-docs`` is ``pydoc_data.topics.topics``: its values in sorted key order, joined by one blank line
(``"\\n\\n"``). It ships with every CPython, so the default run needs no download.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from infoeval.errors import DataError, UsageError, spell

DATA_DIR_ENV = "INFOEVAL_DATA_DIR"
DEFAULT_DATASET = "python-docs"

# dataset name -> file names tried under each data folder, in order
_DATA_FILES = {
    "wikitext-2": ["wikitext-2-raw/wiki.test.raw", "wiki.test.raw"],
    "wikitext-2-valid": ["wikitext-2-raw/wiki.valid.raw", "wiki.valid.raw"],
    "tinyshakespeare": ["tinyshakespeare/input.txt", "input.txt"],
}
DATASETS = [DEFAULT_DATASET, *_DATA_FILES]


@dataclass(frozen=True)
class Text:
    """The text to score; ``source_sha256`` is the hash of the file or corpus as read, before any
    protocol-specific change (``transform`` says which), so it can be checked with ``sha256sum``."""

    text: str
    source: str  # dataset name or "file"
    path: str | None
    source_sha256: str | None = None
    transform: str | None = None

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    @property
    def n_bytes(self) -> int:
        return len(self.text.encode("utf-8"))

    def provenance(self) -> dict:
        return {
            "source": self.source,
            "path": self.path,
            "sha256": self.sha256,
            "bytes": self.n_bytes,
            "source_sha256": self.source_sha256 or self.sha256,
            "transform": self.transform,
        }


def python_docs() -> str:
    from pydoc_data import topics

    return "\n\n".join(topics.topics[k] for k in sorted(topics.topics))


def read_text_file(path: Path) -> str:
    path = Path(path)
    if not path.exists():
        raise DataError(f"text file '{path}' does not exist; pass an existing UTF-8 file with {spell('text')}")
    if path.is_dir():
        raise DataError(f"'{path}' is a folder; {spell('text')} takes a UTF-8 file")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise DataError(f"cannot read text file '{path}': {e.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(
            f"text file '{path}' is not UTF-8 (bad byte at offset {e.start}); convert it to UTF-8"
        ) from None


def _data_dirs(data_dir: Path | None) -> list[Path]:
    dirs = []
    if data_dir is not None:
        dirs.append(Path(data_dir))
    if os.environ.get(DATA_DIR_ENV):
        dirs.append(Path(os.environ[DATA_DIR_ENV]))
    # a checkout next to a shared/ folder (this project's development layout)
    dirs += [Path.cwd() / "../shared/data", Path.cwd() / "shared/data"]
    return dirs


def load_text(text_path: Path | None = None, dataset: str | None = None, data_dir: Path | None = None) -> Text:
    """Resolve --text / --dataset to a Text; exactly one may be given, python-docs by default."""
    if text_path is not None and dataset is not None:
        raise UsageError(f"give either {spell('text')} or {spell('dataset')}, not both")
    if text_path is not None:
        p = Path(text_path)
        return Text(read_text_file(p), "file", str(p.resolve()))
    name = (dataset or DEFAULT_DATASET).lower()
    if name == DEFAULT_DATASET:
        return Text(python_docs(), DEFAULT_DATASET, None)
    if name not in _DATA_FILES:
        raise UsageError(f"unknown dataset '{dataset}'; allowed: {', '.join(DATASETS)} (or {spell('text')} PATH)")
    tried = []
    for d in _data_dirs(data_dir):
        for rel in _DATA_FILES[name]:
            p = d / rel
            tried.append(str(p))
            if p.is_file():
                return Text(read_text_file(p), name, str(p.resolve()))
    raise DataError(
        f"dataset '{name}' not found (looked for {_DATA_FILES[name][0]}); pass {spell('data_dir')} DIR or set "
        f"{DATA_DIR_ENV}, or give the file with {spell('text')}"
    )


def strip_one_trailing_newline(text: Text) -> Text:
    """llama.cpp drops one trailing newline of a prompt file before tokenizing."""
    if text.text.endswith("\n"):
        return Text(text.text[:-1], text.source, text.path, text.sha256, "one trailing newline stripped (llama.cpp)")
    return text


def reread_source(info: dict) -> Text | None:
    """The file or corpus a run's text provenance (``Text.provenance()``) names, read again as it was read (before
    any protocol's change), or None where it cannot be read here. The protocol that scored it redoes its change
    and checks the hash (``protocols.reread_text``)."""
    try:
        if info.get("source") == "file":
            return load_text(text_path=Path(info["path"]))
        return load_text(dataset=info["source"])
    except (UsageError, DataError, KeyError, TypeError):
        return None

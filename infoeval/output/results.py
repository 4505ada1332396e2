"""Typed results: the ``Result`` base of every command's result (``to_json()`` is its result file, with the
provenance of ``infoeval.input.provenance``), and atomic CSV/JSON writing.

Schema 2 (renames from 1): the metric definitions (unit, direction, description) of every result sit under
``metric_definitions`` (they were ``metrics``, and ``metrics_meta`` in gate results); a key named ``metrics``
always holds values.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import pandas as pd

from infoeval.errors import UsageError
from infoeval.input.provenance import Provenance
from infoeval.measure.metrics import definitions
from infoeval.measure.stats import SE_METHOD

POSITIONS = ("positions.parquet", "positions.csv")  # a run folder's per-position table, in the order looked for


def positions_table(folder: Path) -> Path | None:
    """The per-position table in ``folder`` (``POSITIONS``, parquet first), or None."""
    return next((Path(folder) / name for name in POSITIONS if (Path(folder) / name).is_file()), None)


def read_positions(path: Path):
    """A per-position table as a DataFrame, parquet or CSV by its suffix."""
    import pandas as pd

    return pd.read_parquet(path) if Path(path).suffix == ".parquet" else pd.read_csv(path)


SCHEMA_VERSION = (
    4  # 3: batch-means standard errors (``standard_errors``), llama.cpp's under llamacpp_*; 4: batches of whole windows
)


@dataclass(frozen=True)
class Result:
    """Base of every command's result: provenance and timings (seconds per stage), plus the command's own fields
    (declared by each subclass, in the order they appear in the JSON). ``FAMILY`` names the metric definitions."""

    provenance: Provenance
    timings: Mapping[str, float]
    FAMILY: ClassVar[str] = ""
    OMITTED_WHEN_NONE: ClassVar[tuple[str, ...]] = ()  # fields of a mode only: left out of the JSON when None
    SUMMARY: ClassVar = None  # (result JSON) → the summary table the CLI writes as summary.csv; None: it writes none

    @classmethod
    def from_json(cls, data: dict) -> Result:
        """The result a result JSON holds (``to_json``'s inverse for the declared fields; ``output/loading.py``)."""
        from infoeval.output.loading import result_of

        return result_of(cls, data)

    def to_frame(self) -> pd.DataFrame | None:
        """The summary as a DataFrame: the rows and columns of the CLI's summary.csv (None for a command without
        one)."""
        return None if type(self).SUMMARY is None else type(self).SUMMARY(self.to_json())

    @property
    def positions(self) -> pd.DataFrame | None:
        """The per-position table, where the run kept it (``with_positions``): the CLI's positions.csv."""
        made = self.__dict__.get("_positions")
        if callable(made):
            made = self.__dict__["_positions"] = made()
        return made

    @property
    def columns(self):
        """The run's per-position columns as the pipeline made them (plots and the report page read them), or None."""
        return self.__dict__.get("_columns")

    def with_positions(self, frame, columns=None) -> Result:
        """This result holding its per-position table (a DataFrame, or a function that makes it when first read)
        and, from a run, the pipeline's columns it was made from."""
        object.__setattr__(self, "_positions", frame)
        object.__setattr__(self, "_columns", columns)
        return self

    def save(self, folder: Path) -> list[str]:
        """Write what the CLI writes into a run folder, atomically: result.json, summary.csv (where the command has
        one) and positions.csv (where the result holds its positions); returns the paths."""
        folder = Path(folder)
        paths = {"json": folder / "result.json"}
        if type(self).SUMMARY is not None:
            paths["csv"] = folder / "summary.csv"
        if self.positions is not None:
            paths["positions"] = folder / "positions.csv"
        return write_outputs(paths, self.to_json(), self.to_frame, lambda: self.positions)

    def to_json(self) -> dict:
        own = {
            f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("provenance", "timings")
        }
        own = {k: v for k, v in own.items() if not (v is None and k in self.OMITTED_WHEN_NONE)}
        return jsonable(
            {
                "schema": f"infoeval/{self.provenance.command}/{SCHEMA_VERSION}",
                **own,
                "provenance": self.provenance.to_json(),
                "timings": dict(self.timings),
                "metric_definitions": definitions(self.FAMILY),
                "standard_errors": SE_METHOD,
            }
        )


def schema_parts(data) -> tuple[str, int | None]:
    """(command, version) of a result JSON's schema tag ``infoeval/<command>/<version>``; the version is None when
    the tag is not one (a JSON that is not an infoeval result).

    >>> schema_parts({"schema": "infoeval/gate/3"}), schema_parts({"schema": "other/gate/3"})[1], schema_parts([1])[1]
    (('gate', 3), None, None)
    """
    schema = str(data.get("schema", "")) if isinstance(data, dict) else ""
    command, _, version = schema.removeprefix("infoeval/").partition("/")
    return command, int(version) if schema.startswith("infoeval/") and version.isdigit() else None


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


_UMASK = os.umask(0o022)  # read once (os.umask can only be read by setting it), and put back at once
os.umask(_UMASK)


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary file beside ``path`` to write, renamed into place when the block ends without an error and
    removed when it raises: never a half-written file. It gets the mode a plain ``open`` would give ``path``
    (0o666 less the umask), not mkstemp's private 0o600."""
    path = Path(path)
    if path.is_dir():  # a rename onto a folder fails only after the work; say it in words
        raise UsageError(f"{path} is a folder; give the path of a file to write")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_UMASK)  # after the write: a writer may put a new file in its place
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def check_file_option(path: Path | None, flag: str) -> None:
    """Before a run: an option that names a file to write must not name a folder, nor lie under a file (one line,
    exit 2, rather than a failed rename after the work)."""
    if path is not None and Path(path).is_dir():
        raise UsageError(f"{flag} {path} is a folder; give the path of a file to write")
    _check_not_under_a_file(path, flag)


def check_folder_option(path: Path | None, flag: str) -> None:
    """Before a run: an option that names a folder to write into must not name a file (one line, exit 2)."""
    if path is not None and Path(path).exists() and not Path(path).is_dir():
        raise UsageError(f"{flag} {path} is a file; give a folder")
    _check_not_under_a_file(path, flag)


def _check_not_under_a_file(path: Path | None, flag: str) -> None:
    above = None if path is None else next((a for a in Path(path).parents if a.exists()), None)
    if above is not None and not above.is_dir():
        raise UsageError(f"{flag} {path} cannot be written: {above} is a file, not a folder")


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """``data`` at ``path``, through ``atomic_path``."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_json(path: Path, result) -> None:
    text = json.dumps(_clean(jsonable(result)), indent=2, ensure_ascii=False, allow_nan=False)
    atomic_write_bytes(path, (text + "\n").encode("utf-8"))


def check_frame_path(path: Path | None) -> bool:
    """Whether a table goes to Parquet (a .parquet name); a usage error when pyarrow, which writes it, is missing
    (checked before a run, not after it)."""
    if path is None or Path(path).suffix.lower() != ".parquet":
        return False
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise UsageError(
            f"writing '{path}' needs pyarrow: pip install 'infoeval[parquet]', or name a .csv file"
        ) from None
    return True


def write_frame(path: Path, frame: pd.DataFrame) -> None:
    """CSV, or Parquet when the name ends in .parquet (columnar, typed and compressed: needs pyarrow)."""
    if not check_frame_path(path):
        atomic_write_bytes(path, frame.to_csv(index=False).encode("utf-8"))
        return
    with atomic_path(Path(path)) as tmp:
        frame.to_parquet(tmp, index=False)


def output_paths(
    csv: Path | None, json_: Path | None, positions: Path | None, out_dir: Path | None, default_dir: Path
) -> dict[str, Path]:
    """Where each output goes: only the files named explicitly, or all three in a folder (``out_dir``, else
    ``default_dir``, i.e. results/<run-name>/), with explicitly named files taking their own path."""
    explicit = {k: v for k, v in (("json", json_), ("csv", csv), ("positions", positions)) if v is not None}
    if explicit and out_dir is None:
        return explicit
    folder = out_dir or default_dir
    return {
        "json": folder / "result.json",
        "csv": folder / "summary.csv",
        "positions": folder / "positions.csv",
        **explicit,
    }


def write_outputs(paths: dict[str, Path], result: dict, summary, positions) -> list[str]:
    """Write result JSON, summary and positions CSV (each built only if wanted) atomically; return the paths."""
    makers = {
        "json": lambda p: write_json(p, result),
        "csv": lambda p: write_frame(p, summary()),
        "positions": lambda p: write_frame(p, positions()),
    }
    for key, path in paths.items():
        makers[key](path)
    return [str(p) for p in paths.values()]

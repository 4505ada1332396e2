"""Reading a run for the page: its result JSON, its positions table (CSV or Parquet) and the text of its tokens.

A RUN is a run folder (``results/<run>/``, holding ``result.json`` and ``positions.csv`` or ``.parquet``) or a
result JSON file (its positions file beside it). Bad input is a usage error with one line: a folder with no
result, a result of a command the page cannot show, an unknown schema version, no positions table."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from infoeval.errors import UsageError, spell
from infoeval.output.results import POSITIONS, SCHEMA_VERSION, positions_table, read_positions, schema_parts

COMMANDS = ("quantize-compare", "compress-bits", "gate")  # the commands whose runs the page shows


@dataclass
class Run:
    """One run: its result, its positions (one row per scored position and variant) and token id → text."""

    result: dict
    positions: pd.DataFrame
    vocab: dict[int, str]
    source: str


def tokens_path(positions: Path) -> Path:
    """Where the text of a positions table's tokens is kept: ``<stem>.tokens.json`` beside it."""
    return Path(positions).with_name(Path(positions).stem + ".tokens.json")


def _result_file(run: Path) -> Path:
    run = Path(run)
    if run.is_dir():
        if not (run / "result.json").exists():
            raise UsageError(f"'{run}' holds no result.json; give a run folder (results/<run>/) or a result JSON")
        return run / "result.json"
    if not run.exists():
        raise UsageError(f"'{run}' does not exist; give a run folder (results/<run>/) or a result JSON")
    return run


def read_result(path: Path) -> dict:
    """A result JSON the page can show: a known command and a schema version this infoeval writes or reads."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise UsageError(f"'{path}' is not a result JSON") from None
    command, version = schema_parts(data)
    if version is None:
        schema = str(data.get("schema", "")) if isinstance(data, dict) else ""
        raise UsageError(f"'{path}' is not an infoeval result (schema {schema or 'missing'!r})")
    if command not in COMMANDS:
        raise UsageError(f"'{path}' is a result of `{command}`; the page shows {', '.join(COMMANDS)} runs")
    if not 1 <= version <= SCHEMA_VERSION:
        raise UsageError(f"'{path}' has schema version {version}; this infoeval reads versions 1 to {SCHEMA_VERSION}")
    return data


def _positions(table: Path):
    """The positions table, or one line (exit 2) when it cannot be read or its last row was cut short."""
    try:
        frame = read_positions(table)
    except Exception as e:  # pandas' and pyarrow's parse errors have no common base
        words = " ".join(str(e).split())[:200]
        raise UsageError(
            f"'{table}' cannot be read as a positions table ({words}); write it again with {spell('positions')}"
        ) from None
    if len(frame) > 1:
        cut = frame.iloc[-1].isna() & frame.iloc[:-1].notna().all()
        if cut.any():
            raise UsageError(
                f"'{table}' is truncated: its last row lacks {', '.join(map(str, frame.columns[cut]))}; write it "
                f"again with {spell('positions')}"
            )
    return frame


def read_run(run: Path) -> Run:
    """The run at ``run`` (a folder or a result JSON) with its positions and token texts."""
    result_file = _result_file(run)
    result = read_result(result_file)
    table = positions_table(result_file.parent)
    if table is None:
        raise UsageError(
            f"'{result_file.parent}' has no positions table ({' or '.join(POSITIONS)}); run with {spell('positions')} "
            "or the run folder"
        )
    frame = _positions(table)
    vocab_file = tokens_path(table)
    if not vocab_file.exists():
        raise UsageError(
            f"'{vocab_file}' is missing: the page needs the text of the tokens; run with {spell('topk')} K (or "
            f"{spell('html')})"
        )
    vocab = {int(k): v for k, v in json.loads(vocab_file.read_text(encoding="utf-8")).items()}
    return Run(result, frame, vocab, str(run))

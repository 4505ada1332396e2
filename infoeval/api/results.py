"""Reading results back: ``load`` turns a result JSON, or a run folder (``result.json`` with its
``positions.csv``/``.parquet`` beside it), into the command's typed result. Schema versions 1 to the current one
are read (the fields a version lacked are None); anything else is a ``DataError`` with one line."""

from __future__ import annotations

import json
from pathlib import Path

from infoeval.errors import DataError
from infoeval.output.results import SCHEMA_VERSION, Result, positions_table, read_positions, schema_parts


def _classes() -> dict[str, type[Result]]:
    """Each command's result class, by the command its schema names."""
    from infoeval.codec.results import CompressResult, DecompressResult
    from infoeval.comparison.results import CompareResult, CompressBitsResult
    from infoeval.gating.results import GateResult, ReferenceResult
    from infoeval.klfit.result import KLFitResult
    from infoeval.mixing.result import MixResult
    from infoeval.mutual_information.result import MutualInfoResult
    from infoeval.sensitivities.result import SensitivityResult
    from infoeval.speculative.results import AcceptResult, DecodeResult, DistillResult, TemperatureResult

    return {
        "quantize-compare": CompareResult,
        "compress-bits": CompressBitsResult,
        "compress": CompressResult,
        "decompress": DecompressResult,
        "reference": ReferenceResult,
        "gate": GateResult,
        "kl-fit": KLFitResult,
        "mix": MixResult,
        "mutual-info": MutualInfoResult,
        "sensitivity": SensitivityResult,
        "spec-accept": AcceptResult,
        "distill": DistillResult,
        "spec-decode": DecodeResult,
        "temperature": TemperatureResult,
    }


def _read(path: Path) -> tuple[dict, Path]:
    """The JSON of a result file or of a run folder's result.json, and the folder its positions would be in."""
    file = path / "result.json" if path.is_dir() else path
    if not file.is_file():
        raise DataError(f"'{path}' is neither a result JSON nor a run folder with a result.json")
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise DataError(f"'{file}' is not valid JSON") from None
    if not isinstance(data, dict):
        raise DataError(f"'{file}' is not an infoeval result (a JSON object with a schema)")
    return data, file


def load(path) -> Result:
    """The typed result of a result JSON or run folder; a run folder's positions table (positions.parquet or
    .csv), or a positions.csv beside a result.json, is read when ``result.positions`` is first asked for."""
    data, file = _read(Path(path))
    command, version = schema_parts(data)
    if version is None:
        raise DataError(f"'{file}' is not an infoeval result (schema {str(data.get('schema', ''))!r})")
    if not 1 <= version <= SCHEMA_VERSION:
        raise DataError(f"'{file}' has schema version {version}; this infoeval reads versions 1 to {SCHEMA_VERSION}")
    classes = _classes()
    if command not in classes:
        raise DataError(
            f"'{file}' is a result of '{command}', which this infoeval does not know; known: {', '.join(classes)}"
        )
    result = classes[command].from_json(data)
    table = positions_table(file.parent) if file.name == "result.json" else None
    if table is not None:
        result.with_positions(lambda: read_positions(table))
    return result


def summary_of(data: dict):
    """The summary table (the CLI's summary.csv) of a result JSON, by its command's result class; None for a
    command without one."""
    cls = _classes()[schema_parts(data)[0]]
    return None if cls.SUMMARY is None else cls.SUMMARY(data)

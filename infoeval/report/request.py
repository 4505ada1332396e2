"""What `infoeval report` is asked, each option declared once (``input/fields.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from infoeval.errors import UsageError, spell
from infoeval.input.fields import option


@dataclass(frozen=True)
class ReportRequest:
    """report: one self-contained HTML page from one or more runs."""

    runs: tuple[Path, ...] = option(
        (),
        help="Run folders (results/<run>/) or result JSON files.",
        positional="RUN...",
        argument=True,
        required=True,
        accepts=Sequence[str | Path],
        cli=list[Path],
        parse=lambda value: tuple(Path(p) for p in value),
    )
    out: Path = option(
        Path("report.html"),
        flags=("--out", "-o"),
        help="The page to write (.html).",
        accepts=str | Path,
        cli=Path,
        parse=Path,
    )
    title: str = option("infoeval report", help="The page's title.")
    separate: bool = option(
        False,
        flags=("--separate",),
        help="Several runs of different texts, models or protocols: one section each, without the comparison table.",
    )

    def __post_init__(self) -> None:
        if not self.runs:
            raise UsageError(f"{spell('runs')}: give at least one run folder or result JSON")

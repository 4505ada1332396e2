"""`infoeval report`: one self-contained HTML page from one or more runs. Options only; the work is in
infoeval.report."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

RunsArg = Annotated[list[Path], typer.Argument(metavar="RUN...", help="Run folders (results/<run>/) or result JSON files.", show_default=False)]
OutOpt = Annotated[Path, typer.Option("--out", "-o", help="The page to write (.html).")]
TitleOpt = Annotated[str, typer.Option(help="The page's title.")]


def report(runs: RunsArg, out: OutOpt = Path("report.html"), title: TitleOpt = "infoeval report") -> None:
    """Write one self-contained HTML page for the runs: the scored text coloured by KL (or Δp, NLL, entropy), each
    token's values and both models' top tokens on hover, the largest KLs in context. Nothing is fetched when the
    page opens."""
    from infoeval.output.results import atomic_write_bytes
    from infoeval.report.data import run_data
    from infoeval.report.page import render
    from infoeval.report.runs import read_run

    sections = []
    for path in runs:
        run = read_run(path)  # every run is read (and checked) before anything is written
        sections.append(run_data(run.result, run.positions, run.vocab, str(path)))
    atomic_write_bytes(out, render(sections, title).encode("utf-8"))
    typer.echo(f"wrote {out} ({out.stat().st_size:,} bytes, {len(sections)} run{'s' if len(sections) != 1 else ''})", err=True)


def register(app: typer.Typer) -> None:
    """Add report to the infoeval app."""
    app.command("report")(report)

"""`infoeval report`: one self-contained HTML page from one or more runs. Options only; the work is in
infoeval.report."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

RunsArg = Annotated[
    list[Path],
    typer.Argument(metavar="RUN...", help="Run folders (results/<run>/) or result JSON files.", show_default=False),
]
OutOpt = Annotated[Path, typer.Option("--out", "-o", help="The page to write (.html).")]
TitleOpt = Annotated[str, typer.Option(help="The page's title.")]
SeparateOpt = Annotated[
    bool,
    typer.Option(
        "--separate",
        help="Several runs of different texts, models or protocols: one section each, without the comparison table.",
    ),
]


def report(
    runs: RunsArg, out: OutOpt = Path("report.html"), title: TitleOpt = "infoeval report", separate: SeparateOpt = False
) -> None:
    """Write one self-contained HTML page for quantize-compare, compress-bits and gate runs: the scored text
    coloured by KL (or Δp, NLL, entropy), each token's values and both models' top tokens on hover, the largest KLs
    in context, a gate's verdicts; several runs of one text and model get a comparison table. Nothing is fetched
    when the page opens."""
    from infoeval.output.results import atomic_write_bytes, check_file_option
    from infoeval.report.data import run_data
    from infoeval.report.page import render
    from infoeval.report.runs import read_run
    from infoeval.report.table import check_comparable, comparison_rows

    check_file_option(out, "--out")
    read = [read_run(path) for path in runs]  # every run is read (and checked) before anything is written
    names = [str(path) for path in runs]
    if len(read) > 1 and not separate:
        check_comparable([r.result for r in read], names)
    sections = [run_data(r.result, r.positions, r.vocab, name) for r, name in zip(read, names)]
    comparison = comparison_rows([r.result for r in read], names) if len(read) > 1 and not separate else None
    atomic_write_bytes(out, render(sections, title, comparison).encode("utf-8"))
    typer.echo(
        f"wrote {out} ({out.stat().st_size:,} bytes, {len(sections)} run{'s' if len(sections) != 1 else ''})", err=True
    )


def register(app: typer.Typer) -> None:
    """Add report to the infoeval app."""
    app.command("report")(report)

"""`infoeval report`: one self-contained HTML page from one or more runs. Options only; the work is in
infoeval.report."""

from __future__ import annotations

import typer

from infoeval.cli.command import command
from infoeval.report.request import ReportRequest


def report(request: ReportRequest, outputs: None) -> None:
    """Write one self-contained HTML page for quantize-compare, compress-bits and gate runs: the scored text
    coloured by KL (or Δp, NLL, entropy), each token's values and both models' top tokens on hover, the largest KLs
    in context, a gate's verdicts; several runs of one text and model get a comparison table. Nothing is fetched
    when the page opens."""
    from infoeval.output.results import atomic_write_bytes, check_file_option
    from infoeval.report.data import run_data
    from infoeval.report.page import render
    from infoeval.report.runs import read_run
    from infoeval.report.table import check_comparable, comparison_rows

    runs, out, title, separate = request.runs, request.out, request.title, request.separate
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
    app.command("report")(command(ReportRequest, report, metavar=None))

"""The kl-fit command: one Gaussian fitted to a two-bump target by forward and by reverse KL."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from infoeval.api.information import kl_fit as fit
from infoeval.cli.output import as_json
from infoeval.cli.outputs import Outputs, output_options
from infoeval.cli.signatures import api_options

# kl-fit's options, of the API's keywords (infoeval.api.information.kl_fit: their types and defaults)
HELP = {
    "target": "Target p as bumps WEIGHT:CENTRE:WIDTH, comma-separated (normalized).",
    "support": "Grid size N: x = 0 … N−1.",
    "starts": "Comma-separated starting centres μ₀.",
    "directions": "forward (KL(p‖q)), reverse (KL(q‖p)) or both, comma-separated.",
    "steps": "Adam steps.",
    "lr": "Adam learning rate.",
    "sigma0": "Starting width σ₀.",
}
KLCsvOpt = Annotated[Path | None, typer.Option("--csv", help="Write one row per fit as CSV here.")]
KLJsonOpt = Annotated[
    Path | None, typer.Option("--json", help="Write the target, every fitted q and the settings as JSON here.")
]


@output_options("plot", csv=KLCsvOpt, json=KLJsonOpt)
@api_options(fit, "settings", HELP)
def kl_fit(
    settings: dict = None,  # --target … --sigma0 (see api_options)
    outputs: Outputs = None,  # the output options (see output_options)
) -> None:
    """Fit one discretized Gaussian to a two-bump target by forward KL (mode covering) and by reverse KL
    (mode seeking), from each start; prints centre, width and KL of each fit."""
    from infoeval.klfit.report import print_kl_fit

    outputs.check()
    data = as_json(fit(**settings))

    def draw(path):
        from infoeval.output.plots import plot_kl_fit

        plot_kl_fit(data, path)

    outputs.emit(data, command="kl-fit", model="", source="", draw=draw, tables=print_kl_fit)


def register(app: typer.Typer) -> None:
    """Add kl-fit to the infoeval app."""
    app.command("kl-fit")(kl_fit)

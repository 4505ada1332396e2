"""The kl-fit command: one Gaussian fitted to a two-bump target by forward and by reverse KL."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from infoeval.cli.output import as_json
from infoeval.cli.outputs import Outputs, output_options

TargetOpt = Annotated[str, typer.Option(help="Target p as bumps WEIGHT:CENTRE:WIDTH, comma-separated (normalized).")]
SupportOpt = Annotated[int, typer.Option(help="Grid size N: x = 0 … N−1.")]
StartsOpt = Annotated[str, typer.Option(help="Comma-separated starting centres μ₀.")]
DirectionsOpt = Annotated[str, typer.Option(help="forward (KL(p‖q)), reverse (KL(q‖p)) or both, comma-separated.")]
StepsOpt = Annotated[int, typer.Option(help="Adam steps.")]
LrOpt = Annotated[float, typer.Option(help="Adam learning rate.")]
Sigma0Opt = Annotated[float, typer.Option(help="Starting width σ₀.")]
KLCsvOpt = Annotated[Optional[Path], typer.Option("--csv", help="Write one row per fit as CSV here.")]
KLJsonOpt = Annotated[Optional[Path], typer.Option("--json", help="Write the target, every fitted q and the settings as JSON here.")]


@output_options("plot", csv=KLCsvOpt, json=KLJsonOpt)
def kl_fit(
    target: TargetOpt = "0.6:25:5,0.4:70:5",
    support: SupportOpt = 100,
    starts: StartsOpt = "30,60",
    directions: DirectionsOpt = "forward,reverse",
    steps: StepsOpt = 2000,
    lr: LrOpt = 0.5,
    sigma0: Sigma0Opt = 10.0,
    outputs: Outputs = None,  # the output options (see output_options)
) -> None:
    """Fit one discretized Gaussian to a two-bump target by forward KL (mode covering) and by reverse KL
    (mode seeking), from each start; prints centre, width and KL of each fit."""
    from infoeval.api.information import kl_fit as fit
    from infoeval.klfit.report import print_kl_fit

    outputs.check()
    data = as_json(fit(target, support=support, starts=starts, directions=directions, steps=steps, lr=lr, sigma0=sigma0))

    def draw(path):
        from infoeval.output.plots import plot_kl_fit

        plot_kl_fit(data, path)

    outputs.emit(data, command="kl-fit", model="", source="", draw=draw, tables=print_kl_fit)


def register(app: typer.Typer) -> None:
    """Add kl-fit to the infoeval app."""
    app.command("kl-fit")(kl_fit)

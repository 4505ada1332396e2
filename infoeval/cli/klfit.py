"""The kl-fit command: one Gaussian fitted to a two-bump target by forward and by reverse KL."""

from __future__ import annotations

import typer

from infoeval.cli.command import command
from infoeval.cli.outputs import Outputs, emit
from infoeval.klfit.fit import KLFitSettings
from infoeval.output.emit import as_json


def kl_fit(settings: KLFitSettings, outputs: Outputs) -> None:
    """Fit one discretized Gaussian to a two-bump target by forward KL (mode covering) and by reverse KL
    (mode seeking), from each start; prints centre, width and KL of each fit."""
    from infoeval.api.information import kl_fit as fit
    from infoeval.klfit.tables import print_kl_fit

    outputs.check()
    data = as_json(fit(settings))

    def draw(path):
        from infoeval.output.plots import plot_kl_fit

        plot_kl_fit(data, path)

    emit(outputs, data, command="kl-fit", model="", source="", draw=draw, tables=print_kl_fit)


HELPS = {
    "csv": "Write one row per fit as CSV here.",
    "json": "Write the target, every fitted q and the settings as JSON here.",
}


def register(app: typer.Typer) -> None:
    """Add kl-fit to the infoeval app."""
    names = ("plot", "csv", "json")
    app.command("kl-fit")(
        command(KLFitSettings, kl_fit, outputs=Outputs, output_names=names, metavar=None, helps=HELPS)
    )

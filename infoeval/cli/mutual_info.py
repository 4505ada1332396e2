"""The mutual-info command: how much the first half of a block tells a model about the second half."""

from __future__ import annotations

import typer

from infoeval.cli.command import command
from infoeval.cli.outputs import Outputs, emit
from infoeval.mutual_information.request import MutualInfoRequest
from infoeval.output.emit import as_json


def mutual_info(request: MutualInfoRequest, outputs: Outputs) -> None:
    """How much the first half of a block of L tokens tells the model about the second half, I(L) ≈ H(Y) −
    H(Y|X) in bits, for each length; and the power law I(L) ≈ A·L^β with a bootstrap CI for β (L²M)."""
    from infoeval.api.information import mutual_info as run_mutual_info
    from infoeval.mutual_information.tables import mi_blocks_frame, print_mutual_info

    outputs.check()  # before the long run
    data = as_json(run_mutual_info(outputs.running(request)))

    def draw(path):
        from infoeval.output.mutual_info_plot import plot_mutual_info

        plot_mutual_info(data, path)

    emit(
        outputs,
        data,
        command="mutual-info",
        model=request.model.model,
        positions=lambda: mi_blocks_frame(data),
        draw=draw,
        tables=print_mutual_info,
    )


HELPS = {
    "max_tokens": "Use at most this many text tokens for the blocks ('all': as many as the blocks need).",
    "csv": "Write the per-length summary CSV here.",
    "positions": "Write every block (positions, byte offsets, bits) as CSV here.",
}


def register(app: typer.Typer) -> None:
    """Add mutual-info to the infoeval app."""
    names = ("csv", "json", "positions", "plot", "folder", "quiet")
    app.command("mutual-info")(
        command(MutualInfoRequest, mutual_info, outputs=Outputs, output_names=names, helps=HELPS)
    )

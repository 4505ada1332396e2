"""The sensitivity command: which units (Linear layers, blocks, layer types) a quantization scheme hurts."""

from __future__ import annotations

from infoeval.cli.command import command
from infoeval.cli.outputs import Outputs, emit
from infoeval.sensitivities.request import SensitivityRequest


def sensitivity(request: SensitivityRequest, outputs: Outputs) -> None:
    """Quantize each unit alone (one Linear layer, one decoder block, or one layer type) and measure it against
    the original on the same windows: mean KL ± SE, P99, top-1 agreement, Δ ln PPL ± SE, ranked; with the
    diagonal-Fisher proxy and how well it ranks the units (Spearman ρ)."""
    from infoeval.api.units import sensitivity as run_sensitivity
    from infoeval.sensitivities.tables import print_sensitivity

    outputs.check()
    result = run_sensitivity(outputs.running(request))
    data = result.to_json()

    def draw(path):
        from infoeval.sensitivities.plot import plot_sensitivity

        plot_sensitivity(data, path)

    emit(outputs, data, command="sensitivity", model=request.model.model, draw=draw, tables=print_sensitivity)


def register(app) -> None:
    """Add sensitivity to the infoeval app."""
    names = ("csv", "json", "plot", "folder", "quiet")
    app.command("sensitivity")(command(SensitivityRequest, sensitivity, outputs=Outputs, output_names=names))

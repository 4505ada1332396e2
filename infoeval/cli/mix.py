"""`infoeval mix`: the best scheme per unit for a bits budget, measured on held-out text. Options only; the work
is in infoeval.mixing."""

from __future__ import annotations

import json as jsonlib
from pathlib import Path

from infoeval.cli.command import command
from infoeval.cli.outputs import RUN_OUTPUTS, emit
from infoeval.mixing.settings import MixOutputs, MixRequest


def mix(request: MixRequest, outputs: MixOutputs) -> None:
    """Choose one scheme per unit (linear, block or layer type) minimising the predicted KL (the sum of the units'
    own KLs from a sensitivity sweep) within a budget of stored bits per weight, solved exactly; then measure the
    mix and every uniform scheme on held-out text, and write the recipe, a llama.cpp --tensor-type file and a
    compressed-tensors config."""
    from infoeval.api.units import mix as run_mix
    from infoeval.mixing.tables import plot_mix, print_mix

    outputs.check()  # before the long run
    result = run_mix(outputs.running(request))
    data = result.to_json()
    folder = lambda paths: Path(next(iter(paths.values()))).parent  # noqa: E731
    emit(
        outputs,
        data,
        model=request.model.model,
        positions=lambda: result.positions,
        draw=lambda path: plot_mix(data, path),
        tables=print_mix,
        extras=lambda paths: export_files(data, result.sweep, folder(paths), outputs.recipe_out),
    )


def export_files(data: dict, sweep_json: dict | None, folder: Path, recipe_out: Path | None) -> dict:
    """Files beside the result: the recipe, the llama.cpp tensor types and the compressed-tensors config (each
    when expressible), and the sweep's own result (reusable with --sensitivity)."""
    ex = data["exports"]
    files = {recipe_out or folder / "recipe.toml": lambda: ex["recipe"]}
    if ex["llama_cpp"]["text"] is not None:
        files[folder / "tensor-types.txt"] = lambda: ex["llama_cpp"]["text"]
    if ex["compressed_tensors"]["config"] is not None:
        files[folder / "quantization_config.json"] = lambda: (
            jsonlib.dumps(ex["compressed_tensors"]["config"], indent=2) + "\n"
        )
    if sweep_json is not None:
        from infoeval.output.results import _clean

        files[folder / "sensitivity.json"] = lambda: (
            jsonlib.dumps(_clean(sweep_json), indent=2, ensure_ascii=False) + "\n"
        )
    return files


def register(app) -> None:
    """Add mix to the infoeval app."""
    names = (*RUN_OUTPUTS, "recipe_out")
    app.command("mix")(command(MixRequest, mix, outputs=MixOutputs, output_names=names))

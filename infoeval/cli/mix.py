"""`infoeval mix`: the best scheme per unit for a bits budget, measured on held-out text. Options only; the work
is in infoeval.mixing."""

from __future__ import annotations

import json as jsonlib
from pathlib import Path
from typing import Annotated

import typer

from infoeval.cli.options import RunOptions
from infoeval.cli.outputs import RUN_OUTPUTS, Outputs, scoring_options
from infoeval.mixing.settings import DEFAULT_MIX_SCHEMES

MixSchemesOpt = Annotated[str, typer.Option("--schemes", help="Schemes each unit may take, comma-separated.")]
BudgetOpt = Annotated[
    str,
    typer.Option(
        "--budget-bits",
        help="Most stored bits per quantized weight (codes + fp16 scales), or a scheme of --schemes: its exact "
        "bits on this model.",
    ),
]
ByOpt = Annotated[
    str, typer.Option("--by", help="Units: linear (each Linear), block (each decoder block) or type (each layer type).")
]
SensitivityOpt = Annotated[
    list[Path] | None,
    typer.Option(
        "--sensitivity", help="Per-unit KLs from `infoeval sensitivity` JSON (repeatable) instead of sweeping."
    ),
]
SweepOpt = Annotated[
    str | None,
    typer.Option(
        "--sweep", help="Also solve and measure budgets START:STOP:STEP (bits per weight) for the KL-vs-bits curve."
    ),
]
SweepTokensOpt = Annotated[
    int, typer.Option("--sweep-tokens", help="Tokens the sensitivity sweep reads, right after the measured ones.")
]
NoBlockCacheOpt = Annotated[
    bool, typer.Option("--no-block-cache", help="Sweep every unit from the embeddings (no cached block inputs).")
]
RecipeOutOpt = Annotated[
    Path | None,
    typer.Option("--recipe-out", help="Write the recipe TOML here (default: recipe.toml beside the result JSON)."),
]


@scoring_options(*RUN_OUTPUTS)
def mix(
    model: str = None,  # MODEL or --model (see model_options)
    schemes: MixSchemesOpt = DEFAULT_MIX_SCHEMES,
    budget_bits: BudgetOpt = "int4-g128",
    by: ByOpt = "type",
    sensitivity: SensitivityOpt = None,
    sweep: SweepOpt = None,
    sweep_tokens: SweepTokensOpt = 2048,
    no_block_cache: NoBlockCacheOpt = False,
    recipe_out: RecipeOutOpt = None,
    run: RunOptions = None,  # the shared text, window and device options (see run_options)
    outputs: Outputs = None,  # the output options (see output_options)
) -> None:
    """Choose one scheme per unit (linear, block or layer type) minimising the predicted KL (the sum of the units'
    own KLs from a sensitivity sweep) within a budget of stored bits per weight, solved exactly; then measure the
    mix and every uniform scheme on held-out text, and write the recipe, a llama.cpp --tensor-type file and a
    compressed-tensors config."""
    from infoeval.api.units import mix as run_mix
    from infoeval.mixing.report import plot_mix, print_mix

    outputs.check()  # before the long run
    result = run_mix(
        model,
        schemes=schemes,
        budget_bits=budget_bits,
        by=by,
        sensitivity=sensitivity or (),
        sweep=sweep,
        sweep_tokens=sweep_tokens,
        block_cache=not no_block_cache,
        progress=not outputs.quiet,
        **run.keywords(),
    )
    data = result.to_json()
    outputs.emit(
        data,
        command="mix",
        model=model,
        positions=lambda: result.positions,
        draw=lambda path: plot_mix(data, path),
        tables=print_mix,
        extras=lambda paths: export_files(data, result.sweep, Path(next(iter(paths.values()))).parent, recipe_out),
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
    app.command("mix")(mix)

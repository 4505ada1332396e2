"""The sensitivity command: which units (Linear layers, blocks, layer types) a quantization scheme hurts."""

from __future__ import annotations

from typing import Annotated

import typer

from infoeval.api import units
from infoeval.cli.options import MaxTokensOpt, RunOptions
from infoeval.cli.outputs import Outputs, scoring_options

SchemeOpt = Annotated[
    str,
    typer.Option(
        "--scheme",
        "--schemes",
        help="Scheme(s) each unit is quantized with, comma-separated: int<bits>-channel | int<bits>-g<N> [-asym].",
    ),
]
ByOpt = Annotated[
    str,
    typer.Option(
        help="Units: linear (one Linear layer), block (one decoder block), type (one layer type in every "
        "block, e.g. mlp.down_proj)."
    ),
]
UnitsOpt = Annotated[
    list[str] | None,
    typer.Option(help="Keep only the units matching this glob (repeatable or comma-separated), e.g. '*mlp*'."),
]
BlockCacheOpt = Annotated[
    bool,
    typer.Option(
        "--block-cache/--no-block-cache",
        help="Start each unit's forward from the reference's cached input of its first block "
        "(--no-block-cache: from the embeddings, to time the plain path).",
    ),
]
ProxyOpt = Annotated[
    bool,
    typer.Option(
        "--proxy/--no-proxy",
        help="Also compute the diagonal-Fisher proxy (one backward pass per window) and its Spearman ρ with "
        "the direct KL.",
    ),
]
SeedOpt = Annotated[int, typer.Option(help="Seed of the tokens the proxy draws from the reference.")]
SENSITIVITY_MAX_TOKENS = str(units.SENSITIVITY_MAX_TOKENS)  # the API's default, as the option's text


@scoring_options("csv", "json", "plot", "folder", "quiet")
def sensitivity(
    model: str = None,  # MODEL or --model (see model_options)
    scheme: SchemeOpt = "int4-g128",
    by: ByOpt = "type",
    units: UnitsOpt = None,
    max_tokens: MaxTokensOpt = SENSITIVITY_MAX_TOKENS,
    block_cache: BlockCacheOpt = True,
    proxy: ProxyOpt = True,
    seed: SeedOpt = 0,
    run: RunOptions = None,  # the shared text, window and device options (see run_options)
    outputs: Outputs = None,  # the output options (see output_options)
) -> None:
    """Quantize each unit alone (one Linear layer, one decoder block, or one layer type) and measure it against
    the original on the same windows: mean KL ± SE, P99, top-1 agreement, Δ ln PPL ± SE, ranked; with the
    diagonal-Fisher proxy and how well it ranks the units (Spearman ρ)."""
    from infoeval.api.units import sensitivity as run_sensitivity
    from infoeval.sensitivities.report import print_sensitivity

    outputs.check()
    result = run_sensitivity(
        model,
        schemes=scheme,
        by=by,
        units=units,
        block_cache=block_cache,
        proxy=proxy,
        seed=seed,
        progress=not outputs.quiet,
        **run.keywords(),
    )
    data = result.to_json()

    def draw(path):
        from infoeval.sensitivities.plot import plot_sensitivity

        plot_sensitivity(data, path)

    outputs.emit(data, command="sensitivity", model=model, draw=draw, tables=print_sensitivity)


def register(app) -> None:
    """Add sensitivity to the infoeval app."""
    app.command("sensitivity")(sensitivity)

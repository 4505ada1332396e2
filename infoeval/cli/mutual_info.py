"""The mutual-info command: how much the first half of a block tells a model about the second half."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from infoeval.cli.options import RunOptions
from infoeval.cli.output import as_json
from infoeval.cli.outputs import Outputs, scoring_options
from infoeval.mutual_information.estimator import DEFAULT_BATCH_TOKENS, DEFAULT_BLOCKS, DEFAULT_LENGTHS

MICsvOpt = Annotated[Path | None, typer.Option("--csv", help="Write the per-length summary CSV here.")]
LengthsOpt = Annotated[
    str, typer.Option(help="Comma-separated block lengths L in tokens, each even (X = first L/2, Y = last L/2).")
]
BlocksOpt = Annotated[int, typer.Option(help="Blocks per length (fewer when the text is short; at least 2 needed).")]
BatchTokensOpt = Annotated[
    int, typer.Option(help="Tokens per forward pass: blocks of one length are batched up to this.")
]
BootstrapOpt = Annotated[int, typer.Option(help="Bootstrap replicates for the 95% CI of β.")]
SeedOpt = Annotated[int, typer.Option(help="Seed of the bootstrap.")]
MIPrefixOpt = Annotated[
    str, typer.Option("--prefix", help="Start token that Y is scored after: auto (BOS, else EOS), bos or eos.")
]
MIMaxTokensOpt = Annotated[
    str, typer.Option(help="Use at most this many text tokens for the blocks ('all': as many as the blocks need).")
]
MIBlocksCsvOpt = Annotated[
    Path | None, typer.Option("--positions", help="Write every block (positions, byte offsets, bits) as CSV here.")
]


@scoring_options("json", "plot", "folder", "quiet", windows=False, csv=MICsvOpt, positions=MIBlocksCsvOpt)
def mutual_info(
    model: str = None,  # MODEL or --model (see model_options)
    lengths: LengthsOpt = DEFAULT_LENGTHS,
    blocks: BlocksOpt = DEFAULT_BLOCKS,
    max_tokens: MIMaxTokensOpt = "all",
    prefix: MIPrefixOpt = "auto",
    batch_tokens: BatchTokensOpt = DEFAULT_BATCH_TOKENS,
    bootstrap: BootstrapOpt = 1000,
    seed: SeedOpt = 0,
    run: RunOptions = None,  # the shared text, window and device options (see run_options)
    outputs: Outputs = None,  # the output options (see output_options)
) -> None:
    """How much the first half of a block of L tokens tells the model about the second half, I(L) ≈ H(Y) −
    H(Y|X) in bits, for each length; and the power law I(L) ≈ A·L^β with a bootstrap CI for β (L²M)."""
    from infoeval.api.information import mutual_info as run_mutual_info
    from infoeval.mutual_information.estimator import parse_lengths
    from infoeval.mutual_information.pipeline import MISettings
    from infoeval.mutual_information.report import mi_blocks_frame, print_mutual_info

    MISettings(
        parse_lengths(lengths), blocks, batch_tokens, bootstrap, seed, prefix
    )  # checked before the output options, as always
    outputs.check()  # before the long run
    keywords = {
        k: v for k, v in run.keywords().items() if k in ("text", "dataset", "data_dir", "device", "dtype", "device_map")
    }
    data = as_json(
        run_mutual_info(
            model,
            lengths=lengths,
            blocks=blocks,
            max_tokens=run.max_tokens,
            prefix=prefix,
            batch_tokens=batch_tokens,
            bootstrap=bootstrap,
            seed=seed,
            progress=not outputs.quiet,
            **keywords,
        )
    )

    def draw(path):
        from infoeval.output.mutual_info_plot import plot_mutual_info

        plot_mutual_info(data, path)

    outputs.emit(
        data,
        command="mutual-info",
        model=model,
        positions=lambda: mi_blocks_frame(data),
        draw=draw,
        tables=print_mutual_info,
    )


def register(app: typer.Typer) -> None:
    """Add mutual-info to the infoeval app."""
    app.command("mutual-info")(mutual_info)

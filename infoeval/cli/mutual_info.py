"""Commands for mutual information and KL fitting (issue 5): mutual-info, kl-fit."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from infoeval.cli.options import (
    ConfigOpt, DataDirOpt, DatasetOpt, DeviceMapOpt, DeviceOpt, DtypeOpt, JsonOpt, ModelOpt, OutDirOpt,
    QuietOpt, RunNameOpt, TextOpt, output_paths_for, settings,
)  # fmt: skip
from infoeval.models import DEFAULT_MODEL

PlotOpt = Annotated[Optional[Path], typer.Option(help="Also draw the results into this .png (or .svg, .pdf); needs matplotlib, the 'plot' extra.")]
MICsvOpt = Annotated[Optional[Path], typer.Option("--csv", help="Write the per-length summary CSV here.")]
KLCsvOpt = Annotated[Optional[Path], typer.Option("--csv", help="Write one row per fit as CSV here.")]
KLJsonOpt = Annotated[Optional[Path], typer.Option("--json", help="Write the target, every fitted q and the settings as JSON here.")]
LengthsOpt = Annotated[str, typer.Option(help="Comma-separated block lengths L in tokens, each even (X = first L/2, Y = last L/2).")]
BlocksOpt = Annotated[int, typer.Option(help="Blocks per length (fewer when the text is short; at least 2 needed).")]
BatchTokensOpt = Annotated[int, typer.Option(help="Tokens per forward pass: blocks of one length are batched up to this.")]
BootstrapOpt = Annotated[int, typer.Option(help="Bootstrap replicates for the 95% CI of β.")]
SeedOpt = Annotated[int, typer.Option(help="Seed of the bootstrap.")]
MIPrefixOpt = Annotated[str, typer.Option("--prefix", help="Start token that Y is scored after: auto (BOS, else EOS), bos or eos.")]
MIMaxTokensOpt = Annotated[str, typer.Option(help="Use at most this many text tokens for the blocks ('all': as many as the blocks need).")]
MIBlocksCsvOpt = Annotated[Optional[Path], typer.Option("--positions", help="Write every block (positions, byte offsets, bits) as CSV here.")]


def register(app: typer.Typer) -> None:
    """Add this module's commands to the infoeval app."""
    from infoeval.mutual_info.estimator import DEFAULT_BATCH_TOKENS, DEFAULT_BLOCKS, DEFAULT_LENGTHS

    @app.command("mutual-info")
    def mutual_info(
        model: ModelOpt = DEFAULT_MODEL,
        lengths: LengthsOpt = DEFAULT_LENGTHS,
        blocks: BlocksOpt = DEFAULT_BLOCKS,
        text: TextOpt = None,
        dataset: DatasetOpt = None,
        data_dir: DataDirOpt = None,
        max_tokens: MIMaxTokensOpt = "all",
        prefix: MIPrefixOpt = "auto",
        batch_tokens: BatchTokensOpt = DEFAULT_BATCH_TOKENS,
        bootstrap: BootstrapOpt = 1000,
        seed: SeedOpt = 0,
        device: DeviceOpt = "auto",
        dtype: DtypeOpt = "auto",
        device_map: DeviceMapOpt = None,
        csv: MICsvOpt = None,
        json: JsonOpt = None,
        positions: MIBlocksCsvOpt = None,
        plot: PlotOpt = None,
        out_dir: OutDirOpt = None,
        run_name: RunNameOpt = None,
        quiet: QuietOpt = False,
        config: ConfigOpt = None,
    ) -> None:
        """How much the first half of a block of L tokens tells the model about the second half, I(L) ≈ H(Y) −
        H(Y|X) in bits, for each length; and the power law I(L) ≈ A·L^β with a bootstrap CI for β (L²M)."""
        from rich.console import Console

        from infoeval.mutual_info.report import mi_blocks_frame, mi_summary_frame, print_mutual_info
        from infoeval.mutual_info.estimator import MISettings, check_settings, parse_lengths, run_mutual_info
        from infoeval.report import RichReporter, stdout_console
        from infoeval.results import write_outputs

        ms, ts, _ = settings(model, device, dtype, device_map, text, dataset, data_dir, max_tokens, 2, None, "rolling", "auto")
        s = MISettings(parse_lengths(lengths), blocks, batch_tokens, bootstrap, seed, prefix)
        check_settings(s)
        if plot:
            from infoeval.plots import require

            require(plot)
        result = run_mutual_info(ms, ts, s, RichReporter(enabled=not quiet))
        paths = output_paths_for("mutual-info", ms, result, csv, json, positions, out_dir, run_name)
        written = write_outputs(paths, result, lambda: mi_summary_frame(result), lambda: mi_blocks_frame(result))
        if plot:
            from infoeval.plots import plot_mutual_info

            plot_mutual_info(result, plot)
            written.append(str(plot))
        print_mutual_info(stdout_console(), result)
        Console(stderr=True).print("wrote " + ", ".join(written), style="dim")

    @app.command("kl-fit")
    def kl_fit(
        target: Annotated[str, typer.Option(help="Target p as bumps WEIGHT:CENTRE:WIDTH, comma-separated (normalized).")] = "0.6:25:5,0.4:70:5",
        support: Annotated[int, typer.Option(help="Grid size N: x = 0 … N−1.")] = 100,
        starts: Annotated[str, typer.Option(help="Comma-separated starting centres μ₀.")] = "30,60",
        directions: Annotated[str, typer.Option(help="forward (KL(p‖q)), reverse (KL(q‖p)) or both, comma-separated.")] = "forward,reverse",
        steps: Annotated[int, typer.Option(help="Adam steps.")] = 2000,
        lr: Annotated[float, typer.Option(help="Adam learning rate.")] = 0.5,
        sigma0: Annotated[float, typer.Option(help="Starting width σ₀.")] = 10.0,
        csv: KLCsvOpt = None,
        json: KLJsonOpt = None,
        plot: PlotOpt = None,
        config: ConfigOpt = None,
    ) -> None:
        """Fit one discretized Gaussian to a two-bump target by forward KL (mode covering) and by reverse KL
        (mode seeking), from each start; prints centre, width and KL of each fit."""
        from rich.console import Console

        from infoeval.errors import UsageError
        from infoeval.klfit.fit import KLFitSettings, kl_fit_result, parse_target
        from infoeval.mutual_info.report import klfit_frame, print_kl_fit
        from infoeval.report import stdout_console
        from infoeval.results import write_outputs

        try:
            mu0 = tuple(float(v) for v in starts.split(",") if v.strip())
        except ValueError:
            raise UsageError(f"--starts '{starts}' is not a comma-separated list of numbers, e.g. 30,60") from None
        dirs = tuple(d.strip() for d in directions.split(",") if d.strip())
        s = KLFitSettings(parse_target(target), support, mu0, dirs, steps, lr, sigma0)
        if plot:
            from infoeval.plots import require

            require(plot)
        result = kl_fit_result(s)
        paths = {k: v for k, v in (("json", json), ("csv", csv)) if v is not None}
        written = write_outputs(paths, result, lambda: klfit_frame(result), lambda: None)
        if plot:
            from infoeval.plots import plot_kl_fit

            plot_kl_fit(result, plot)
            written.append(str(plot))
        print_kl_fit(stdout_console(), result)
        if written:
            Console(stderr=True).print("wrote " + ", ".join(written), style="dim")

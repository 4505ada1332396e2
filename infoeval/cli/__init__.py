"""The `infoeval` command line: each command parses options, calls the library and renders. No maths here."""

from __future__ import annotations

import os
import sys

import typer
from rich.console import Console

from infoeval.cli import gate as cli_gate, mutual_info as cli_mi, speculative as cli_spec
from infoeval.cli.options import (
    DEFAULT_MAX_TOKENS, ConfigOpt, CsvOpt, CtxOpt, DataDirOpt, DatasetOpt, DeviceMapOpt, DeviceOpt, DtypeOpt,
    ExcludeOpt, IncludeOpt, JsonOpt, MaxTokensOpt, ModelOpt, OutDirOpt, PositionsOpt, PrefixOpt, ProtocolOpt,
    QuietOpt, RunNameOpt, SchemesOpt, StrideOpt, TextOpt, output_paths_for, settings,
)
from infoeval.cli.mutual_info import PlotOpt
from infoeval.settings import VariantSettings
from infoeval.errors import EXIT_RUNTIME, InfoevalError
from infoeval.models import DEFAULT_MODEL
from infoeval.quant.schemes import DEFAULT_SCHEMES

app = typer.Typer(
    name="infoeval",
    help="Measure, in bits and nats, how much a language model changes when you quantize, distill or draft it.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

@app.command("quantize-compare")
def quantize_compare(
    model: ModelOpt = DEFAULT_MODEL,
    schemes: SchemesOpt = DEFAULT_SCHEMES,
    include: IncludeOpt = None,
    exclude: ExcludeOpt = None,
    text: TextOpt = None,
    dataset: DatasetOpt = None,
    data_dir: DataDirOpt = None,
    max_tokens: MaxTokensOpt = DEFAULT_MAX_TOKENS,
    ctx: CtxOpt = 512,
    stride: StrideOpt = None,
    protocol: ProtocolOpt = "rolling",
    prefix: PrefixOpt = "auto",
    device: DeviceOpt = "auto",
    dtype: DtypeOpt = "auto",
    device_map: DeviceMapOpt = None,
    csv: CsvOpt = None,
    json: JsonOpt = None,
    positions: PositionsOpt = None,
    plot: PlotOpt = None,
    out_dir: OutDirOpt = None,
    run_name: RunNameOpt = None,
    quiet: QuietOpt = False,
    config: ConfigOpt = None,
) -> None:
    """Fake-quantize a model's weights with each scheme and compare every variant with the original: PPL,
    KL(reference‖variant) mean and tails, top-1 agreement, reverse KL and TV on the same windows."""
    from infoeval.compare import pipeline as compare_pipeline
    from infoeval.report import RichReporter, print_quantize_compare, stdout_console
    from infoeval.results import positions_frame, summary_frame, write_outputs

    ms, ts, ws = settings(model, device, dtype, device_map, text, dataset, data_dir, max_tokens, ctx, stride, protocol, prefix)
    vs = VariantSettings(schemes, tuple(include or ()), tuple(exclude or ()))
    if plot:
        from infoeval.plots import require

        require(plot)  # before the long run
    result, cols = compare_pipeline.quantize_compare(ms, ts, ws, vs, RichReporter(enabled=not quiet))
    paths = output_paths_for("quantize-compare", ms, result, csv, json, positions, out_dir, run_name)
    written = write_outputs(paths, result, lambda: summary_frame(result), lambda: positions_frame(cols.reference, cols.variants))
    if plot:
        from infoeval.plots import plot_quantize_compare

        plot_quantize_compare(result, cols, plot)
        written.append(str(plot))
    print_quantize_compare(stdout_console(), result)
    Console(stderr=True).print("wrote " + ", ".join(written), style="dim")


@app.command("compress-bits")
def compress_bits(
    model: ModelOpt = DEFAULT_MODEL,
    text: TextOpt = None,
    dataset: DatasetOpt = None,
    data_dir: DataDirOpt = None,
    max_tokens: MaxTokensOpt = DEFAULT_MAX_TOKENS,
    ctx: CtxOpt = 512,
    stride: StrideOpt = None,
    protocol: ProtocolOpt = "rolling",
    prefix: PrefixOpt = "auto",
    device: DeviceOpt = "auto",
    dtype: DtypeOpt = "auto",
    device_map: DeviceMapOpt = None,
    csv: CsvOpt = None,
    json: JsonOpt = None,
    positions: PositionsOpt = None,
    plot: PlotOpt = None,
    out_dir: OutDirOpt = None,
    run_name: RunNameOpt = None,
    quiet: QuietOpt = False,
    config: ConfigOpt = None,
) -> None:
    """Total bits, bits/token and bits/byte of a model on a text, beside gzip, bz2, xz and zstd on the very
    same bytes."""
    from infoeval.compare import pipeline as compare_pipeline
    from infoeval.report import RichReporter, print_compress_bits, stdout_console
    from infoeval.results import compress_frame, positions_frame, write_outputs

    ms, ts, ws = settings(model, device, dtype, device_map, text, dataset, data_dir, max_tokens, ctx, stride, protocol, prefix)
    if plot:
        from infoeval.plots import require

        require(plot)  # before the long run
    result, cols = compare_pipeline.compress_bits(ms, ts, ws, RichReporter(enabled=not quiet))
    paths = output_paths_for("compress-bits", ms, result, csv, json, positions, out_dir, run_name)
    written = write_outputs(paths, result, lambda: compress_frame(result), lambda: positions_frame(cols.reference, {}))
    if plot:
        from infoeval.plots import plot_compress_bits

        plot_compress_bits(result, cols, plot)
        written.append(str(plot))
    print_compress_bits(stdout_console(), result)
    Console(stderr=True).print("wrote " + ", ".join(written), style="dim")


for _commands in (cli_gate, cli_spec, cli_mi):  # commands of later issues, each in its own module
    _commands.register(app)


def main() -> None:
    """Entry point: known errors become one line on stderr and an exit code; tracebacks only with INFOEVAL_DEBUG=1."""
    debug = bool(os.environ.get("INFOEVAL_DEBUG"))
    try:
        app()
    except InfoevalError as e:
        if debug:
            raise
        print(f"infoeval: error: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        print("infoeval: interrupted", file=sys.stderr)
        sys.exit(130)
    except MemoryError:
        if debug:
            raise
        print("infoeval: error: out of memory; use a smaller --ctx or model, or --device cuda", file=sys.stderr)
        sys.exit(EXIT_RUNTIME)
    except Exception as e:  # noqa: BLE001 - the single error boundary
        if debug:
            raise
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        print(f"infoeval: error: {type(e).__name__}: {msg} (set INFOEVAL_DEBUG=1 for the traceback)", file=sys.stderr)
        sys.exit(EXIT_RUNTIME)


"""Commands comparing a model with its quantized variants and with compressors: quantize-compare, compress-bits."""

from __future__ import annotations

from infoeval.cli.command import command
from infoeval.cli.outputs import RUN_OUTPUTS, Outputs, emit
from infoeval.comparison.request import CompareOutputs, CompareRequest, CompressRequest
from infoeval.output.destinations import LLAMACPP_TABLE
from infoeval.report.page import page_extras


def quantize_compare(request: CompareRequest, outputs: CompareOutputs) -> None:
    """Fake-quantize a model's weights with each scheme and compare every variant with the original: PPL,
    KL(reference‖variant) mean and tails, top-1 agreement, reverse KL and TV on the same windows."""
    from infoeval.api.scoring import compare
    from infoeval.comparison.tables import (
        print_quantize_compare,
        print_quantize_compare_confidence,
        print_quantize_compare_llamacpp,
    )

    outputs.check()  # before the long run
    tables = {LLAMACPP_TABLE: print_quantize_compare_llamacpp, "confidence": print_quantize_compare_confidence}.get(
        outputs.table, print_quantize_compare
    )
    result = compare(outputs.running(request))
    _emit_run(result, "quantize-compare", request.model.model, tables, outputs)


def _emit_run(result, command: str, model: str, tables, outputs: Outputs) -> None:
    """Write, draw and print a quantize-compare or compress-bits run."""
    data, cols = result.to_json(), result.columns

    def draw(path):
        from infoeval.output.plots import plot_compress_bits, plot_quantize_compare

        (plot_quantize_compare if command == "quantize-compare" else plot_compress_bits)(data, cols, path)

    frame = lambda: result.positions  # noqa: E731  (built once, for the CSV and the page)
    emit(
        outputs,
        data,
        command=command,
        model=model,
        positions=frame,
        draw=draw,
        tables=tables,
        extras=lambda paths: page_extras(data, frame, cols.vocab, paths, outputs.html, f"{command}: {model}"),
    )


def compress_bits(request: CompressRequest, outputs: Outputs) -> None:
    """Total bits, bits/token and bits/byte of a model on a text, beside gzip, bz2, xz and zstd on the very
    same bytes (and, with --verify-coding, a real arithmetic-coded file of them)."""
    from infoeval.api.scoring import compress_bits as run_compress_bits
    from infoeval.comparison.tables import print_compress_bits

    outputs.check()  # before the long run
    result = run_compress_bits(outputs.running(request))
    _emit_run(result, "compress-bits", request.model.model, print_compress_bits, outputs)


def register(app) -> None:
    """Add quantize-compare and compress-bits to the infoeval app."""
    outputs = (*RUN_OUTPUTS, "html")
    app.command("quantize-compare")(
        command(CompareRequest, quantize_compare, outputs=CompareOutputs, output_names=(*outputs, "table"))
    )
    app.command("compress-bits")(command(CompressRequest, compress_bits, outputs=Outputs, output_names=outputs))

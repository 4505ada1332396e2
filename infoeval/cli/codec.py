"""Commands that compress a file with a model and give it back: compress, decompress."""

from __future__ import annotations

from infoeval.cli.command import command
from infoeval.cli.outputs import Outputs, emit
from infoeval.codec.request import DecodeRequest, EncodeRequest


def compress(request: EncodeRequest, outputs: Outputs) -> None:
    """Compress FILE losslessly with a language model and a range coder: a real .iez file, its size against
    Σ −log₂ q and against xz and zstd."""
    from infoeval.codec.compress import compress as run
    from infoeval.codec.tables import print_compress

    result = run(request.file, request.output, request.settings, request.force, outputs.reporter())
    emit(
        outputs,
        result,
        command="compress",
        model=request.settings.model,
        source="",
        tables=print_compress,
        also_written=(str(request.output),),
    )


def decompress(request: DecodeRequest, outputs: Outputs) -> None:
    """Give back the file a .iez file was made from, byte for byte (checked against its sha256)."""
    from infoeval.codec.compress import decompress as run
    from infoeval.codec.tables import print_decompress

    result = run(request.file, request.output, request.model, request.force, outputs.reporter())
    emit(
        outputs,
        result,
        command="decompress",
        model=request.model or "",
        source="",
        tables=print_decompress,
        also_written=(str(request.output),),
    )


def register(app) -> None:
    """Add compress and decompress to the infoeval app."""
    names = ("json", "quiet")
    app.command("compress")(command(EncodeRequest, compress, outputs=Outputs, output_names=names, metavar=None))
    app.command("decompress")(command(DecodeRequest, decompress, outputs=Outputs, output_names=names, metavar=None))

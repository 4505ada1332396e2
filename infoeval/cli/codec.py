"""Commands that compress a file with a model and give it back: compress, decompress."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from infoeval.cli.options import MODEL_DEFAULT, ModelOpt
from infoeval.cli.outputs import Outputs, output_options

InFile = Annotated[Path, typer.Argument(metavar="FILE", help="The file to read.", show_default=False)]
OutFile = Annotated[Path, typer.Option("--output", "-o", help="The file to write (atomically).", show_default=False)]
ForceOpt = Annotated[
    bool, typer.Option("--force", help="Overwrite the output; decompress: decode despite a differing environment.")
]
SegmentOpt = Annotated[
    int, typer.Option("--ctx", help="Tokens per segment; each segment is coded on its own, after the start token.")
]
GroupOpt = Annotated[
    int, typer.Option("--group", help="Segments stepped together as one batch (the decoder uses the same groups).")
]
CodecDeviceOpt = Annotated[
    str, typer.Option("--device", help="cpu (exact on the same CPU kind and software), cuda or cuda:N.")
]
CodecDtypeOpt = Annotated[str, typer.Option("--dtype", help="float32, bfloat16 or float16.")]
FallbackOpt = Annotated[
    str, typer.Option(help="When the tokenizer cannot give the file back: xz (store it with xz) or refuse.")
]
VerifyOpt = Annotated[
    bool,
    typer.Option(
        "--verify/--no-verify",
        help="Decode in memory before writing (proves the file decodes here; measures decompression).",
    ),
]
DecodeModelOpt = Annotated[
    str | None, typer.Option("--model", "-m", help="The model, when it is not where the file says.")
]


@output_options("json", "quiet")
def compress(
    file: InFile,
    output: OutFile,
    model: ModelOpt = MODEL_DEFAULT,
    ctx: SegmentOpt = 512,
    group: GroupOpt = 32,
    device: CodecDeviceOpt = "cpu",
    dtype: CodecDtypeOpt = "float32",
    fallback: FallbackOpt = "xz",
    verify: VerifyOpt = True,
    force: ForceOpt = False,
    outputs: Outputs = None,  # the output options (see output_options)
) -> None:
    """Compress FILE losslessly with a language model and a range coder: a real .iez file, its size against
    Σ −log₂ q and against xz and zstd."""
    from infoeval.codec.pipeline import CodecSettings
    from infoeval.codec.pipeline import compress as run
    from infoeval.codec.report import print_compress

    codec_settings = CodecSettings(
        model=model, ctx=ctx, group=group, device=device, dtype=dtype, fallback=fallback, verify=verify
    )
    result = run(file, output, codec_settings, force, outputs.reporter())
    outputs.emit(result, command="compress", model=model, source="", tables=print_compress, also_written=(str(output),))


@output_options("json", "quiet")
def decompress(
    file: InFile,
    output: OutFile,
    model: DecodeModelOpt = None,
    force: ForceOpt = False,
    outputs: Outputs = None,  # the output options (see output_options)
) -> None:
    """Give back the file a .iez file was made from, byte for byte (checked against its sha256)."""
    from infoeval.codec.pipeline import decompress as run
    from infoeval.codec.report import print_decompress

    result = run(file, output, model, force, outputs.reporter())
    outputs.emit(
        result, command="decompress", model=model or "", source="", tables=print_decompress, also_written=(str(output),)
    )


def register(app) -> None:
    """Add compress and decompress to the infoeval app."""
    app.command("compress")(compress)
    app.command("decompress")(decompress)

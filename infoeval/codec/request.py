"""What compress and decompress are asked, each option declared once (``input/fields.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from infoeval.codec.compress import CodecSettings
from infoeval.errors import UsageError, spell
from infoeval.input.fields import group, option, optional_path

FORCE_HELP = "Overwrite the output; decompress: decode despite a differing environment."


def file_option():
    """FILE: the file to read (a positional argument)."""
    return option(
        None,
        help="The file to read.",
        positional="FILE",
        argument=True,
        required=True,
        accepts=str | Path,
        cli=Path,
        parse=optional_path,
    )


def output_option():
    """--output/-o FILE: the file to write."""
    return option(
        None,
        flags=("--output", "-o"),
        help="The file to write (atomically).",
        required=True,
        accepts=str | Path,
        cli=Path,
        parse=optional_path,
    )


def force_option():
    return option(False, flags=("--force",), help=FORCE_HELP)


def _check(request) -> None:
    for name in ("file", "output"):
        if getattr(request, name) is None:
            raise UsageError(f"{spell(name)} is required")


@dataclass(frozen=True)
class EncodeRequest:
    """compress: a file, losslessly, with a language model and a range coder."""

    file: Path | None = file_option()
    output: Path | None = output_option()
    settings: CodecSettings = group(CodecSettings, panel="Coding")
    force: bool = force_option()

    def __post_init__(self) -> None:
        _check(self)


@dataclass(frozen=True)
class DecodeRequest:
    """decompress: the file a .iez file was made from, byte for byte."""

    file: Path | None = file_option()
    output: Path | None = output_option()
    model: str | None = option(None, flags=("--model", "-m"), help="The model, when it is not where the file says.")
    force: bool = force_option()

    def __post_init__(self) -> None:
        _check(self)

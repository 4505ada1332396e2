"""The options that choose the variants measured against the reference: quantization schemes, module globs,
recipes, the noise floor, and the calibration of calibrated methods (``@calibration_options``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from infoeval.cli.signatures import extend, option

SchemesOpt = Annotated[
    str,
    typer.Option(
        help="Comma-separated schemes: int<bits>-channel | int<bits>-g<N> [-asym] (infoeval's rounding), bf16 "
        "| fp16 (the weights at 16 bits), or <library>:<spec> such as hqq:int4-g64 (the library's own "
        "quantizer and kernels; docs/methods.md)."
    ),
]
IncludeOpt = Annotated[
    list[str] | None, typer.Option(help="Also quantize modules matching this glob (repeatable), e.g. lm_head.")
]
ExcludeOpt = Annotated[list[str] | None, typer.Option(help="Do not quantize modules matching this glob (repeatable).")]
CalibrationOpt = Annotated[
    str | None,
    typer.Option(
        "--calibration",
        help="Calibrated methods (autoround:…): the text they learn from, a dataset name or a UTF-8 file; "
        "default: the evaluated text after the evaluated tokens (docs/methods.md).",
        show_default=False,
    ),
]
CalibrationSamplesOpt = Annotated[int, typer.Option(help="Calibrated methods: how many chunks of calibration text.")]
CalibrationSeqlenOpt = Annotated[int, typer.Option(help="Calibrated methods: tokens per chunk.")]
CalibrationSeedOpt = Annotated[
    int, typer.Option(help="Calibrated methods: the seed that draws the chunks and seeds the method.")
]
CalibrationOverlapOpt = Annotated[
    bool,
    typer.Option(
        "--calibration-overlap", help="Allow calibration chunks that repeat the evaluated tokens (refused by default)."
    ),
]
FloorOpt = Annotated[
    str,
    typer.Option(
        "--floor",
        help="The noise floor (the reference with its weights moved by one bfloat16 rounding step) in the same "
        "run: sampled (a seeded share of the windows, ≤ 8 % of the forward passes, ≤ 10 % of the wall time), "
        "full (every window) or off.",
    ),
]
FloorSeedOpt = Annotated[int, typer.Option(help="The noise floor's seed: its weights and its sampled windows.")]
RecipeOpt = Annotated[
    list[Path] | None,
    typer.Option(
        help="Recipe TOML (unit → scheme, as `infoeval mix` writes): one more variant, named after the file "
        "(repeatable)."
    ),
]

_CALIBRATION = [
    option("calibration", CalibrationOpt, None),
    option("calibration_samples", CalibrationSamplesOpt, 128),
    option("calibration_seqlen", CalibrationSeqlenOpt, 512),
    option("calibration_seed", CalibrationSeedOpt, 42),
    option("calibration_overlap", CalibrationOverlapOpt, False),
]


def calibration_options(command):
    """Give a command the calibration options of the calibrated methods (autoround:…), defined once here; they
    reach it as one ``calibration_settings: CalibrationSettings`` argument."""
    from infoeval.input.settings import CalibrationSettings

    return extend(
        command,
        "calibration_settings",
        _CALIBRATION,
        lambda values: CalibrationSettings(*(values[p.name] for p in _CALIBRATION)),
    )

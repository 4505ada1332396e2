"""What sensitivity is asked, each option declared once (``input/fields.py``): the run's model, text and windows
(2,048 tokens by default: every unit is a pass over them), the schemes each unit is quantized with, the units, the
proxy."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from infoeval.input.fields import group, non_negative, option
from infoeval.input.request import RunRequest
from infoeval.input.settings import TextSettings
from infoeval.quant.schemes import Scheme
from infoeval.quant.variant_settings import parse_schemes
from infoeval.sensitivities.units import block_cache_option, by_option, split_globs

SENSITIVITY_MAX_TOKENS = 2048  # sensitivity's --max-tokens default
SENSITIVITY_SCHEMES = "int4-g128"


@dataclass(frozen=True)
class SensitivityRequest(RunRequest):
    """sensitivity: each unit quantized alone with each scheme, measured against the reference."""

    text: TextSettings = group(TextSettings, panel="Text", max_tokens=SENSITIVITY_MAX_TOKENS)
    schemes: tuple[Scheme, ...] = option(
        factory=lambda: parse_schemes(SENSITIVITY_SCHEMES, methods=False),
        flags=("--scheme", "--schemes"),
        help="Scheme(s) each unit is quantized with, comma-separated: int<bits>-channel | int<bits>-g<N> [-asym].",
        accepts=str | Sequence[str],
        cli=str,
        parse=lambda value: parse_schemes(value, methods=False, option_name="schemes"),
        default_text=SENSITIVITY_SCHEMES,
        panel="Units",
    )
    by: str = by_option(panel="Units")
    units: tuple[str, ...] = option(
        (),
        help="Keep only the units matching this glob (repeatable or comma-separated), e.g. '*mlp*'.",
        accepts=Sequence[str] | None,
        cli=list[str],
        parse=split_globs,
        panel="Units",
    )
    block_cache: bool = block_cache_option(panel="Units")
    proxy: bool = option(
        True,
        flags=("--proxy/--no-proxy",),
        help="Also compute the diagonal-Fisher proxy (one backward pass per window) and its Spearman ρ with the direct "
        "KL.",
        panel="Units",
    )
    seed: int = option(
        0, help="Seed of the tokens the proxy draws from the reference.", parse=non_negative("seed"), panel="Units"
    )

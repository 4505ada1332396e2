"""mix's settings: checked as they are made, before anything loads (a leaf module: the pipeline and the held-out
sweep both read them)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from infoeval.errors import UsageError, spell
from infoeval.input.fields import group, option
from infoeval.input.request import RunRequest
from infoeval.mixing.problem import parse_sweep
from infoeval.mixing.solve import as_budget
from infoeval.output.destinations import Outputs
from infoeval.quant.schemes import Scheme, SchemeError, parse_scheme
from infoeval.quant.variant_settings import parse_schemes
from infoeval.sensitivities.units import KINDS, block_cache_option, by_option

DEFAULT_MIX_SCHEMES = "int3-g128-asym,int4-g128,int4-g128-asym,int5-g128-asym,int8-channel"


@dataclass(frozen=True)
class MixSettings:
    """mix's own options: the schemes a unit may take, the budget, the units, where the per-unit KLs come from."""

    schemes: tuple[Scheme, ...] = option(  # parsed in __post_init__ (text or a sequence alike)
        DEFAULT_MIX_SCHEMES,
        help="Schemes each unit may take, comma-separated.",
        accepts=str | Sequence[str],
        cli=str,
    )
    budget: str = option(  # bits per weight, or a scheme of --schemes: its exact bits on this model
        "int4-g128",
        keyword="budget_bits",
        flags=("--budget-bits",),
        help="Most stored bits per quantized weight (codes + fp16 scales), or a scheme of --schemes: its exact bits "
        "on this model.",
        accepts=str | float,
        cli=str,
        parse=str,
    )
    by: str = by_option()
    sensitivity: tuple[Path, ...] = option(
        (),
        help="Per-unit KLs from `infoeval sensitivity` JSON (repeatable) instead of sweeping.",
        accepts=Sequence[str | Path],
        cli=list[Path],
        parse=lambda value: tuple(Path(p) for p in value),
    )
    sweep: str | None = option(  # "START:STOP:STEP" budgets for the KL-vs-bits curve
        None, help="Also solve and measure budgets START:STOP:STEP (bits per weight) for the KL-vs-bits curve."
    )
    sweep_tokens: int = option(2048, help="Tokens the sensitivity sweep reads, right after the measured ones.")
    block_cache: bool = block_cache_option()

    def __post_init__(self) -> None:
        object.__setattr__(self, "schemes", parse_schemes(self.schemes, methods=False))  # frozen: parsed once, here
        shipped = [s.name for s in self.schemes if not isinstance(s, Scheme)]
        if shipped:  # its exports (compressed-tensors groups, ggml types) describe integer schemes only
            raise SchemeError(f"{spell('schemes')} {shipped[0]}: mix takes integer schemes only, e.g. int4-g128")
        if self.by not in KINDS:
            raise UsageError(f"{spell('by')} '{self.by}' is not allowed; use one of {', '.join(KINDS)}")
        if self.sweep_tokens < 1:
            raise UsageError(f"{spell('sweep_tokens')} {self.sweep_tokens} is not allowed; it must be at least 1")
        check_budget_text(self.budget, [s.name for s in self.schemes])
        if self.sweep:
            parse_sweep(self.sweep)


@dataclass(frozen=True)
class MixRequest(RunRequest):
    """mix: one scheme per unit for a bits budget, solved from per-unit KLs, then measured on held-out text."""

    mix: MixSettings = group(MixSettings, panel="Mix")


def check_budget_text(text: str, schemes: list[str]) -> None:
    """--budget-bits is bits per weight or a scheme of --schemes (checked before anything is loaded)."""
    try:
        scheme = parse_scheme(text)
    except SchemeError:
        as_budget(text)
        return
    if scheme.name not in schemes:
        raise UsageError(
            f"{spell('budget_bits')} {scheme.name}: name one of {spell('schemes')} ({', '.join(schemes)}) or give bits "
            "per weight"
        )


@dataclass(frozen=True)
class MixOutputs(Outputs):
    """mix's outputs: those of every run, and where the recipe goes."""

    recipe_out: Path | None = option(
        None,
        flags=("--recipe-out",),
        help="Write the recipe TOML here (default: recipe.toml beside the result JSON).",
        parse=Path,
        panel="Output",
    )

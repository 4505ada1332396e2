"""mix's settings: checked as they are made, before anything loads (a leaf module: the pipeline and the held-out
sweep both read them)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from infoeval.errors import UsageError
from infoeval.mixing.problem import parse_sweep
from infoeval.mixing.solve import as_budget
from infoeval.quant.schemes import SchemeError, parse_scheme, parse_schemes

DEFAULT_MIX_SCHEMES = "int3-g128-asym,int4-g128,int4-g128-asym,int5-g128-asym,int8-channel"
KINDS = ("linear", "block", "type")


@dataclass(frozen=True)
class MixSettings:
    schemes: str = DEFAULT_MIX_SCHEMES
    budget: str = "int4-g128"  # bits per weight, or a scheme of --schemes: its exact bits on this model
    by: str = "type"
    sensitivity: tuple[Path, ...] = ()
    sweep: str | None = None  # "START:STOP:STEP" budgets for the KL-vs-bits curve
    sweep_tokens: int = 2048
    block_cache: bool = True

    def __post_init__(self) -> None:
        if self.by not in KINDS:
            raise UsageError(f"--by '{self.by}' is not allowed; use one of {', '.join(KINDS)}")
        if self.sweep_tokens < 1:
            raise UsageError(f"--sweep-tokens {self.sweep_tokens} is not allowed; it must be at least 1")
        names = [s.name for s in parse_schemes(self.schemes)]
        check_budget_text(self.budget, names)
        if self.sweep:
            parse_sweep(self.sweep)


def check_budget_text(text: str, schemes: list[str]) -> None:
    """--budget-bits is bits per weight or a scheme of --schemes (checked before anything is loaded)."""
    try:
        scheme = parse_scheme(text)
    except SchemeError:
        as_budget(text)
        return
    if scheme.name not in schemes:
        raise UsageError(
            f"--budget-bits {scheme.name}: name one of --schemes ({', '.join(schemes)}) or give bits per weight"
        )

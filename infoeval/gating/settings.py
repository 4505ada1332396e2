"""The gate's settings, checked as they are made, before anything loads: the fixed gate's (``GateSettings``) and
the sequential gate's (``SequentialSettings``). A leaf module: the pipelines and their result records all read it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from infoeval.errors import UsageError, spell
from infoeval.gating.limits import Limit
from infoeval.input.fields import option
from infoeval.measure.stopping import check_order
from infoeval.quant.variant_settings import CalibrationSettings, check_floor, one_quantization


@dataclass(frozen=True)
class GateSettings:
    reference: Path
    candidate: str | None  # folder, hub id, .gguf; None: the reference's own model (with --scheme)
    scheme: str | None
    limits: tuple[Limit, ...]
    confidence: float = 0.95
    point: bool = False
    baseline: Path | None = None
    baseline_tolerance: float = 0.05
    recipe: Path | None = None  # a recipe file (quant/recipe.py) applied to the candidate instead of a scheme
    top_k: int = 0  # --topk: both models' k most likely tokens per position in the positions output
    calibration: CalibrationSettings | None = None  # a calibrated --scheme's (autoround:…) calibration text
    floor: str = "sampled"  # the noise floor beside the candidate: sampled, full or off (measure/floor.py)
    floor_seed: int = 0
    # --scheme or --recipe as its spec, parsed once, here (None: the candidate as it is)
    quantization: object = field(default=None, init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "quantization", one_quantization(self.scheme or None, self.recipe))
        check_floor(self.floor)


@dataclass(frozen=True)
class SequentialSettings:
    """The sequential gate's settings (``--sequential``), each option declared here."""

    alpha: float = option(
        0.05,
        help="--sequential: the error level of the verdict, in (0, 0.5): P(false PASS) ≤ alpha and P(false FAIL) ≤ "
        "alpha.",
    )
    min_tokens: int = option(0, help="--sequential: decide nothing before this many scored positions.")
    max_tokens: int | None = option(  # the budget; None: every position of the reference
        None, help="--sequential: the budget in scored positions (default: the whole reference)."
    )
    order: str = option(
        "seeded",
        help="--sequential: the windows' visiting order, seeded (a permutation fixed by --order-seed) or text.",
    )
    seed: int = option(0, keyword="order_seed", help="--sequential: the seed of the visiting order.")
    undecided: str = option(  # the verdict when the budget runs out undecided: fail, or pass (the fixed verdict then)
        "fail",
        help="--sequential: the verdict when the budget runs out undecided: fail, or pass (then the fixed-budget "
        "verdict).",
    )
    round_windows: int = option(
        1,
        help="--sequential: windows per rank evaluated between two decisions (the verdict and the stopping window do "
        "not depend on it).",
    )

    def __post_init__(self) -> None:
        alpha, min_tokens, max_tokens = spell("alpha"), spell("min_tokens"), spell("max_tokens")
        if not (isinstance(self.alpha, (int, float)) and 0.0 < self.alpha < 0.5):
            raise UsageError(f"{alpha} {self.alpha} is not allowed; give an error level in (0, 0.5), e.g. 0.05")
        if self.min_tokens < 0 or (self.max_tokens is not None and self.max_tokens < 1):
            raise UsageError(f"{min_tokens} {self.min_tokens} / {max_tokens} {self.max_tokens}: min ≥ 0 and max ≥ 1")
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            raise UsageError(f"{min_tokens} {self.min_tokens} is more than {max_tokens} {self.max_tokens}")
        check_order(self.order, self.seed)
        if self.undecided not in ("fail", "pass"):
            raise UsageError(f"{spell('undecided')} {self.undecided!r} is not allowed; give fail or pass")
        if self.round_windows < 1:
            raise UsageError(
                f"{spell('round_windows')} {self.round_windows} is not allowed; a round holds at least one window"
            )

"""The gate's settings, checked as they are made, before anything loads: the fixed gate's (``GateSettings``) and
the sequential gate's (``SequentialSettings``). A leaf module: the pipelines and their result records all read it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from infoeval.errors import UsageError
from infoeval.gating.candidate import check_scheme
from infoeval.gating.limits import Limit
from infoeval.measure.stopping import check_order
from infoeval.quant.variant_settings import CalibrationSettings, check_floor


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

    def __post_init__(self) -> None:
        if self.scheme and self.recipe:
            raise UsageError("--scheme and --recipe both quantize the candidate; give one")
        check_scheme(self.scheme)
        check_floor(self.floor)


@dataclass(frozen=True)
class SequentialSettings:
    alpha: float = 0.05
    min_tokens: int = 0
    max_tokens: int | None = None  # the budget; None: every position of the reference
    order: str = "seeded"
    seed: int = 0
    undecided: str = "fail"  # the verdict when the budget runs out undecided: fail, or pass (the fixed verdict then)
    round_windows: int = 1

    def __post_init__(self) -> None:
        if not (isinstance(self.alpha, (int, float)) and 0.0 < self.alpha < 0.5):
            raise UsageError(f"--alpha {self.alpha} is not allowed; give an error level in (0, 0.5), e.g. 0.05")
        if self.min_tokens < 0 or (self.max_tokens is not None and self.max_tokens < 1):
            raise UsageError(f"--min-tokens {self.min_tokens} / --max-tokens {self.max_tokens}: min ≥ 0 and max ≥ 1")
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            raise UsageError(f"--min-tokens {self.min_tokens} is more than --max-tokens {self.max_tokens}")
        check_order(self.order, self.seed)
        if self.undecided not in ("fail", "pass"):
            raise UsageError(f"--undecided {self.undecided!r} is not allowed; give fail or pass")
        if self.round_windows < 1:
            raise UsageError(f"--round-windows {self.round_windows} is not allowed; a round holds at least one window")

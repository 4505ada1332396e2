"""quantize-compare's and compress-bits' typed results: what their JSON holds, read back by ``infoeval.load``."""

from __future__ import annotations

from dataclasses import dataclass

from infoeval.comparison.frames import compress_frame, summary_frame
from infoeval.output.results import Result


@dataclass(frozen=True)
class VariantResult:
    name: str
    metrics: dict[str, float]
    quantization: dict  # the scheme and the per-layer report


@dataclass(frozen=True)
class CompareResult(Result):
    """quantize-compare: the reference's metrics and each variant's."""

    reference: dict[str, float]
    variants: tuple[VariantResult, ...]
    protocol_metrics: dict | None = None  # the lm-eval / gptq protocol's own figures, per model
    # --until-se: the target, whether it was reached, the tokens it took (comparison/until.py)
    until_se: dict | None = None
    floor: dict | None = None  # the noise floor: its windows, metrics, and each variant against it (measure/floor.py)
    paired: dict | None = None  # --baseline: every other variant against it, paired verdicts (measure/paired.py)
    # the bits-per-weight against KL frontier: the Pareto-optimal variants (measure/frontier.py)
    frontier: dict | None = None
    # each variant's mean KL and top-1 by the reference's top-1 probability (measure/confidence.py)
    by_confidence: dict | None = None
    # the plan taken (lockstep or reference-first), why, the memory budget and each plan's estimate (plans.py)
    memory_plan: dict | None = None
    FAMILY = "quantize-compare"
    SUMMARY = staticmethod(summary_frame)
    # without --until-se, with --floor off, without --baseline or a second variant
    OMITTED_WHEN_NONE = ("until_se", "floor", "paired", "frontier", "by_confidence", "memory_plan")


@dataclass(frozen=True)
class CompressBitsResult(Result):
    """compress-bits: the model's code length and each compressor's, on the same bytes."""

    reference: dict[str, float]
    compressors: tuple[dict, ...]
    model_over_xz: float | None
    protocol_metrics: dict | None = None  # the lm-eval / gptq protocol's own figures
    # --until-se: the target, whether it was reached, the tokens it took (comparison/until.py)
    until_se: dict | None = None
    FAMILY = "compress-bits"
    SUMMARY = staticmethod(compress_frame)
    OMITTED_WHEN_NONE = ("until_se",)  # without --until-se, the same record as before

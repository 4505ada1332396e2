"""What quantize-compare and compress-bits are asked, each option declared once (``input.fields``): the command
line's options, the API's keywords and --config's keys are made from these classes. No torch import."""

from __future__ import annotations

from dataclasses import dataclass

from infoeval.errors import UsageError, spell
from infoeval.input.fields import group, non_negative, option
from infoeval.input.request import RunRequest, topk_option
from infoeval.output.destinations import TABLES, Outputs, table_option
from infoeval.quant.variant_settings import VariantSettings

PLANS = ("auto", "lockstep", "reference-first")
STREAMS = ("off", "layers")


@dataclass(frozen=True)
class PlanSettings:
    plan: str = "auto"
    memory_budget_gib: float | None = None  # None: BUDGET_SHARE of the available memory
    stream: str = "off"  # "layers": the layer-streamed plan (``comparison/streamed.py``)

    def __post_init__(self) -> None:
        if self.plan not in PLANS:
            raise UsageError(f"{spell('plan')} {self.plan} is not allowed; give one of {', '.join(PLANS)}")
        if self.stream not in STREAMS:
            raise UsageError(f"{spell('stream')} {self.stream} is not allowed; give one of {', '.join(STREAMS)}")
        if self.stream == "layers" and self.plan != "auto":
            raise UsageError(
                f"{spell('stream')} layers is a plan of its own (each model read one layer at a time); leave out "
                f"{spell('plan')} {self.plan}"
            )
        if self.memory_budget_gib is not None and not self.memory_budget_gib > 0:
            raise UsageError(
                f"{spell('memory_budget')} {self.memory_budget_gib} is not allowed; give a size in GiB above 0"
            )


@dataclass(frozen=True)
class Precision:
    """A run to a precision: windows of the whole text in a seeded order until the watched SE is small enough."""

    until_se: float | None = option(
        None,
        help="Run to a precision: windows of the whole text in a seeded order until the watched standard error is ≤ "
        "this; --max-tokens, when given, is then the budget.",
    )
    order_seed: int | None = option(  # None: 0
        None,
        help="--until-se: the seed of the windows' visiting order.",
        parse=non_negative("order_seed"),
        default_text="0",
    )

    def __post_init__(self) -> None:
        if self.until_se is None and self.order_seed is not None:
            raise UsageError(f"{spell('order_seed')} needs {spell('until_se')}")
        if self.until_se is not None:
            from infoeval.comparison.until import UntilSettings

            UntilSettings(self.until_se, None, self.seed)

    @property
    def seed(self) -> int:
        return self.order_seed or 0


@dataclass(frozen=True)
class Scoring(RunRequest):
    """What quantize-compare and compress-bits share: a run to a precision, and the top tokens kept."""

    precision: Precision = group(Precision, panel="Precision")
    top_k: int = topk_option()

    def until(self):
        """The run to a precision (``UntilSettings``), or None: its budget is --max-tokens where given, else the
        whole text."""
        from infoeval.comparison.until import UntilSettings

        if self.precision.until_se is None:
            return None
        budget = self.text.max_tokens if "max_tokens" in self.given else None
        return UntilSettings(self.precision.until_se, budget, self.precision.seed)


@dataclass(frozen=True)
class CompareRequest(Scoring):
    """quantize-compare: the reference and each variant on the same windows."""

    variants: VariantSettings = group(VariantSettings, panel="Variants")
    baseline: str | None = option(
        None,
        help="A variant of the run (e.g. int4-g128): every other is compared with it on the same positions (mean KL, "
        "P99 KL, top-1, Δ ln PPL: paired difference ± SE, better / worse / not distinguishable).",
        panel="Variants",
    )
    alpha: float | None = option(  # None: 0.05
        None,
        help="--baseline: the verdicts' level, two-sided, Holm across the variants (default 0.05).",
        panel="Variants",
    )
    plan: str = option(
        "auto",
        help="auto (lockstep where its estimated peak fits --memory-budget, else reference-first, else --stream "
        "layers), lockstep (every model at once) or reference-first (the reference's last hidden states first, then "
        "one model at a time).",
        panel="Memory",
    )
    stream: str = option(
        "off",
        help="layers: read each model one decoder layer at a time from its folder's safetensors, over every window "
        "at once (a pass holds one layer and the windows' hidden states: models larger than memory); off: load "
        "models whole.",
        panel="Memory",
    )
    memory_budget: float | None = option(
        None,
        help="GiB the run may take, checked against each plan's estimate before anything loads (default: 90 % of the "
        "memory available: RAM, or the GPU's free memory).",
        panel="Memory",
    )

    def __post_init__(self) -> None:
        self.paired()
        self.plan_settings()

    def paired(self):
        """--baseline's paired verdicts (``PairedSettings``), or None without a baseline; --alpha alone is a usage
        error."""
        from infoeval.measure.paired import PairedSettings

        if self.baseline is None and self.alpha is not None:
            raise UsageError(f"{spell('alpha')} needs {spell('baseline')}: it is the level of the paired verdicts")
        return (
            None if self.baseline is None else PairedSettings(self.baseline, 0.05 if self.alpha is None else self.alpha)
        )

    def plan_settings(self) -> PlanSettings:
        return PlanSettings(self.plan, self.memory_budget, self.stream)


@dataclass(frozen=True)
class CompressRequest(Scoring):
    """compress-bits: the model's code length for the text beside general-purpose compressors."""

    verify_coding: bool = option(
        False,
        flags=("--verify-coding",),
        help="Also compress the scored bytes with the model and a range coder, decompress them, and report the real "
        "file's size (an 'arithmetic-coded' row).",
        panel="Coding",
    )


@dataclass(frozen=True)
class CompareOutputs(Outputs):
    """quantize-compare's outputs: those of every run, and its table's layout."""

    table: str = table_option(
        TABLES,
        "Table layout: default, llama.cpp (llama-perplexity --kl-divergence's statistics block, per variant) or "
        "confidence (mean KL and top-1 by the reference's top-1 probability).",
    )

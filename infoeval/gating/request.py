"""What reference, gate and quantize are asked, each option declared once (``input/fields.py``): the command line's
options, the API's keywords and --config's keys are made from these classes."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from pathlib import Path

from infoeval.errors import UsageError, spell
from infoeval.gating.settings import GateSettings, SequentialSettings
from infoeval.input.fields import given_field, group, one_of, option, optional_path
from infoeval.input.request import RunRequest, topk_option
from infoeval.input.settings import ModelSettings
from infoeval.output.destinations import GATE_TABLES, Outputs, table_option
from infoeval.quant.variant_settings import (
    CalibrationSettings,
    exclude_option,
    floor_option,
    floor_seed_option,
    include_option,
    one_quantization,
)

REFERENCE_FORMATS = ("topk", "hidden")
HEADS = ("stored", "candidate")
CHECKPOINT_FORMATS = ("fake", "pack-quantized", "compressed-tensors", "gguf")


def recipe_option(panel: str):
    """--recipe FILE: a recipe applied to the model instead of one --scheme (gate's candidate, quantize's model)."""
    return option(
        None,
        flags=("--recipe",),
        help="Recipe TOML (unit → scheme, as `infoeval mix` writes) applied instead of one --scheme.",
        accepts=str | Path | None,
        cli=Path,
        parse=optional_path,
        panel=panel,
    )


@dataclass(frozen=True)
class ReferenceRequest(RunRequest):
    """reference: one pass of the reference model writes the file ``gate`` reads."""

    out: Path = option(
        Path("reference.safetensors"),
        flags=("--out", "-o"),
        help="Reference file to write (.safetensors).",
        accepts=str | Path,
        cli=Path,
        parse=Path,
        panel="Reference",
    )
    top_k: int = option(64, help="Most likely tokens kept per position.", panel="Reference")
    tail_samples: int = option(
        128, help="Tokens sampled from the tail per position (unbiased KL; 0: lower bound only).", panel="Reference"
    )
    seed: int = option(0, help="Seed of the tail sampling.", panel="Reference")
    format: str = option(
        "topk",
        flags=("--format",),
        help="topk (compact: top-K log-probs and tail samples; KL estimated) or hidden (the last hidden states and the "
        "head: the reference's logits exactly, 4·hidden bytes a position).",
        parse=one_of("format", REFERENCE_FORMATS),
        panel="Reference",
    )
    head: str = option(
        "stored",
        flags=("--head",),
        help="With --format hidden: stored (the head in the file) or candidate (only its sha256: a gate takes the "
        "candidate's head, which must be the reference's bit for bit).",
        parse=one_of("head", HEADS),
        panel="Reference",
    )
    cache_key: bool = option(
        False,
        flags=("--cache-key",),
        help="Print the key a CI cache keeps this reference under (the model's file hashes, the text's sha256, the "
        "protocol and these settings: the same on any machine) and exit, loading no weights.",
        panel="Reference",
    )


@dataclass(frozen=True)
class Limits:
    """Limits on top of the set (--limits): each None where not given."""

    max_kl_mean: float | None = option(None, help="Limit on mean KL(reference‖candidate), nats.")
    max_kl_p99: float | None = option(None, help="Limit on the 99th percentile of per-position KL, nats.")
    min_top1: float | None = option(None, help="Limit on top-1 agreement (fraction).")
    max_ppl_ratio: float | None = option(None, help="Limit on PPL candidate / PPL reference.")
    max_bpb_increase: float | None = option(None, help="Limit on the bits/byte increase.")


LIMITS = tuple(f.name for f in dataclasses.fields(Limits))


@dataclass(frozen=True)
class GateRequest:
    """gate: the candidate on the reference file's token ids, checked against limits."""

    model: ModelSettings = group(ModelSettings, panel="Candidate", model=None)  # None: the reference's own model
    tokenizer: object = option(
        None, help="The tokenizer of a candidate given as a loaded module (a spec brings its own).", command_line=False
    )
    reference: Path = option(
        Path("reference.safetensors"),
        flags=("--reference", "-r"),
        help="Reference file written by `infoeval reference`.",
        accepts=str | Path,
        cli=Path,
        parse=Path,
        panel="Candidate",
    )
    scheme: str | None = option(
        None,
        help="Quantize the candidate with this scheme first: int8-channel (infoeval's rounding) or a library's, e.g. "
        "hqq:int4-g64.",
        panel="Candidate",
    )
    recipe: Path | None = recipe_option("Candidate")
    calibration: CalibrationSettings = group(CalibrationSettings, panel="Calibration")
    limits: str | None = option(  # not a Path: that would read ./strict as the set strict
        None,
        metavar="NAME|FILE",
        help="A built-in set of limits (default, strict) or a TOML file with a \\[limits] table "
        "(configs/gates/*.toml in the repository show the sets as files).",
        accepts=str | Path | None,
        parse=lambda value: None if value is None else str(value),
        panel="Limits",
    )
    limit_values: Limits = group(Limits, panel="Limits")
    confidence: float = option(0.95, help="One-sided confidence at which limits on means must hold.", panel="Limits")
    point: bool = option(
        False, flags=("--point",), help="Compare point estimates instead of confidence bounds.", panel="Limits"
    )
    baseline: Path | None = option(
        None,
        help="An earlier `gate` run: its run folder (result.json and positions.csv: paired on the same positions, fail "
        "when worse beyond noise) or a result JSON (by --baseline-tolerance).",
        accepts=str | Path | None,
        cli=Path,
        parse=optional_path,
        panel="Limits",
    )
    baseline_tolerance: float = option(0.05, help="Relative tolerance for --baseline.", panel="Limits")
    sequential: bool = option(
        False,
        flags=("--sequential",),
        help="Visit windows in a fixed seeded order and stop as soon as the verdict is certain (anytime-valid "
        "confidence sequences).",
        panel="Sequential",
    )
    sequential_settings: SequentialSettings = group(SequentialSettings, panel="Sequential")
    top_k: int = topk_option()
    floor: str = floor_option()
    floor_seed: int = floor_seed_option()
    progress: bool = option(False, help="A progress bar on stderr.", command_line=False)
    given: frozenset = given_field()
    filed: frozenset = given_field()  # given by a --config file: a sequential setting there waits for --sequential

    def __post_init__(self) -> None:
        asked = [k for k in _SEQUENTIAL if k in self.given - self.filed]
        if not self.sequential and asked:
            raise UsageError(f"{spell(asked[0])} needs {spell('sequential')}")
        self.settings  # noqa: B018  (checked now, before anything loads; kept for the run)

    @functools.cached_property
    def settings(self) -> GateSettings:
        """The fixed gate's settings (the candidate as its spec: a model object is the API's to pass on)."""
        from infoeval.gating.limits import limits_from

        candidate = self.model.model
        return GateSettings(
            self.reference,
            candidate,
            self.scheme,
            limits_from(self.limits, dataclasses.asdict(self.limit_values)),
            self.confidence,
            self.point,
            self.baseline,
            self.baseline_tolerance,
            self.recipe,
            self.top_k,
            self.calibration,
            self.floor,
            self.floor_seed,
        )

    def sequential_gate(self) -> SequentialSettings | None:
        return self.sequential_settings if self.sequential else None


_SEQUENTIAL = ("alpha", "min_tokens", "max_tokens", "order", "order_seed", "undecided", "round_windows")


@dataclass(frozen=True)
class QuantizeRequest:
    """quantize: a fake-quantized (or int4-packed) checkpoint that transformers loads."""

    model: ModelSettings = group(ModelSettings, panel="Model", omit=("device_map",))
    out: Path = option(
        Path("quantized"),
        flags=("--out", "-o"),
        help="Folder to write the checkpoint to (with --format gguf: a .gguf file).",
        accepts=str | Path,
        cli=Path,
        parse=Path,
        panel="Checkpoint",
    )
    scheme: str | None = option(  # None: int8-channel, unless --recipe
        None,
        help="Scheme: int<bits>-channel | int<bits>-g<N> [-asym] | a shipped format (fp8, nvfp4, mxfp4, q4_0, …).",
        default_text="int8-channel",
        panel="Checkpoint",
    )
    recipe: Path | None = recipe_option("Checkpoint")
    include: tuple[str, ...] = include_option()
    exclude: tuple[str, ...] = exclude_option()
    force: bool = option(False, flags=("--force",), help="Replace --out if it exists.", panel="Checkpoint")
    format: str = option(
        "fake",
        flags=("--format",),
        help="fake (dequantized float weights), pack-quantized (real int4 codes, compressed-tensors) or "
        "compressed-tensors (fp8, fp8-tensor, fp8-b128, nvfp4 codes) or gguf (a .gguf model's blocks in q8_0, q4_0, "
        "q4_1, q5_0, q5_1 or gguf-mxfp4; --out a .gguf file).",
        parse=one_of("format", CHECKPOINT_FORMATS),
        panel="Checkpoint",
    )
    given: frozenset = given_field()

    def __post_init__(self) -> None:
        self.quantization  # noqa: B018  (checked now, before anything loads; kept for the run)

    @functools.cached_property
    def quantization(self):
        """--scheme or --recipe, parsed once (the one check that not both are given): the spec, or None."""
        return one_quantization(self.scheme, self.recipe, methods=False)


@dataclass(frozen=True)
class GateOutputs(Outputs):
    """The gate's outputs: those of every run, the CI reports and the table's layout."""

    junit: Path | None = option(None, help="Write JUnit XML here (one testcase per limit).", parse=Path, panel="Output")
    markdown: Path | None = option(
        None, help="Write a markdown summary here (e.g. $GITHUB_STEP_SUMMARY).", parse=Path, panel="Output"
    )
    table: str = table_option(
        GATE_TABLES, "Table layout: default or llama.cpp (llama-perplexity --kl-divergence's statistics block)."
    )

    def __post_init__(self) -> None:
        from infoeval.output.results import check_file_option

        super().__post_init__()
        check_file_option(self.junit, "--junit")
        check_file_option(self.markdown, "--markdown")

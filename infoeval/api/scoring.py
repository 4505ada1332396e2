"""``infoeval.compare`` and ``infoeval.compress_bits``: the commands quantize-compare and compress-bits as functions,
their options as keyword arguments with the command line's defaults; the CLI's commands call them.

    import infoeval
    result = infoeval.compare(schemes=("int8-channel", "int4-g128"), max_tokens=2048)
    result.to_frame()            # summary.csv's table
    result.positions             # positions.csv's table (built when first asked for)
    result.save("results/run")   # what the command line writes

A bad value raises ``infoeval.UsageError`` (or ``DataError`` for bad text) with one line, before anything loads
where it can be checked then.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from infoeval.api.checks import RUN_TYPES, checked
from infoeval.errors import UsageError, keyword_errors
from infoeval.input.settings import (
    DEFAULT_MODEL,
    DEFAULT_PROTOCOL,
    CalibrationSettings,
    ModelSettings,
    TextSettings,
    VariantSettings,
    WindowSettings,
    default_ctx,
    max_tokens_of,
)
from infoeval.quant.schemes import DEFAULT_SCHEMES

SCHEMES = tuple(DEFAULT_SCHEMES.split(","))
MAX_TOKENS = 8192  # the command line's --max-tokens default


def run_settings(
    model: str,
    *,
    text=None,
    dataset=None,
    data_dir=None,
    max_tokens=MAX_TOKENS,
    ctx=None,
    stride=None,
    protocol=DEFAULT_PROTOCOL,
    prefix="auto",
    documents=None,
    document_field="text",
    device="auto",
    dtype="auto",
    device_map=None,
) -> tuple[ModelSettings, TextSettings, WindowSettings]:
    """The model, text and window settings of a run, from the keyword arguments every scoring command takes."""
    model_settings = ModelSettings(model=model, device=device, dtype=dtype, device_map=device_map)
    text_settings = TextSettings(
        text=None if text is None else Path(text),
        dataset=dataset,
        data_dir=None if data_dir is None else Path(data_dir),
        max_tokens=max_tokens_of(max_tokens),
        documents=documents,
        document_field=document_field,
    )
    window = WindowSettings(
        ctx=ctx if ctx is not None else default_ctx(protocol), stride=stride, protocol=protocol, prefix=prefix
    )
    return model_settings, text_settings, window


def comma_list(value) -> str:
    """A list keyword as the command line's comma-separated text: a string as it is, one number, or a sequence."""
    return (
        value
        if isinstance(value, str)
        else str(value)
        if isinstance(value, (int, float))
        else ",".join(map(str, value))
    )


def prepared(model, tokenizer, run: dict):
    """The model (a spec, or a ``ModelObject`` of a loaded model and its ``tokenizer``) and the model, text and window
    settings of a run (``run``: the run keywords; device and dtype 'auto' are a model object's own)."""
    from infoeval.models.objects import model_object, own_settings

    model = model_object(model, tokenizer)
    return model, run_settings(model, **own_settings(model, _checked(run)))


def _reporter(progress: bool):
    from infoeval.output.report import RichReporter

    return RichReporter(enabled=progress)


RUN_KEYWORDS = tuple(RUN_TYPES)  # the keywords of run_settings


def _checked(run: dict) -> dict:
    """The text, window and device keywords, or a usage error naming the unknown one and the allowed ones."""
    unknown = sorted(set(run) - set(RUN_KEYWORDS))
    if unknown:
        raise UsageError(
            f"unknown keyword '{unknown[0]}'; allowed besides the command's own: {', '.join(RUN_KEYWORDS)}"
        )
    return run


def _until(until_se: float | None, run: dict, order_seed: int):
    """A run to a precision: its budget is ``max_tokens`` where given, else the whole text (as --until-se's)."""
    from infoeval.comparison.until import UntilSettings

    return None if until_se is None else UntilSettings(until_se, max_tokens_of(run.get("max_tokens")), order_seed)


def _scheme_text(schemes, recipes, variants, checkpoints=()) -> str:
    """The schemes as --schemes' text; None: the three default schemes, or none when recipes, variants or
    checkpoints are given (as --recipe alone on the command line)."""
    if schemes is None:
        schemes = () if recipes or variants or checkpoints else SCHEMES
    return comma_list(schemes)


def _paired(baseline: str | None, alpha: float | None):
    """--baseline's paired verdicts at ``alpha`` (default 0.05), or None without a baseline; ``alpha`` alone is a
    usage error."""
    from infoeval.measure.paired import PairedSettings

    if baseline is None and alpha is not None:
        raise UsageError("--alpha needs --baseline: it is the level of the paired verdicts")
    return None if baseline is None else PairedSettings(baseline, 0.05 if alpha is None else alpha)


def _variants(
    schemes, variants, recipes, checkpoints, include, exclude, calibration, floor, floor_seed
) -> tuple[VariantSettings, list]:
    """``compare``'s variant keywords as the command line's settings, and the caller's modules (``variants``), each
    checked against the schemes' and recipes' names."""
    from infoeval.models.objects import module_variants

    scheme_text = _scheme_text(schemes, recipes, variants, checkpoints)
    modules = module_variants(variants, {s.strip() for s in scheme_text.split(",")} | {Path(r).stem for r in recipes})
    variant_settings = VariantSettings(
        schemes=scheme_text,
        include=tuple(include),
        exclude=tuple(exclude),
        recipes=tuple(Path(r) for r in recipes),
        calibration=calibration or CalibrationSettings(),
        floor=floor,
        floor_seed=floor_seed,
        checkpoints=tuple(str(c) for c in checkpoints),
    )
    return variant_settings, modules


@keyword_errors
@checked
def compare(
    model: str | object = DEFAULT_MODEL,
    *,
    tokenizer=None,
    schemes: str | Sequence[str] | None = None,
    variants: dict | None = None,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    recipes: Sequence[str | Path] = (),
    floor: str = "sampled",
    floor_seed: int = 0,
    checkpoints: Sequence[str | Path] = (),
    calibration: CalibrationSettings | None = None,
    until_se: float | None = None,
    order_seed: int = 0,
    top_k: int = 0,
    baseline: str | None = None,
    alpha: float | None = None,
    plan: str = "auto",
    memory_budget: float | None = None,
    progress: bool = False,
    **run,
):
    """quantize-compare: the reference and each variant (``schemes``, ``recipes``, ``checkpoints``: saved folders,
    .gguf files or hub ids, and ``variants``: name → a module you built, sharing the reference's tokenizer) on the
    same windows; returns the ``CompareResult`` holding its
    per-position table. ``model``: a spec string, or a loaded transformers model with its ``tokenizer`` (used where
    it is; ``device``/``dtype`` 'auto' mean its own). ``run``: the text, window and device keywords of
    ``run_settings`` (``text``, ``dataset``, ``max_tokens``, ``ctx``, ``protocol``, ``device``, ``dtype``, …); with
    ``until_se``, ``max_tokens`` is the budget of the run to a precision (None: the whole text). ``baseline``: one of
    the variants; every other is compared with it on the same positions, verdicts at ``alpha`` (default 0.05;
    ``result.paired``). ``plan``: "auto", "lockstep" or "reference-first", chosen against ``memory_budget`` (GiB;
    None: 90 % of the memory available) before anything loads (``result.memory_plan``)."""
    from infoeval.comparison import pipeline
    from infoeval.comparison.frames import positions_frame
    from infoeval.comparison.plans import PlanSettings
    from infoeval.models.objects import evaluating

    paired = _paired(baseline, alpha)
    plan_settings = PlanSettings(plan, memory_budget)
    reference, (model_settings, text_settings, window_settings) = prepared(model, tokenizer, run)
    variant_settings, modules = _variants(
        schemes, variants, recipes, checkpoints, include, exclude, calibration, floor, floor_seed
    )
    with evaluating(reference, *modules):
        result, cols = pipeline.quantize_compare(
            model_settings,
            text_settings,
            window_settings,
            variant_settings,
            _reporter(progress),
            _until(until_se, run, order_seed),
            top_k,
            modules,
            paired,
            plan_settings,
        )
    return result.with_positions(lambda: positions_frame(cols.reference, cols.variants), cols)


@keyword_errors
@checked
def compress_bits(
    model: str | object = DEFAULT_MODEL,
    *,
    tokenizer=None,
    verify_coding: bool = False,
    until_se: float | None = None,
    order_seed: int = 0,
    top_k: int = 0,
    progress: bool = False,
    **run,
):
    """compress-bits: the model's code length for the text beside gzip, bz2, xz and zstd on the same bytes (and with
    ``verify_coding`` a real arithmetic-coded file of them); returns the ``CompressResult`` with its positions.
    ``model``: a spec string, or a loaded model with its ``tokenizer`` (as ``compare``'s)."""
    from infoeval.comparison import pipeline
    from infoeval.comparison.frames import positions_frame
    from infoeval.models.objects import evaluating

    reference, (model_settings, text_settings, window_settings) = prepared(model, tokenizer, run)
    with evaluating(reference):
        result, cols = pipeline.compress_bits(
            model_settings,
            text_settings,
            window_settings,
            _reporter(progress),
            verify_coding=verify_coding,
            until=_until(until_se, run, order_seed),
            top_k=top_k,
        )
    return result.with_positions(lambda: positions_frame(cols.reference, {}), cols)

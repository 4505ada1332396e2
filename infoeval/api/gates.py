"""The CI gate as functions: ``infoeval.reference`` (the reference file), ``infoeval.gate`` (a candidate against it,
fixed or sequential) and ``infoeval.quantize`` (a fake-quantized checkpoint); the CLI's commands call them.

    import infoeval
    infoeval.reference("smollm2-135m", out="ref.safetensors", max_tokens=4096)
    result = infoeval.gate(reference="ref.safetensors", scheme="int8-channel", max_kl_mean=0.01)
    result.passed, result.to_frame()
"""

from __future__ import annotations

from pathlib import Path

from infoeval.api.checks import checked
from infoeval.api.scoring import _reporter, prepared
from infoeval.errors import UsageError, keyword_errors
from infoeval.input.settings import DEFAULT_MODEL, ModelSettings
from infoeval.quant.variant_settings import CalibrationSettings

SEQUENTIAL = (
    "alpha",
    "min_tokens",
    "max_tokens",
    "order",
    "order_seed",
    "undecided",
    "round_windows",
)  # SequentialSettings' fields, in order
LIMITS = ("max_kl_mean", "max_kl_p99", "min_top1", "max_ppl_ratio", "max_bpb_increase")


@keyword_errors
@checked
def reference(
    model: str | object = DEFAULT_MODEL,
    *,
    tokenizer=None,
    out: str | Path = "reference.safetensors",
    top_k: int = 64,
    tail_samples: int = 128,
    seed: int = 0,
    format: str = "topk",
    head: str = "stored",
    progress: bool = False,
    **run,
):
    """reference: one pass of the reference model writes the reference file ``out`` that ``gate`` reads (``format``
    "topk": top-K log-probs, tail mass and samples per scored position; "hidden": the last hidden states and the
    head, or with ``head="candidate"`` only its sha256; the windows' token ids, provenance); returns its
    ``ReferenceResult``. ``run``: the text, window and device keywords (as ``compare``'s)."""
    from infoeval.gating.pipeline import build_reference
    from infoeval.models.objects import evaluating

    model, (model_settings, text_settings, window_settings) = prepared(model, tokenizer, run)
    with evaluating(model):
        return build_reference(
            model_settings,
            text_settings,
            window_settings,
            Path(out),
            top_k,
            tail_samples,
            seed,
            _reporter(progress),
            format,
            head,
        )


def _sequential(sequential: bool, options: dict):
    """The sequential gate's settings from ``options`` (SequentialSettings' defaults for those not given; the keyword
    order_seed is its seed), or None; one of them given without ``sequential`` is a usage error."""
    import dataclasses

    from infoeval.gating.settings import SequentialSettings

    given = [k for k in SEQUENTIAL if k in options]
    if not sequential:
        if given:
            raise UsageError(f"--{given[0].replace('_', '-')} needs --sequential")
        return None
    defaults = dict(zip(SEQUENTIAL, (f.default for f in dataclasses.fields(SequentialSettings))))
    return SequentialSettings(*(options.get(k, default) for k, default in defaults.items()))


def _candidate(candidate, tokenizer, scheme: str | None, recipe, options: dict):
    """The gate's candidate (None, a spec, or a model object with its ``tokenizer``) once the keywords are known to
    be limits or sequential settings; a model object is not quantized again in place (``scheme``, ``recipe``)."""
    from infoeval.models.objects import ModelObject, model_object

    unknown = sorted(set(options) - set(LIMITS) - set(SEQUENTIAL))
    if unknown:
        raise UsageError(
            f"unknown keyword '{unknown[0]}'; allowed besides the gate's own: {', '.join(LIMITS + SEQUENTIAL)}"
        )
    candidate = None if candidate is None else model_object(candidate, tokenizer, what="candidate")
    if isinstance(candidate, ModelObject) and (scheme or recipe):
        raise UsageError(
            "--scheme and --recipe quantize the candidate in place; give a candidate object already quantized, "
            "or a spec"
        )
    return candidate


def _run(candidate, settings, seq, devices: dict, progress: bool) -> tuple:
    """Run the fixed gate (``seq`` None) or the sequential one on ``candidate`` with the device keywords ``devices``
    ('auto': a model object's own); returns (result, per-position columns)."""
    from infoeval.gating.pipeline import run_gate
    from infoeval.models.objects import evaluating, own_settings

    model_settings = ModelSettings(candidate or "", **own_settings(candidate, devices))
    with evaluating(candidate):
        if seq is None:
            return run_gate(settings, model_settings, _reporter(progress))
        from infoeval.gating.sequential_gate import run_sequential_gate

        return run_sequential_gate(settings, seq, model_settings, _reporter(progress))


@keyword_errors
@checked
def gate(
    candidate: str | object | None = None,
    *,
    tokenizer=None,
    reference: str | Path = "reference.safetensors",
    scheme: str | None = None,
    recipe: str | Path | None = None,
    limits: str | Path | None = None,
    confidence: float = 0.95,
    point: bool = False,
    baseline: str | Path | None = None,
    baseline_tolerance: float = 0.05,
    sequential: bool = False,
    top_k: int = 0,
    floor: str = "sampled",
    floor_seed: int = 0,
    calibration: CalibrationSettings | None = None,
    device: str = "auto",
    dtype: str = "auto",
    device_map: str | None = None,
    progress: bool = False,
    **options,
):
    """gate: the candidate (a spec, a loaded model with its ``tokenizer``, or None: the reference's own model, with
    ``scheme`` or ``recipe``) on the reference file's token ids, checked against the limits (the defaults, a built-in
    set's name: ``limits="strict"``, or a TOML ``limits`` file; and ``max_kl_mean=`` … ``max_bpb_increase=`` on
    top); ``sequential=True`` visits windows in a seeded order and stops when the verdict is certain (``alpha``,
    ``min_tokens``, ``max_tokens``, ``order``, ``order_seed``, ``undecided``, ``round_windows``). Returns the
    ``GateResult`` (``passed``) with its positions."""
    from infoeval.gating.limits import limits_from
    from infoeval.gating.positions import positions_frame
    from infoeval.gating.settings import GateSettings

    candidate = _candidate(candidate, tokenizer, scheme, recipe, options)
    seq = _sequential(sequential, options)
    settings = GateSettings(
        Path(reference),
        candidate,
        scheme,
        limits_from(limits, {k: options.get(k) for k in LIMITS}),
        confidence,
        point,
        None if baseline is None else Path(baseline),
        baseline_tolerance,
        None if recipe is None else Path(recipe),
        top_k,
        calibration,
        floor,
        floor_seed,
    )
    result, cols = _run(
        candidate, settings, seq, {"device": device, "dtype": dtype, "device_map": device_map}, progress
    )
    return result.with_positions(lambda: positions_frame(cols), cols)


@keyword_errors
@checked
def quantize(
    model: str = DEFAULT_MODEL,
    *,
    out: str | Path = "quantized",
    scheme: str | None = None,
    recipe: str | Path | None = None,
    include=(),
    exclude=(),
    force: bool = False,
    format: str = "fake",
    device: str = "auto",
    dtype: str = "auto",
) -> dict:
    """quantize: write a fake-quantized (or, ``format="pack-quantized"``, int4-packed) checkpoint that transformers
    loads, with a per-layer report; ``scheme`` (default int8-channel) or a ``recipe``; returns what was written
    (scheme, layers, SQNR)."""
    from infoeval.gating.checkpoint import quantize_checkpoint

    if scheme is not None and recipe is not None:
        raise UsageError("--scheme and --recipe both say how to quantize; give one")

    model_settings = ModelSettings(model=model, device=device, dtype=dtype)
    return quantize_checkpoint(
        model_settings,
        scheme or "int8-channel",
        Path(out),
        tuple(include),
        tuple(exclude),
        force,
        format,
        None if recipe is None else Path(recipe),
    )

"""The CI gate as functions: ``infoeval.reference`` (the reference file), ``infoeval.gate`` (a candidate against it,
fixed or sequential) and ``infoeval.quantize`` (a fake-quantized checkpoint); the CLI's commands call them.

    import infoeval
    infoeval.reference("smollm2-135m", out="ref.safetensors", max_tokens=4096)
    result = infoeval.gate(reference="ref.safetensors", scheme="int8-channel", max_kl_mean=0.01)
    result.passed, result.to_frame()
"""

from __future__ import annotations

from infoeval.api.requests import takes
from infoeval.api.scoring import _reporter, _run
from infoeval.errors import UsageError, spell
from infoeval.gating.request import (
    LIMITS,  # noqa: F401  (re-exported)
    GateRequest,
    QuantizeRequest,
    ReferenceRequest,
)
from infoeval.quant.recipe import Recipe


@takes(ReferenceRequest, "reference")
def reference(request: ReferenceRequest):
    """reference: one pass of the reference model writes the reference file ``out`` that ``gate`` reads (``format``
    "topk": top-K log-probs, tail mass and samples per scored position; "hidden": the last hidden states and the
    head, or with ``head="candidate"`` only its sha256; the windows' token ids, provenance); returns its
    ``ReferenceResult`` (with ``cache_key=True``: only the ``CacheKey`` it would be cached under, nothing loaded).
    Called with the keywords of ``ReferenceRequest`` (the text, window and device keywords as ``compare``'s), a
    request, or ``config=``."""
    from infoeval.gating.gate import build_reference

    if request.cache_key:
        from infoeval.gating.cache_key import CacheKey

        return CacheKey.of(request)
    return _run(
        request,
        build_reference,
        request.out,
        request.top_k,
        request.tail_samples,
        request.seed,
        _reporter(request.progress),
        request.format,
        request.head,
    )


def _candidate(request: GateRequest):
    """The gate's candidate (None, a spec, or a model object with its ``tokenizer``); a model object is not quantized
    again in place (``scheme``, ``recipe``)."""
    from infoeval.models.objects import ModelObject, model_object

    candidate, tokenizer = request.model.model, request.tokenizer
    candidate = None if candidate is None else model_object(candidate, tokenizer, what="candidate")
    if isinstance(candidate, ModelObject) and (request.scheme or request.recipe):
        raise UsageError(
            f"{spell('scheme')} and {spell('recipe')} quantize the candidate in place; give a candidate object "
            "already quantized, "
            "or a spec"
        )
    return candidate


@takes(GateRequest, "gate", first="candidate")
def gate(request: GateRequest):
    """gate: the candidate (a spec, a loaded model with its ``tokenizer``, or None: the reference's own model, with
    ``scheme`` or ``recipe``) on the reference file's token ids, checked against the limits (the defaults, a built-in
    set's name: ``limits="strict"``, or a TOML ``limits`` file; and ``max_kl_mean=`` … ``max_bpb_increase=`` on
    top); ``sequential=True`` visits windows in a seeded order and stops when the verdict is certain (``alpha``,
    ``min_tokens``, ``max_tokens``, ``order``, ``order_seed``, ``undecided``, ``round_windows``). Returns the
    ``GateResult`` (``passed``) with its positions. Called with the keywords of ``GateRequest``, a request, or
    ``config=``."""
    import dataclasses

    from infoeval.gating.gate import run_gate
    from infoeval.gating.positions import positions_frame
    from infoeval.models.objects import evaluating, own_settings

    candidate = _candidate(request)
    settings = dataclasses.replace(request.settings, candidate=candidate)
    devices = {"device": request.model.device, "dtype": request.model.dtype, "device_map": request.model.device_map}
    model_settings = dataclasses.replace(request.model, model=candidate or "", **own_settings(candidate, devices))
    reporter = _reporter(request.progress)
    with evaluating(candidate):
        if request.sequential_gate() is None:
            result, cols = run_gate(settings, model_settings, reporter)
        else:
            from infoeval.gating.sequential_gate import run_sequential_gate

            result, cols = run_sequential_gate(settings, request.sequential_gate(), model_settings, reporter)
    return result.with_positions(lambda: positions_frame(cols), cols)


@takes(QuantizeRequest, "quantize")
def quantize(request: QuantizeRequest) -> dict:
    """quantize: write a fake-quantized (or, ``format="pack-quantized"``, int4-packed) checkpoint that transformers
    loads, with a per-layer report; ``scheme`` (default int8-channel) or a ``recipe``; returns what was written
    (scheme, layers, SQNR)."""
    from infoeval.gating.checkpoint import quantize_checkpoint

    spec = request.quantization  # parsed once, by the request
    recipe = spec if isinstance(spec, Recipe) else None
    return quantize_checkpoint(
        request.model,
        spec if spec is not None and recipe is None else "int8-channel",
        request.out,
        request.include,
        request.exclude,
        request.force,
        request.format,
        recipe,
    )

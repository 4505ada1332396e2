"""Drafts, students and temperature as functions: ``infoeval.spec_accept``, ``distill``, ``spec_decode`` and
``temperature``; the CLI's commands call them. A draft (student) is another model sharing the target's tokenizer
(a spec, or a loaded model with ``draft_tokenizer=``), the target fake-quantized (``draft_scheme``) or its first
N decoder layers (``draft_layers``).

    import infoeval
    a = infoeval.spec_accept(draft_scheme="int4-channel", temperature=(0.5, 1, 2))
    d = infoeval.distill(student_layers=20, temperature=(1, 2, 4, 8), alpha=0.1)
"""

from __future__ import annotations

from infoeval.api.requests import takes
from infoeval.api.scoring import _prepared, _reporter
from infoeval.errors import UsageError
from infoeval.speculative.request import DistillRequest, SpecAcceptRequest, SpecDecodeRequest, TemperatureRequest


@takes(SpecAcceptRequest, "spec-accept")
def spec_accept(request: SpecAcceptRequest):
    """spec-accept: how well the draft q would draft for the target p (``model``), per position and at each
    temperature: acceptance β = Σ min(p, q), KL(p‖q), Pinsker, acceptance by entropy quartile, top-1 runs and
    expected tokens per target call; returns the ``AcceptResult`` with its positions. Called with the keywords of
    ``SpecAcceptRequest``, a request, or ``config=``."""
    from infoeval.models.objects import evaluating
    from infoeval.speculative.accept import positions_frame
    from infoeval.speculative.accept import spec_accept as run_accept

    drafts = request.draft.settings()
    model, model_settings = _prepared(request)
    with evaluating(model, drafts.model):
        result, cols = run_accept(
            model_settings, request.text, request.window, drafts, request.temperature, _reporter(request.progress)
        )
    return result.with_positions(lambda: positions_frame(cols), cols)


@takes(DistillRequest, "distill")
def distill(request: DistillRequest):
    """distill: the distillation terms of teacher p (``model``) and student q per temperature: hard CE, KL(p_T‖q_T),
    T²·KL and the loss α·CE + (1 − α)·T²·KL, the teacher's entropy and tail mass, the soft gradient's norm with and
    without T²; returns the ``DistillResult`` with its positions."""
    from infoeval.models.objects import evaluating
    from infoeval.speculative.distill import distill as run_distill
    from infoeval.speculative.distill import positions_frame

    students = request.student.settings()
    model, model_settings = _prepared(request)
    with evaluating(model, students.model):
        result, cols = run_distill(
            model_settings,
            request.text,
            request.window,
            students,
            request.temperature,
            request.alpha,
            _reporter(request.progress),
        )
    return result.with_positions(lambda: positions_frame(cols), cols)


@takes(SpecDecodeRequest, "spec-decode")
def spec_decode(request: SpecDecodeRequest):
    """spec-decode: speculative sampling with KV caches (the draft proposes ``gamma`` tokens, the target verifies
    them in one pass) against plain sampling from the target: acceptance, tokens per target call, wall time and
    speed-up; returns the ``DecodeResult`` with one row per round as its positions."""
    from infoeval.models.objects import evaluating
    from infoeval.speculative.generate import rounds_frame
    from infoeval.speculative.generate import spec_decode as run_decode

    drafts = request.draft.settings()
    model, model_settings = _prepared(request)
    with evaluating(model, drafts.model):
        result, spec = run_decode(
            model_settings,
            drafts,
            request.prompt,
            request.gamma,
            request.max_new_tokens,
            request.temperature,
            request.seed,
            request.repeats,
            request.verify,
            _reporter(request.progress),
        )
    return result.with_positions(lambda: rounds_frame(spec), spec)


@takes(TemperatureRequest, "temperature", first="logits")
def temperature(request: TemperatureRequest):
    """temperature: softmax(z/T) per class, the top probability, tail mass and entropy in bits at each temperature,
    for ``logits`` given by hand (with ``labels``) or a model's next-token logits after ``prompt``; returns the
    ``TemperatureResult``."""
    from infoeval.errors import spell
    from infoeval.speculative.temperature import parse_logits, temperature_table

    logits, labels, model, prompt = request.logits, request.labels, request.model.model, request.prompt
    if (logits is None) == (model is None):
        raise UsageError(
            f"give either {spell('logits')} Z,Z,... (optionally {spell('labels')}) or {spell('model')} M "
            f"{spell('prompt')} TEXT"
        )
    if model is None:
        if prompt is not None:
            raise UsageError(f"{spell('prompt')} goes with {spell('model')}; with {spell('logits')} there is no prompt")
        return temperature_table(request.temperature, logits=parse_logits(logits), labels=labels)
    if prompt is None:
        raise UsageError(f"{spell('model')} needs {spell('prompt')} TEXT (the next-token logits after it are shown)")
    if labels is not None:
        raise UsageError(
            f"{spell('labels')} goes with {spell('logits')}; with {spell('model')} the tokens are the labels"
        )
    from infoeval.models import load_model, resolve_device, resolve_dtype

    dev = resolve_device(request.model.device)
    loaded = load_model(model, dev, resolve_dtype(request.model.dtype, dev))
    return temperature_table(request.temperature, loaded=loaded, prompt=prompt, top=request.top)

"""Drafts, students and temperature as functions: ``infoeval.spec_accept``, ``distill``, ``spec_decode`` and
``temperature``; the CLI's commands call them. A draft (student) is another model sharing the target's tokenizer
(a spec, or a loaded model with ``draft_tokenizer=``), the target fake-quantized (``draft_scheme``) or its first
N decoder layers (``draft_layers``).

    import infoeval
    a = infoeval.spec_accept(draft_scheme="int4-channel", temperature=(0.5, 1, 2))
    d = infoeval.distill(student_layers=20, temperature=(1, 2, 4, 8), alpha=0.1)
"""

from __future__ import annotations

from collections.abc import Sequence

from infoeval.api.checks import checked
from infoeval.api.scoring import _reporter, comma_list, prepared
from infoeval.errors import keyword_errors
from infoeval.input.settings import DEFAULT_MODEL, ModelSettings


def _temps(value: str | float | Sequence[float], option: str) -> tuple[float, ...]:
    from infoeval.speculative.accept import parse_temperatures

    return parse_temperatures(comma_list(value), option)


def _second(model, tokenizer, role: str, scheme, layers):
    """The draft/student settings: a spec or a model object (with its tokenizer), a scheme, or N layers."""
    from infoeval.models.objects import model_object
    from infoeval.speculative.drafts import DraftSettings

    other = None if model is None else model_object(model, tokenizer, what=role)
    return DraftSettings(other, scheme, layers, role=role)


@keyword_errors
@checked
def spec_accept(
    model: str | object = DEFAULT_MODEL,
    *,
    tokenizer=None,
    draft: str | object | None = None,
    draft_tokenizer=None,
    draft_scheme: str | None = None,
    draft_layers: int | None = None,
    temperature: str | float | Sequence[float] = "1",
    progress: bool = False,
    **run,
):
    """spec-accept: how well the draft q would draft for the target p (``model``), per position and at each
    temperature: acceptance β = Σ min(p, q), KL(p‖q), Pinsker, acceptance by entropy quartile, top-1 runs and
    expected tokens per target call; returns the ``AcceptResult`` with its positions."""
    from infoeval.models.objects import evaluating
    from infoeval.speculative.accept import positions_frame
    from infoeval.speculative.accept import spec_accept as run_accept

    temps = _temps(temperature, "--temperature")
    drafts = _second(draft, draft_tokenizer, "draft", draft_scheme, draft_layers)
    model, (model_settings, text_settings, window_settings) = prepared(model, tokenizer, run)
    with evaluating(model, drafts.model):
        result, cols = run_accept(model_settings, text_settings, window_settings, drafts, temps, _reporter(progress))
    return result.with_positions(lambda: positions_frame(cols), cols)


@keyword_errors
@checked
def distill(
    model: str | object = DEFAULT_MODEL,
    *,
    tokenizer=None,
    student: str | object | None = None,
    student_tokenizer=None,
    student_scheme: str | None = None,
    student_layers: int | None = None,
    temperature: str | float | Sequence[float] = "1,2,4,8",
    alpha: float = 0.1,
    progress: bool = False,
    **run,
):
    """distill: the distillation terms of teacher p (``model``) and student q per temperature: hard CE, KL(p_T‖q_T),
    T²·KL and the loss α·CE + (1 − α)·T²·KL, the teacher's entropy and tail mass, the soft gradient's norm with and
    without T²; returns the ``DistillResult`` with its positions."""
    from infoeval.models.objects import evaluating
    from infoeval.speculative.distill import distill as run_distill
    from infoeval.speculative.distill import positions_frame

    temps = _temps(temperature, "--T")
    students = _second(student, student_tokenizer, "student", student_scheme, student_layers)
    model, (model_settings, text_settings, window_settings) = prepared(model, tokenizer, run)
    with evaluating(model, students.model):
        result, cols = run_distill(
            model_settings, text_settings, window_settings, students, temps, alpha, _reporter(progress)
        )
    return result.with_positions(lambda: positions_frame(cols), cols)


@keyword_errors
@checked
def spec_decode(
    model: str | object = DEFAULT_MODEL,
    *,
    tokenizer=None,
    draft: str | object | None = None,
    draft_tokenizer=None,
    draft_scheme: str | None = None,
    draft_layers: int | None = None,
    prompt: str = "Once upon a time",
    gamma: int = 4,
    max_new_tokens: int = 64,
    temperature: float = 1.0,
    seed: int = 0,
    repeats: int = 1,
    verify: int = 0,
    device: str = "auto",
    dtype: str = "auto",
    device_map: str | None = None,
    progress: bool = False,
):
    """spec-decode: speculative sampling with KV caches (the draft proposes ``gamma`` tokens, the target verifies
    them in one pass) against plain sampling from the target: acceptance, tokens per target call, wall time and
    speed-up; returns the ``DecodeResult`` with one row per round as its positions."""
    from infoeval.models.objects import evaluating, model_object, own_settings
    from infoeval.speculative.generate import rounds_frame
    from infoeval.speculative.generate import spec_decode as run_decode

    drafts = _second(draft, draft_tokenizer, "draft", draft_scheme, draft_layers)
    model = model_object(model, tokenizer)
    model_settings = ModelSettings(
        model, **own_settings(model, {"device": device, "dtype": dtype, "device_map": device_map})
    )
    with evaluating(model, drafts.model):
        result, spec = run_decode(
            model_settings,
            drafts,
            prompt,
            gamma,
            max_new_tokens,
            temperature,
            seed,
            repeats,
            verify,
            _reporter(progress),
        )
    return result.with_positions(lambda: rounds_frame(spec), spec)


@keyword_errors
@checked
def temperature(
    logits: str | Sequence[float] | None = None,
    *,
    labels: str | Sequence[str] | None = None,
    model: str | None = None,
    prompt: str | None = None,
    top: int = 8,
    temperature: str | float | Sequence[float] = "0.25,0.5,1,2,4",
    device: str = "auto",
    dtype: str = "auto",
):
    """temperature: softmax(z/T) per class, the top probability, tail mass and entropy in bits at each temperature,
    for ``logits`` given by hand (with ``labels``) or a model's next-token logits after ``prompt``; returns the
    ``TemperatureResult``."""
    from infoeval.errors import UsageError
    from infoeval.speculative.temperature import parse_logits, temperature_table

    temps = _temps(temperature, "--T")
    if (logits is None) == (model is None):
        raise UsageError("give either --logits Z,Z,... (optionally --labels) or --model M --prompt TEXT")
    if model is None:
        if prompt is not None:
            raise UsageError("--prompt goes with --model; with --logits there is no prompt")
        return temperature_table(
            temps, logits=parse_logits(comma_list(logits)), labels=None if labels is None else comma_list(labels)
        )
    if prompt is None:
        raise UsageError("--model needs --prompt TEXT (the next-token logits after it are shown)")
    if labels is not None:
        raise UsageError("--labels goes with --logits; with --model the tokens are the labels")
    from infoeval.models import load_model, resolve_device, resolve_dtype

    dev = resolve_device(device)
    return temperature_table(temps, loaded=load_model(model, dev, resolve_dtype(dtype, dev)), prompt=prompt, top=top)

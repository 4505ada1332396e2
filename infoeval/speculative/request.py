"""What spec-accept, spec-decode, distill and temperature are asked, each option declared once (``input/fields.py``).
The second model (the draft, or the student) is one declaration for both roles (``second_model``): another model,
the first model fake-quantized, or its first N decoder layers."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from infoeval.errors import spell
from infoeval.input.fields import at_least, given_field, group, names, option
from infoeval.input.request import RunRequest
from infoeval.input.settings import ModelSettings

TEMPERATURE_FLAGS = ("--temperature", "--T", "--temperatures")  # every spelling, on every command with temperatures
TEMPERATURE_ALIASES = ("temperatures", "T")  # --config keys for it


def temperatures_option(default: str, help: str):
    """--temperature T,T,...: temperatures > 0, parsed once (text, one number or a sequence alike)."""

    def parse(value) -> tuple[float, ...]:
        from infoeval.speculative.accept import parse_temperatures

        text = (
            value
            if isinstance(value, str)
            else str(value)
            if isinstance(value, (int, float))
            else ",".join(map(str, value))
        )
        return parse_temperatures(text, spell("temperature"))

    return option(
        parse(default),
        help=help,
        flags=TEMPERATURE_FLAGS,
        accepts=str | float | Sequence[float],
        cli=str,
        parse=parse,
        default_text=default,
        aliases=TEMPERATURE_ALIASES,
    )


def second_model(role: str, of: str, example: str) -> type:
    """The second model's options for ``role`` (draft or student): --ROLE MODEL, --ROLE-scheme SCHEME or
    --ROLE-layers N (exactly one), declared here once for both roles; ``of``: whose variant it is."""
    name = role.capitalize()
    fields = [
        (
            "model",
            object,
            option(
                None,
                keyword=role,
                help=f"{name}: another model with the same tokenizer (folder, .gguf, hub id).",
                accepts=str | object | None,
                cli=str,
            ),
        ),
        (
            "tokenizer",
            object,
            option(
                None,
                keyword=f"{role}_tokenizer",
                help=f"The tokenizer of a {role} given as a loaded module.",
                command_line=False,
            ),
        ),
        (
            "scheme",
            str | None,
            option(
                None,
                keyword=f"{role}_scheme",
                help=f"{name}: the {of} fake-quantized with this scheme, e.g. {example}.",
            ),
        ),
        (
            "layers",
            int | None,
            option(
                None,
                keyword=f"{role}_layers",
                help=f"{name}: the {of}'s first N decoder layers + its final norm and head.",
            ),
        ),
    ]

    def settings(self):
        """The pipeline's DraftSettings: a spec or a model object (with its tokenizer), a scheme, or N layers."""
        from infoeval.models.objects import model_object
        from infoeval.speculative.drafts import DraftSettings

        other = None if self.model is None else model_object(self.model, self.tokenizer, what=role)
        return DraftSettings(other, self.scheme, self.layers, role=role)

    return dataclasses.make_dataclass(
        name, fields, frozen=True, namespace={"settings": settings, "__module__": __name__}
    )


Draft = second_model("draft", "target", "int4-channel")
Student = second_model("student", "teacher", "int4-g128")


@dataclass(frozen=True)
class SpecAcceptRequest(RunRequest):
    """spec-accept: how well the draft would draft for the target, per position and temperature."""

    draft: Draft = group(Draft, panel="Draft")
    temperature: tuple[float, ...] = temperatures_option("1", "Comma-separated temperatures, e.g. 0.5,1,2.")


@dataclass(frozen=True)
class DistillRequest(RunRequest):
    """distill: the distillation terms of teacher and student per temperature."""

    student: Student = group(Student, panel="Student")
    temperature: tuple[float, ...] = temperatures_option("1,2,4,8", "Comma-separated distillation temperatures.")
    alpha: float = option(0.1, help="Weight α of the hard loss in L = α·H(y, q) + (1 − α)·T²·KL(p_T‖q_T).")


@dataclass(frozen=True)
class SpecDecodeRequest:
    """spec-decode: speculative sampling with KV caches against plain sampling from the target."""

    model: ModelSettings = group(ModelSettings, panel="Model")
    tokenizer: object = option(
        None, help="The tokenizer of a target given as a loaded module (a spec brings its own).", command_line=False
    )
    draft: Draft = group(Draft, panel="Draft")
    prompt: str = option("Once upon a time", help="The prompt (tokenized with the tokenizer's default special tokens).")
    gamma: int = option(4, help="Draft tokens proposed per target call.")
    max_new_tokens: int = option(64, help="New tokens generated by each loop (EOS does not stop them).")
    temperature: float = option(
        1.0,
        flags=TEMPERATURE_FLAGS,
        help="Sampling temperature of both models (> 0).",
        aliases=TEMPERATURE_ALIASES,
    )
    seed: int = option(0, help="Seed of each loop's random generator.")
    repeats: int = option(1, help="Time each loop this many times (alternating) and keep the fastest.")
    verify: int = option(0, help="Also check Theorem 1 by Monte Carlo with this many samples per sampler (0: no).")
    progress: bool = option(False, help="A progress bar on stderr.", command_line=False)
    given: frozenset = given_field()


def _numbers(value) -> str:
    return value if isinstance(value, str) else ",".join(map(str, value))


@dataclass(frozen=True)
class TemperatureRequest:
    """temperature: softmax(z/T) per class at each temperature, for logits given by hand or a model's."""

    logits: str | None = option(
        None,
        help="Comma-separated logits, e.g. 9.1,6.2,4.6,3.3.",
        accepts=str | Sequence[float] | None,
        cli=str,
        parse=lambda value: None if value is None else _numbers(value),
    )
    labels: str | None = option(
        None,
        help="Comma-separated class names for --logits, e.g. cat,lion,lynx,dog.",
        accepts=str | Sequence[str] | None,
        cli=str,
        parse=lambda value: None if value is None else ",".join(names(value)),
    )
    model: ModelSettings = group(ModelSettings, panel="Model", omit=("device_map",), model=None)
    prompt: str | None = option(None, help="The prompt whose next-token logits are shown (with --model).")
    top: int = option(8, help="With --model: show the N likeliest tokens.", parse=at_least("top", 1))
    temperature: tuple[float, ...] = temperatures_option(
        "0.25,0.5,1,2,4", "Comma-separated temperatures, e.g. 0.5,1,2."
    )
    given: frozenset = given_field()

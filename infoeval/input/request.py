"""What every command that scores a text with a model is asked, declared once (``input/fields.py``): the model,
the text and its windows; each family's request adds its own options (``comparison/request.py``, …)."""

from __future__ import annotations

from dataclasses import dataclass

from infoeval.errors import UsageError, spell
from infoeval.input.fields import given_field, group, option
from infoeval.input.settings import ModelSettings, TextSettings, WindowSettings

MAX_TOP_K = 100  # --topk's ceiling: K tokens and probabilities per position per model are kept in memory


def _top_k(value: int) -> int:
    if not 0 <= value <= MAX_TOP_K:
        raise UsageError(f"{spell('top_k')} {value} is not allowed; give 0 (none) to {MAX_TOP_K} tokens per position")
    return value


def topk_option():
    """--topk K: every model's K most likely tokens kept per position (the runs with a positions table)."""
    return option(
        0,
        flags=("--topk",),
        help="Also store every model's K most likely tokens and their probabilities per position in the positions "
        "output (0: none).",
        parse=_top_k,
        panel="Output",
    )


@dataclass(frozen=True)
class RunRequest:
    """The model (a spec, or a loaded module with its ``tokenizer``), the text, its windows, a progress bar."""

    model: ModelSettings = group(ModelSettings, panel="Model")
    tokenizer: object = option(
        None, help="The tokenizer of a model given as a loaded module (a spec brings its own).", command_line=False
    )
    text: TextSettings = group(TextSettings, panel="Text")
    window: WindowSettings = group(WindowSettings, panel="Windows")
    progress: bool = option(False, help="A progress bar on stderr.", command_line=False)
    given: frozenset = given_field()  # the keywords the caller gave (the others are defaults)

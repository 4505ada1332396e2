"""What mutual-info is asked, each option declared once (``input/fields.py``): the model, the text (no windows:
blocks of each length), and the estimator's settings (``MISettings``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from infoeval.errors import UsageError, spell
from infoeval.input.fields import comma_text, given_field, group, option
from infoeval.input.settings import ModelSettings, TextSettings
from infoeval.mutual_information.estimator import DEFAULT_BATCH_TOKENS, DEFAULT_BLOCKS, DEFAULT_LENGTHS, parse_lengths


@dataclass(frozen=True)
class MISettings:
    lengths: tuple[int, ...] = option(
        parse_lengths(DEFAULT_LENGTHS),
        help="Comma-separated block lengths L in tokens, each even (X = first L/2, Y = last L/2).",
        accepts=str | Sequence[int],
        cli=str,
        parse=lambda value: parse_lengths(comma_text(value)),
        default_text=DEFAULT_LENGTHS,
    )
    blocks: int = option(DEFAULT_BLOCKS, help="Blocks per length (fewer when the text is short; at least 2 needed).")
    batch_tokens: int = option(
        DEFAULT_BATCH_TOKENS, help="Tokens per forward pass: blocks of one length are batched up to this."
    )
    bootstrap: int = option(1000, help="Bootstrap replicates for the 95% CI of β.")
    seed: int = option(0, help="Seed of the bootstrap.")
    prefix: str = option("auto", help="Start token that Y is scored after: auto (BOS, else EOS), bos or eos.")

    def __post_init__(self) -> None:
        check_settings(self)


def check_settings(s: MISettings) -> None:
    """Option checks that need no model, done before the slow load."""
    if s.blocks < 2:
        raise UsageError(
            f"{spell('blocks')} {s.blocks} is too few; give at least 2 (a standard error needs two blocks)"
        )
    if s.batch_tokens < 1:
        raise UsageError(f"{spell('batch_tokens')} {s.batch_tokens} is not allowed; it must be at least 1")
    if s.bootstrap < 2:
        raise UsageError(f"{spell('bootstrap')} {s.bootstrap} is too few; give at least 2 replicates (1000 is usual)")
    if s.prefix not in ("auto", "bos", "eos"):
        raise UsageError(
            f"{spell('prefix')} {s.prefix} is not allowed for mutual-info (Y needs a start token); use auto, bos or eos"
        )


@dataclass(frozen=True)
class MutualInfoRequest:
    """mutual-info: I(L) for each block length, and the power law fitted to it."""

    model: ModelSettings = group(ModelSettings, panel="Model")
    tokenizer: object = option(
        None, help="The tokenizer of a model given as a loaded module (a spec brings its own).", command_line=False
    )
    text: TextSettings = group(TextSettings, panel="Text", omit=("documents", "document_field"), max_tokens="all")
    settings: MISettings = group(MISettings, panel="Blocks")
    progress: bool = option(False, help="A progress bar on stderr.", command_line=False)
    given: frozenset = given_field()

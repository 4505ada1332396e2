"""What a window protocol is: which tokens each window holds and which of them it scores.

A protocol answers, once, everything the rest of infoeval asks of it: its name and a one-line rule for the docs
(``summary``), the context length it defaults to, whether it takes ``--stride``, whether it supports
``--until-se`` (``anytime``: windows visited in any order, each scoring its own targets, and no figure of its own
that needs every window; ``gate --sequential`` needs no figure and takes a reference of any protocol), its
prefix token for a ``--prefix`` policy, how it reads the text (``load``, ``text``; lm-eval's documents:
``reads_documents``), and how it cuts it into windows and scored positions: one token stream, tokenized to what a
``--max-tokens`` budget needs (``tokens_needed``, ``windows``), or the whole text by itself (``cuts_itself``,
``cut``). It also says which figures of its own it publishes beside infoeval's (``figures``, shown by
``figure_table``: lm-eval's perplexities per word and byte, GPTQ's PPL) and whether llama.cpp's table scores the
same positions (``llamacpp_positions``). One module per protocol (``rolling.py``, …) subclasses ``WindowRules``;
``protocols/__init__.py`` registers one instance of each.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol

import numpy as np

from infoeval.errors import UsageError, spell
from infoeval.input.tokens import TokenStream
from infoeval.input.windows import DEFAULT_CTX, Window

if TYPE_CHECKING:
    from infoeval.input.text import Text


class TextSettings(Protocol):
    """What a protocol reads of the run's text settings (``input/settings.TextSettings``, which is checked against
    the protocols registered here, so the settings know the protocols and not the other way round)."""

    text: Path | None
    dataset: str | None
    data_dir: Path | None
    max_tokens: int | None
    documents: str | None
    document_field: str


class WindowSettings(Protocol):
    """What a protocol reads of the run's window settings (``input/settings.WindowSettings``)."""

    ctx: int | None
    stride: int | None
    protocol: str
    prefix: str


@dataclass(frozen=True)
class DocumentLayout:
    """Where each scored document starts in the stream (its prefix token), and lm-eval's words and bytes of it."""

    starts: np.ndarray  # (D,) int64
    words: np.ndarray  # (D,) int64
    nbytes: np.ndarray  # (D,) int64
    complete: bool  # every document whole (no --max-tokens cut)
    total_documents: int


@dataclass(frozen=True)
class Cut:
    """A protocol's stream, windows, prefix and rule in words; ``layout`` goes into the provenance."""

    stream: TokenStream
    windows: list[Window]
    prefix_id: int | None
    prefix_token: str
    rule: str
    text_tokens: int
    layout: dict  # the windows' layout for the provenance (``WindowProtocol.layout``): counts, completeness
    documents: DocumentLayout | None = None  # lm-eval: where each document sits (``Prepared.documents``)


@dataclass(frozen=True)
class FigureTable:
    """How the report shows a protocol's own figures: a title, a caption and its columns (header, the figure's
    key, digits)."""

    title: str
    caption: str
    columns: tuple[tuple[str, str, int], ...]


def resolve_prefix(policy: str, bos: int | None, eos: int | None) -> tuple[int | None, str]:
    """The token before the text for a ``--prefix`` policy (auto: BOS, else EOS, else none; or the one asked
    for), and the choice in words."""
    if policy == "auto":
        if bos is not None:
            return bos, "BOS (the tokenizer has one)"
        if eos is not None:
            return eos, "EOS (the tokenizer has no BOS, as with Qwen3; lm-evaluation-harness's convention)"
        return None, "none (the tokenizer has neither BOS nor EOS): the first token is context only"
    if policy == "none":
        return None, "none: the first token is context only"
    tid = bos if policy == "bos" else eos
    if tid is None:
        raise UsageError(f"{spell('prefix')} {policy}: the tokenizer has no {policy.upper()} token; use auto or none")
    return tid, f"{policy.upper()} (--prefix {policy})"


class WindowRules:
    """A window protocol: the class attributes describe it, the methods cut a stream by it."""

    name: ClassVar[str]
    summary: ClassVar[str]  # the rule in one line, for the docs and the CLI's help
    default_ctx: ClassVar[int] = DEFAULT_CTX
    takes_stride: ClassVar[bool] = False
    anytime: ClassVar[bool] = False  # --until-se: windows in any order, each scoring its own targets
    reads_documents: ClassVar[bool] = False  # --documents: the text as documents (lm-eval); needs cuts_itself
    cuts_itself: ClassVar[bool] = False  # tokenizes the whole text (or its documents) and cuts it: ``cut``
    llamacpp_positions: ClassVar[bool] = False  # scores what llama.cpp's table is over: each chunk's second half
    figure_table: ClassVar[FigureTable | None] = None  # its own published figures (``figures``), if it has any

    def load(self, text_settings: TextSettings) -> tuple[Text, object | None]:
        """The text as the protocol reads it, and its documents (None unless ``reads_documents``)."""
        from infoeval.input.text import load_text

        return self.text(load_text(text_settings.text, text_settings.dataset, text_settings.data_dir)), None

    def text(self, text: Text) -> Text:
        """The text as the protocol reads it (the loaded text unchanged, by default)."""
        return text

    def reread(self, info: dict) -> Text | None:
        """The text this protocol scored, read again from its provenance (``Text.provenance()``) and changed as
        ``load`` changes it; None where its source cannot be read here."""
        from infoeval.input.text import reread_source

        raw = reread_source(info)
        return None if raw is None else self.text(raw)

    def prefix(self, policy: str, loaded) -> tuple[int | None, str]:
        """The prefix token id (or None) for ``policy`` and the model ``loaded``, and the choice in words."""
        tok = loaded.info.tokenizer
        return resolve_prefix(policy, tok.bos_id, tok.eos_id)

    def tokens_needed(
        self, text_settings: TextSettings, window_settings: WindowSettings, has_prefix: bool
    ) -> int | None:
        """How many text tokens (after the prefix token) the windows can use for the budget; None: all of them."""
        raise NotImplementedError

    def windows(
        self, stream: TokenStream, text_settings: TextSettings, window_settings: WindowSettings
    ) -> tuple[TokenStream, list[Window], str]:
        """One token stream's protocol: the (possibly truncated) stream, its windows and the rule in words."""
        raise NotImplementedError

    def cut(self, text: Text, docs, loaded, text_settings: TextSettings, window_settings: WindowSettings) -> Cut:
        """A protocol that ``cuts_itself``: the text (or its documents) tokenized and cut into windows."""
        raise NotImplementedError

    def tokenized_whole(self, cut: Cut) -> bool:
        """Whether ``cut`` tokenized the whole text (its provenance then counts the text's tokens)."""
        return bool(cut.layout["complete"])

    def figures(self, nll: np.ndarray, identity: dict, documents: DocumentLayout | None) -> dict:
        """The protocol's own published figures for one model, from its per-position NLL (in the columns' order)
        and the columns' identity (``window``, ``position``); only for a protocol with a ``figure_table``."""
        raise NotImplementedError

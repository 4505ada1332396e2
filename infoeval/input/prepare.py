"""The stages before the engine: text → model → tokens → windows, as a frozen ``Prepared`` with its window protocol.

Every window-based command starts here (``prepare``), then hands ``Prepared`` to the engine through its own
reducer. ``progress`` draws the bar around an evaluation and measures it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from infoeval import distributed
from infoeval.errors import UsageError, spell
from infoeval.input.protocols import registered, with_flag
from infoeval.input.protocols.base import WindowRules
from infoeval.input.protocols.lmeval import DocumentLayout
from infoeval.input.provenance import Provenance, provenance
from infoeval.input.settings import ModelSettings, TextSettings, WindowSettings
from infoeval.input.text import Text
from infoeval.input.tokens import TokenStream, encode
from infoeval.input.windows import Window, describe
from infoeval.models import LoadedModel, load_model, resolve_device, resolve_dtype
from infoeval.models.skeleton import load_skeleton


class Reporter:
    """Progress callbacks; the CLI passes one that draws a rich progress bar on stderr."""

    def stage(self, text: str) -> None: ...

    def note(self, text: str) -> None: ...

    def start(self, total: int, text: str) -> None: ...

    def advance(self) -> None: ...

    def stop(self) -> None: ...


@dataclass(frozen=True)
class WindowProtocol:
    """How the text was cut and scored: protocol, ctx, stride, prefix token, the rule in words, and the counts of
    scored and context-only tokens and of the context each scored token had."""

    name: str
    ctx: int
    stride: int
    prefix: str
    prefix_token: str
    prefix_id: int | None
    rule: str
    max_tokens: int | None
    text_tokens: int | None  # None when only a prefix of the text was tokenized
    tokenized: str
    tokenizer: str
    windows: int
    stream_tokens: int
    scored_tokens: int
    context_only_tokens: int
    min_context: int
    mean_context: float
    max_context: int
    layout: dict | None = None  # lm-eval: documents; gptq: windows available and scored

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Prepared:
    """Model, text, token stream, windows and protocol; ``timings`` holds load_s and tokenize_s."""

    loaded: LoadedModel
    text: Text
    stream: TokenStream
    windows: tuple[Window, ...]
    protocol: WindowProtocol
    timings: Mapping[str, float]
    documents: DocumentLayout | None = None  # lm-eval: where each document sits in the stream, its words and bytes

    def provenance(self, command: str, **extra) -> Provenance:
        return provenance(command, model=self.loaded.info, text=self.text, protocol=self.protocol.to_json(), **extra)


def _prepare_cut(
    text,
    docs,
    loaded: LoadedModel,
    text_settings: TextSettings,
    window_settings: WindowSettings,
    rules: WindowRules,
    reporter: Reporter,
    timings: dict,
) -> Prepared:
    """A protocol that cuts the text itself (lm-eval, gptq): the whole text tokenized (document by document for
    lm-eval) and cut."""
    reporter.stage("tokenizing")
    t0 = time.perf_counter()
    cut = rules.cut(text, docs, loaded, text_settings, window_settings)
    timings["tokenize_s"] = time.perf_counter() - t0
    whole = rules.tokenized_whole(cut)
    protocol = WindowProtocol(
        name=window_settings.protocol,
        ctx=window_settings.ctx,
        stride=window_settings.ctx,
        prefix=window_settings.prefix,
        prefix_token=cut.prefix_token,
        prefix_id=cut.prefix_id,
        rule=cut.rule,
        max_tokens=text_settings.max_tokens,
        text_tokens=cut.text_tokens if whole else None,
        tokenized="the whole text" if whole else f"documents up to the first {text_settings.max_tokens:,} tokens",
        tokenizer=loaded.info.tokenizer.source,
        **describe(cut.windows, len(cut.stream)),
        layout=cut.layout,
    )
    return Prepared(loaded, text, cut.stream, tuple(cut.windows), protocol, MappingProxyType(timings), cut.documents)


def check_positions(loaded, ctx: int, default: str = "") -> None:
    """Windows no longer than the positions the model was trained on (``max_position_embeddings``, times a RoPE
    scaling factor): past them the numbers measure the position encoding's extrapolation, not the model (one line,
    exit 2). ``default``: whose default ``ctx`` is, when it is one."""
    config = getattr(loaded.model, "config", None)  # an in-memory model may have none: nothing to check
    limit = getattr(config, "max_position_embeddings", None)
    scaling = getattr(config, "rope_scaling", None) or getattr(config, "rope_parameters", None) or {}
    factor = scaling.get("factor") if isinstance(scaling, dict) else None
    scaled = isinstance(limit, int) and isinstance(factor, (int, float)) and factor > 1
    if scaled:
        limit = int(limit * factor)  # RoPE scaling (YaRN, linear, dynamic) stretches the trained positions
    if isinstance(limit, int) and 0 < limit < ctx:
        what = "max_position_embeddings × its RoPE scaling factor" if scaled else "max_position_embeddings"
        raise UsageError(
            f"{spell('ctx')} {ctx}{f' ({default})' if default else ''} is longer than the model's {limit} "
            f"positions ({what}); "
            f"give {spell('ctx')} ≤ {limit}"
        )


def _load(text_settings: TextSettings, window_settings: WindowSettings, rules: WindowRules):
    """The text (and lm-eval's documents) as the protocol reads it."""
    if text_settings.documents is not None and not rules.reads_documents:
        allowed = ", ".join(with_flag("reads_documents"))
        raise UsageError(
            f"{spell('documents')} works with {spell('protocol')} {allowed} only (not {window_settings.protocol})"
        )
    return rules.load(text_settings)


def prepare(
    model_settings: ModelSettings,
    text_settings: TextSettings,
    window_settings: WindowSettings,
    reporter: Reporter,
    check_ctx: bool = True,
    skeleton: bool = False,
) -> Prepared:
    """Load text and model, tokenize, and cut the stream into windows (no longer than the model's positions unless
    ``check_ctx`` is False: a caller whose own option sets the length checks it in its own words). ``skeleton``:
    the model's skeleton alone, no weight read (a layer-streamed pass reads them: ``models/skeleton.py``)."""
    timings = {}
    rules = registered(window_settings.protocol)
    text, docs = _load(text_settings, window_settings, rules)
    device = resolve_device(model_settings.device)
    dtype = resolve_dtype(model_settings.dtype, device)
    reporter.stage(f"loading {model_settings.model}")
    t0 = time.perf_counter()
    if skeleton:
        loaded = load_skeleton(model_settings.model, device, dtype)
    else:
        loaded = load_model(model_settings.model, device, dtype, model_settings.device_map)
    timings["load_s"] = time.perf_counter() - t0
    if check_ctx:
        default = f"{spell('protocol')} {rules.name}'s default" if window_settings.ctx == rules.default_ctx else ""
        check_positions(loaded, window_settings.ctx, default)
    if rules.cuts_itself:
        return _prepare_cut(text, docs, loaded, text_settings, window_settings, rules, reporter, timings)
    prefix_id, prefix_desc = rules.prefix(window_settings.prefix, loaded)
    reporter.stage("tokenizing")
    t0 = time.perf_counter()
    limit = rules.tokens_needed(text_settings, window_settings, prefix_id is not None)
    stream = encode(text.text, loaded.tokenizer, prefix_id, limit)
    timings["tokenize_s"] = time.perf_counter() - t0
    n_text = len(stream) - (prefix_id is not None)
    whole = limit is None or n_text < limit  # otherwise only a prefix of the text was tokenized
    stream, windows, rule = rules.windows(stream, text_settings, window_settings)
    protocol = WindowProtocol(
        name=window_settings.protocol,
        ctx=window_settings.ctx,
        stride=window_settings.stride or window_settings.ctx,
        prefix=window_settings.prefix,
        prefix_token=prefix_desc,
        prefix_id=prefix_id,
        rule=rule,
        max_tokens=text_settings.max_tokens,
        text_tokens=n_text if whole else None,
        tokenized="the whole text" if whole else f"a prefix of the text, enough for the first {limit:,} tokens",
        tokenizer=loaded.info.tokenizer.source,
        **describe(windows, len(stream)),
    )
    return Prepared(loaded, text, stream, tuple(windows), protocol, MappingProxyType(timings))


class Bar:
    """The step callback of a progress bar (``step``), its ``total`` and the ``steps`` taken, and the wall time of
    the loop it was around (``seconds``, after the loop)."""

    def __init__(self, advance, total: int):
        self._advance, self.total, self.steps, self.seconds = advance, total, 0, 0.0

    def step(self) -> None:
        self.steps += 1
        self._advance()


@contextlib.contextmanager
def progress(reporter: Reporter, total: int, text: str):
    """A progress bar of ``total`` steps around an evaluation loop; yields a ``Bar`` whose ``seconds`` is the
    loop's wall time once the block ends."""
    bar = Bar(reporter.advance, distributed.share(total))  # under a launcher rank 0's bar counts its own share
    reporter.start(bar.total, text)
    t0 = time.perf_counter()
    try:
        yield bar
    finally:
        reporter.stop()
        bar.seconds = time.perf_counter() - t0


def default_run_name(command: str, model_settings: ModelSettings, p_text: str) -> str:
    model = re.sub(r"[^A-Za-z0-9._-]+", "-", model_settings.model.rstrip("/").split("/")[-1]).strip("-")[:40]
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return f"{command}-{model}-{p_text}-{stamp}"

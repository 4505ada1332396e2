"""Frozen settings, one per stage, built by the CLI by keyword and validated on construction (``__post_init__``),
so that a bad option fails with one line before anything slow happens. The module imports no torch; a window
setting's protocol is checked against the registry (``input/protocols/``), which does."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from infoeval.errors import UsageError, spell
from infoeval.input.fields import group, names, non_negative, one_of, option
from infoeval.quant.schemes import DEFAULT_SCHEMES

DEFAULT_MODEL = "smollm2-135m"
DEFAULT_CTX = 512
DEFAULT_PROTOCOL = "rolling"  # --protocol's default: a name in input/protocols' REGISTRY
MAX_TOKENS = 8192  # --max-tokens' default: a first run takes minutes

PREFIXES = ("auto", "bos", "eos", "none")
FLOOR_MODES = ("sampled", "full", "off")  # --floor: the noise floor on a seeded share of the windows, all, none


def check_floor(mode: str) -> str:
    """--floor's value, or a usage error naming the allowed ones."""
    return one_of("floor", FLOOR_MODES)(mode)


@dataclass(frozen=True)
class ModelSettings:
    model: str | object = option(
        DEFAULT_MODEL,
        help=f"HF folder, hub id (org/name), .gguf file, or '{DEFAULT_MODEL}'.",
        flags=("--model", "-m"),
        cli=str,
        positional="MODEL",
    )
    device: str = option("auto", help="auto (CUDA when present), cpu, cuda or cuda:N.")
    dtype: str = option(
        "auto",
        help="auto (float32 on CPU, bfloat16 on CUDA), float32, bfloat16, float16. On a CPU with native bfloat16, "
        "bfloat16 is about 1.6× faster but its noise floor is about 60× float32's (docs/metrics.md, Resolution).",
    )
    device_map: str | None = option(None, help="accelerate device_map for models larger than one device, e.g. auto.")


def _dataset_help() -> str:
    from infoeval.input.text import DATASETS

    return f"Built-in text: {', '.join(DATASETS)} (default python-docs)."


def _documents_help() -> str:
    from infoeval.input.protocols import with_flag

    return (
        f"With --protocol {' or '.join(with_flag('reads_documents'))}: a JSONL file of documents, or 'articles' "
        "(the WikiText file split into articles, lm-eval's wikitext task)."
    )


@dataclass(frozen=True)
class TextSettings:
    text: Path | None = option(None, help="A UTF-8 text file to score.", flags=("--text", "-t"), parse=Path)
    dataset: str | None = option(None, help=_dataset_help)
    data_dir: Path | None = option(
        None, help="Folder holding wikitext-2-raw/ or tinyshakespeare/ (or set INFOEVAL_DATA_DIR).", parse=Path
    )
    max_tokens: int | None = option(  # None: every token
        MAX_TOKENS,
        help="Score at most this many tokens, or 'all' for the whole text (the default keeps a first run to minutes).",
        accepts=int | str | None,
        cli=str,
        parse=lambda value: max_tokens_of(value),
    )
    documents: str | None = option(None, help=_documents_help)  # a JSONL file, or "articles" (lm-eval protocol)
    document_field: str = option("text", help="The field of each JSONL line that holds the document.")

    def __post_init__(self) -> None:
        if self.max_tokens is not None and self.max_tokens < 1:
            raise UsageError(f"{spell('max_tokens')} {self.max_tokens} is not allowed; it must be at least 1")
        documents, text, dataset = spell("documents"), spell("text"), spell("dataset")
        if self.documents == "articles" and self.text is None and self.dataset is None:
            raise UsageError(
                f"{documents} articles splits a WikiText file: give {dataset} wikitext-2 (or -valid) or {text} FILE"
            )
        if self.documents not in (None, "articles") and (self.text is not None or self.dataset is not None):
            raise UsageError(f"{documents} FILE.jsonl is the text: do not give {text} or {dataset} with it")


def read_toml(path: Path, what: str, give: str = "an existing .toml file") -> dict:
    """A TOML file as a dict; a missing, folder or invalid file is a usage error naming it (``what``: "config file";
    ``give``: what a missing one's message asks for instead)."""
    import tomllib

    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{what} '{path}' does not exist; give {give}") from None
    except IsADirectoryError:
        raise UsageError(f"{what} '{path}' is a folder; give a .toml file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise UsageError(f"{what} '{path}' is not valid TOML: {str(e).splitlines()[0]}") from None


def max_tokens_of(value) -> int | None:
    """A token budget (--max-tokens, ``max_tokens=``): a positive integer (or its digits), or 'all' / None for the
    whole text."""
    if value is None or (isinstance(value, str) and value.strip().lower() == "all"):
        return None
    n = value
    if isinstance(value, str):
        try:
            n = int(value)
        except ValueError:
            pass
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        shown = n if isinstance(n, int) and not isinstance(n, bool) else repr(value)
        raise UsageError(f"{spell('max_tokens')} {shown} is not allowed; give a positive integer or 'all'")
    return n


def _protocols() -> dict:
    """The window protocols' registry (``input/protocols``; imported when first asked, after this module)."""
    from infoeval.input.protocols import REGISTRY

    return REGISTRY


def default_ctx(protocol: str) -> int:
    """--ctx when not given: the protocol's own default (2048 for gptq, the papers' length; 512 otherwise)."""
    rules = _protocols().get(protocol)
    return rules.default_ctx if rules is not None else DEFAULT_CTX


def check_window_options(ctx: int, stride: int | None) -> None:
    """ctx ≥ 2 and 1 ≤ stride ≤ ctx (stride None means ctx)."""
    if ctx < 2:
        raise UsageError(f"{spell('ctx')} {ctx} is too small; it must be at least 2")
    if stride is not None and not 1 <= stride <= ctx:
        raise UsageError(f"{spell('stride')} {stride} is not allowed; it must be between 1 and {spell('ctx')} ({ctx})")


def _ctx_help() -> str:
    """``--ctx``'s default in words, from the registry: the common one, then each protocol's own."""
    own = [
        f"{rules.default_ctx} with --protocol {name}"
        for name, rules in _protocols().items()
        if rules.default_ctx != DEFAULT_CTX
    ]
    return f"Window length in tokens (n_ctx); default {', '.join([str(DEFAULT_CTX), *own])}."


def _protocol_help() -> str:
    return " · ".join(f"{name}: {rules.summary}" for name, rules in _protocols().items()) + "."


@dataclass(frozen=True)
class WindowSettings:
    ctx: int | None = option(None, help=_ctx_help, default_text="")  # None: the protocol's own (default_ctx)
    stride: int | None = option(None, help="Tokens between window starts (default = ctx); ≤ ctx.")  # None: = ctx
    protocol: str = option(DEFAULT_PROTOCOL, help=_protocol_help)
    prefix: str = option("auto", help="Token put before the text: auto (BOS, else EOS), bos, eos or none.")

    def __post_init__(self) -> None:
        registry = _protocols()
        if self.protocol not in registry:
            raise UsageError(f"unknown protocol '{self.protocol}'; allowed: {', '.join(registry)}")
        if self.ctx is None:
            object.__setattr__(self, "ctx", default_ctx(self.protocol))
        if self.prefix not in PREFIXES:
            raise UsageError(f"unknown prefix policy '{self.prefix}'; allowed: {', '.join(PREFIXES)}")
        check_window_options(self.ctx, self.stride)
        if not registry[self.protocol].takes_stride and self.stride not in (None, self.ctx):
            from infoeval.input.protocols import with_flag

            takes = " and ".join(with_flag("takes_stride"))
            raise UsageError(
                f"{spell('stride')} cannot be set with {spell('protocol')} {self.protocol} (only {takes} windows "
                "take a stride)"
            )


@dataclass(frozen=True)
class CalibrationSettings:
    """Calibration data for the methods that learn from text (``quant/methods/calibration.py``)."""

    text: str | None = option(  # a dataset name or a UTF-8 file; None: the evaluation's text, after its tokens
        None,
        keyword="calibration",
        help="Calibrated methods (autoround:…): the text they learn from, a dataset name or a UTF-8 file; default: "
        "the evaluated text after the evaluated tokens (docs/methods.md).",
    )
    samples: int = option(  # AutoRound's default
        128, keyword="calibration_samples", help="Calibrated methods: how many chunks of calibration text."
    )
    seqlen: int = option(512, keyword="calibration_seqlen", help="Calibrated methods: tokens per chunk.")
    seed: int = option(  # AutoRound's default
        42, keyword="calibration_seed", help="Calibrated methods: the seed that draws the chunks and seeds the method."
    )
    allow_overlap: bool = option(
        False,
        keyword="calibration_overlap",
        flags=("--calibration-overlap",),
        help="Allow calibration chunks that repeat the evaluated tokens (refused by default).",
    )

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise UsageError(f"{spell('calibration_samples')} {self.samples} is not allowed; give at least 1")
        if self.seqlen < 8:
            raise UsageError(f"{spell('calibration_seqlen')} {self.seqlen} is not allowed; give at least 8 tokens")


def _comma_text(value) -> str:
    """Schemes as one comma-separated text (the pipeline's form until schemes are typed specs)."""
    return ",".join(names(value))


@dataclass(frozen=True)
class VariantSettings:
    schemes: str | None = option(  # None: the default schemes, or none when other variants are given; "": none
        None,
        help="Comma-separated schemes: int<bits>-channel | int<bits>-g<N> [-asym] (infoeval's rounding), bf16 | fp16 "
        "(the weights at 16 bits), or <library>:<spec> such as hqq:int4-g64 (the library's own quantizer and "
        "kernels; docs/methods.md).",
        accepts=str | Sequence[str] | None,
        cli=str,
        parse=_comma_text,
        default_text=DEFAULT_SCHEMES,
    )
    include: tuple[str, ...] = option(
        (),
        help="Also quantize modules matching this glob (repeatable), e.g. lm_head.",
        accepts=Sequence[str],
        cli=list[str],
        parse=tuple,
    )
    exclude: tuple[str, ...] = option(
        (),
        help="Do not quantize modules matching this glob (repeatable).",
        accepts=Sequence[str],
        cli=list[str],
        parse=tuple,
    )
    recipes: tuple[Path, ...] = option(  # recipe files (quant/recipe.py): one mixed variant each, named after the file
        (),
        flags=("--recipe",),
        help="Recipe TOML (unit → scheme, as `infoeval mix` writes): one more variant, named after the file "
        "(repeatable).",
        accepts=Sequence[str | Path],
        cli=list[Path],
        parse=lambda value: tuple(Path(r) for r in value),
    )
    calibration: CalibrationSettings = group(CalibrationSettings, panel="Calibration")
    floor: str = option(  # the noise floor's windows: sampled, full or off (measure/floor.py)
        "sampled",
        help="The noise floor (the reference with its weights moved by one bfloat16 rounding step) in the same run: "
        "sampled (a seeded share of the windows, ≤ 8 % of the forward passes, ≤ 10 % of the wall time), full "
        "(every window) or off.",
        parse=one_of("floor", FLOOR_MODES),
    )
    floor_seed: int = option(  # the floor's weights and its sampled windows
        0, help="The noise floor's seed: its weights and its sampled windows.", parse=non_negative("floor_seed")
    )

    checkpoints: tuple[str, ...] = option(  # saved checkpoints (folders, .gguf files, hub ids) run as variants
        (),
        help="Saved checkpoints to compare beside the schemes, comma-separated: folders (a library's quantized save, "
        "or a float one), .gguf files or hub ids; each must share the reference's tokenizer, and is named by its "
        "folder or file. Alone (without --schemes) only they are compared.",
        accepts=str | Sequence[str | Path],
        cli=str,
        parse=names,
    )
    modules: dict | None = option(  # name → a module the caller built (the API's ``variants``)
        None,
        keyword="variants",
        help="name → a model you built, sharing the reference's tokenizer",
        command_line=False,
    )

    def __post_init__(self) -> None:
        check_floor(self.floor)
        if self.schemes is None:
            others = self.recipes or self.checkpoints or self.modules
            object.__setattr__(self, "schemes", "" if others else DEFAULT_SCHEMES)

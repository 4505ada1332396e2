"""Frozen settings, one per stage, built by the CLI by keyword and validated on construction (``__post_init__``),
so that a bad option fails with one line before anything slow happens. The module imports no torch; a window
setting's protocol is checked against the registry (``input/protocols/``), which does."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from infoeval.errors import UsageError, spell
from infoeval.input.fields import option
from infoeval.input.protocols import REGISTRY, with_flag
from infoeval.input.windows import DEFAULT_CTX, check_window_options  # noqa: F401  (DEFAULT_CTX: re-exported)

DEFAULT_MODEL = "smollm2-135m"
DEFAULT_PROTOCOL = "rolling"  # --protocol's default: a name in input/protocols' REGISTRY
MAX_TOKENS = 8192  # --max-tokens' default: a first run takes minutes

PREFIXES = ("auto", "bos", "eos", "none")


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
        object.__setattr__(self, "max_tokens", max_tokens_of(self.max_tokens))  # frozen: 'all' or digits, once
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


def default_ctx(protocol: str) -> int:
    """--ctx when not given: the protocol's own default (2048 for gptq, the papers' length; 512 otherwise)."""
    rules = REGISTRY.get(protocol)
    return rules.default_ctx if rules is not None else DEFAULT_CTX


def _ctx_help() -> str:
    """``--ctx``'s default in words, from the registry: the common one, then each protocol's own."""
    own = [
        f"{rules.default_ctx} with --protocol {name}"
        for name, rules in REGISTRY.items()
        if rules.default_ctx != DEFAULT_CTX
    ]
    return f"Window length in tokens (n_ctx); default {', '.join([str(DEFAULT_CTX), *own])}."


def _protocol_help() -> str:
    return " · ".join(f"{name}: {rules.summary}" for name, rules in REGISTRY.items()) + "."


@dataclass(frozen=True)
class WindowSettings:
    ctx: int | None = option(None, help=_ctx_help, default_text="")  # None: the protocol's own (default_ctx)
    stride: int | None = option(None, help="Tokens between window starts (default = ctx); ≤ ctx.")  # None: = ctx
    protocol: str = option(DEFAULT_PROTOCOL, help=_protocol_help)
    prefix: str = option("auto", help="Token put before the text: auto (BOS, else EOS), bos, eos or none.")

    def __post_init__(self) -> None:
        if self.protocol not in REGISTRY:
            raise UsageError(f"unknown protocol '{self.protocol}'; allowed: {', '.join(REGISTRY)}")
        if self.ctx is None:
            object.__setattr__(self, "ctx", default_ctx(self.protocol))
        if self.prefix not in PREFIXES:
            raise UsageError(f"unknown prefix policy '{self.prefix}'; allowed: {', '.join(PREFIXES)}")
        check_window_options(self.ctx, self.stride)
        if not REGISTRY[self.protocol].takes_stride and self.stride not in (None, self.ctx):
            takes = " and ".join(with_flag("takes_stride"))
            raise UsageError(
                f"{spell('stride')} cannot be set with {spell('protocol')} {self.protocol} (only {takes} windows "
                "take a stride)"
            )

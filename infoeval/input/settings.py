"""Frozen settings, one per stage, built by the CLI by keyword and validated on construction (``__post_init__``),
so that a bad option fails with one line before anything slow happens. The module imports no torch; a window
setting's protocol is checked against the registry (``input/protocols/``), which does."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from infoeval.errors import UsageError
from infoeval.quant.schemes import DEFAULT_SCHEMES

DEFAULT_MODEL = "smollm2-135m"
DEFAULT_CTX = 512
DEFAULT_PROTOCOL = "rolling"  # --protocol's default: a name in input/protocols' REGISTRY

PREFIXES = ("auto", "bos", "eos", "none")
FLOOR_MODES = ("sampled", "full", "off")  # --floor: the noise floor on a seeded share of the windows, all, none


def check_floor(mode: str) -> str:
    """--floor's value, or a usage error naming the allowed ones."""
    if mode not in FLOOR_MODES:
        raise UsageError(f"--floor '{mode}' is not allowed; give one of {', '.join(FLOOR_MODES)}")
    return mode


@dataclass(frozen=True)
class ModelSettings:
    model: str = DEFAULT_MODEL
    device: str = "auto"
    dtype: str = "auto"
    device_map: str | None = None


@dataclass(frozen=True)
class TextSettings:
    text: Path | None = None
    dataset: str | None = None
    data_dir: Path | None = None
    max_tokens: int | None = None  # None: every token
    documents: str | None = None  # a JSONL file, or "articles" (WikiText split into articles); lm-eval protocol only
    document_field: str = "text"

    def __post_init__(self) -> None:
        if self.max_tokens is not None and self.max_tokens < 1:
            raise UsageError(f"--max-tokens {self.max_tokens} is not allowed; it must be at least 1")
        if self.documents == "articles" and self.text is None and self.dataset is None:
            raise UsageError(
                "--documents articles splits a WikiText file: give --dataset wikitext-2 (or -valid) or --text FILE"
            )
        if self.documents not in (None, "articles") and (self.text is not None or self.dataset is not None):
            raise UsageError("--documents FILE.jsonl is the text: do not give --text or --dataset with it")


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
        raise UsageError(f"--max-tokens {shown} is not allowed; give a positive integer or 'all'")
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
        raise UsageError(f"--ctx {ctx} is too small; it must be at least 2")
    if stride is not None and not 1 <= stride <= ctx:
        raise UsageError(f"--stride {stride} is not allowed; it must be between 1 and --ctx ({ctx})")


@dataclass(frozen=True)
class WindowSettings:
    ctx: int = DEFAULT_CTX
    stride: int | None = None  # None: = ctx
    protocol: str = DEFAULT_PROTOCOL
    prefix: str = "auto"

    def __post_init__(self) -> None:
        registry = _protocols()
        if self.protocol not in registry:
            raise UsageError(f"unknown protocol '{self.protocol}'; allowed: {', '.join(registry)}")
        if self.prefix not in PREFIXES:
            raise UsageError(f"unknown prefix policy '{self.prefix}'; allowed: {', '.join(PREFIXES)}")
        check_window_options(self.ctx, self.stride)
        if not registry[self.protocol].takes_stride and self.stride not in (None, self.ctx):
            from infoeval.input.protocols import with_flag

            takes = " and ".join(with_flag("takes_stride"))
            raise UsageError(
                f"--stride cannot be set with --protocol {self.protocol} (only {takes} windows take a stride)"
            )


@dataclass(frozen=True)
class VariantSettings:
    schemes: str = DEFAULT_SCHEMES  # "" with recipes: only the recipes' variants
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    recipes: tuple[Path, ...] = ()  # recipe files (quant/recipe.py): one mixed variant each, named after the file
    calibration: CalibrationSettings | None = None  # for calibrated methods (autoround:…); None: the defaults
    floor: str = "sampled"  # the noise floor's windows: sampled, full or off (measure/floor.py)
    floor_seed: int = 0  # the floor's weights and its sampled windows
    checkpoints: tuple[str, ...] = ()  # saved checkpoints (folders, .gguf files, hub ids) run as variants

    def __post_init__(self) -> None:
        check_floor(self.floor)


@dataclass(frozen=True)
class CalibrationSettings:
    """Calibration data for the methods that learn from text (``quant/methods/calibration.py``)."""

    text: str | None = None  # a dataset name or a UTF-8 file; None: the evaluation's text, after its evaluated tokens
    samples: int = 128  # AutoRound's default
    seqlen: int = 512
    seed: int = 42  # AutoRound's default
    allow_overlap: bool = False

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise UsageError(f"--calibration-samples {self.samples} is not allowed; give at least 1")
        if self.seqlen < 8:
            raise UsageError(f"--calibration-seqlen {self.seqlen} is not allowed; give at least 8 tokens")

"""What every command shares: option types and their defaults, --config TOML defaults, the model given as an
argument or as --model, settings builders and output paths."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from infoeval.cli.signatures import extend, option
from infoeval.errors import UsageError

# read_toml: re-exported for the commands' config and limits files
from infoeval.input.settings import (  # noqa: F401  (read_toml: re-exported)
    DEFAULT_PROTOCOL,
    ModelSettings,
    TextSettings,
    WindowSettings,
    max_tokens_of,
    read_toml,
)
from infoeval.models import DEFAULT_MODEL

# ---- defaults of the shared options (each command's signature uses these) ---------------------------------
MODEL_DEFAULT = DEFAULT_MODEL
PROTOCOL_DEFAULT = DEFAULT_PROTOCOL
PREFIX_DEFAULT = "auto"
DEVICE_DEFAULT = "auto"
DTYPE_DEFAULT = "auto"
# every spelling of the temperature option, on every command that takes temperatures
TEMPERATURE_FLAGS = ("--temperature", "--T", "--temperatures")
# name of the positional MODEL parameter of commands whose --model is also `model`
MODEL_ARG = "model_arg"
# config keys that name the same option as another key
CONFIG_ALIASES = {"temperatures": "temperature", "T": "temperature"}


def _load_config(ctx: typer.Context, param, value: Path | None) -> Path | None:
    """--config FILE.toml: its keys (option names, '-' or '_') become this command's defaults; options given on
    the command line still win. Keys may sit at the top level or under a table named after the command."""
    if value is None:
        return value
    data = read_toml(Path(value), "config file")
    section = data.get(ctx.info_name, {k: v for k, v in data.items() if not isinstance(v, dict)})
    allowed = {p.name for p in ctx.command.params if p.name not in ("config", MODEL_ARG)}
    defaults = {}
    for key, val in section.items():
        name = key.replace("-", "_")
        name = CONFIG_ALIASES.get(name, name) if name not in allowed else name
        if name not in allowed:
            raise UsageError(
                f"config file '{value}': unknown key '{key}' for {ctx.info_name}; allowed: {', '.join(sorted(allowed))}"
            )
        if name == "schemes" and isinstance(val, list):
            val = ",".join(val)
        defaults[name] = val
    ctx.default_map = {**(ctx.default_map or {}), **defaults}
    return value


# ---- reusable option types -------------------------------------------------------------------------------
ModelOpt = Annotated[
    str, typer.Option("--model", "-m", help=f"HF folder, hub id (org/name), .gguf file, or '{DEFAULT_MODEL}'.")
]
ModelArg = Annotated[
    str | None, typer.Argument(metavar="MODEL", help="The model; same as --model.", show_default=False)
]
ConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", is_eager=True, callback=_load_config, help="TOML file of option defaults (see configs/)."),
]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")]


# ---- the model: a positional argument or --model ---------------------------------------------------------
def typed(context: typer.Context | None, name: str, value) -> bool:
    """Whether option ``name`` was typed on the command line (or set in the environment), not a default or a
    --config value; without a context (a call from Python) a value other than the default counts as typed."""
    if context is None:
        return value != MODEL_DEFAULT
    source = context.get_parameter_source(name)
    return source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT")


def pick_model(
    context: typer.Context | None, positional: str | None, option: str | None, what: str = "the model"
) -> str | None:
    """The model given as the positional argument or as --model (or its default); both typed with different
    values is a usage error. A --config value for --model gives way to the positional argument."""
    if positional is None:
        return option
    if option is not None and option != positional and typed(context, "model", option):
        raise UsageError(f"{what} is given twice ('{positional}' and --model '{option}'); give one")
    return positional


# ---- settings --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunOptions:
    """The text, window and device options shared by the commands that score a text (``@run_options``)."""

    text: Path | None
    dataset: str | None
    data_dir: Path | None
    max_tokens: str
    device: str
    dtype: str
    device_map: str | None
    ctx: int | None = None  # None: the protocol's default (settings.default_ctx)
    stride: int | None = None
    protocol: str = PROTOCOL_DEFAULT
    prefix: str = PREFIX_DEFAULT
    documents: str | None = None
    document_field: str = "text"

    def keywords(self, whole_text: bool = False) -> dict:
        """The API's text, window and device keywords (``infoeval.api.scoring.run_settings``); ``whole_text``: no
        --max-tokens budget (a run to a precision whose --max-tokens was not given reads the whole text)."""
        return {
            "text": self.text,
            "dataset": self.dataset,
            "data_dir": self.data_dir,
            "max_tokens": None if whole_text else max_tokens_of(self.max_tokens),
            "ctx": self.ctx,
            "stride": self.stride,
            "protocol": self.protocol,
            "prefix": self.prefix,
            "documents": self.documents,
            "document_field": self.document_field,
            "device": self.device,
            "dtype": self.dtype,
            "device_map": self.device_map,
        }


def _declared(cls, skip: tuple[str, ...] = ()) -> list:
    """The options of a declared settings class (``infoeval.input.fields``) as parameters of a command's signature."""
    from infoeval.cli.command import parameter
    from infoeval.input.fields import entries

    return [parameter(e) for k, e in entries(cls).items() if e.opt.command_line and k not in skip]


_TEXT = _declared(TextSettings)
_WINDOW = _declared(WindowSettings)
_DEVICE = _declared(ModelSettings, skip=("model",))
DeviceOpt, DtypeOpt, DeviceMapOpt = (p.annotation for p in _DEVICE)
MaxTokensOpt = next(p.annotation for p in _TEXT if p.name == "max_tokens")


def run_options(windows: bool = True):
    """Give a command the shared text (and, with ``windows``, window) and device options, defined once here; they
    reach it as one ``run: RunOptions`` argument."""
    shared = _TEXT + (_WINDOW if windows else []) + _DEVICE

    def build(values):
        return RunOptions(**{n: values[n] for n in RunOptions.__dataclass_fields__ if n in values})

    return lambda command: extend(command, "run", shared, build)


def model_options(argument=ModelArg, flag=ModelOpt, default: str | None = MODEL_DEFAULT, what: str = "the model"):
    """Give a command its model as the positional ``argument`` (MODEL, TARGET, ...) or as ``flag`` (--model/-m),
    defined once here, first in its --help; they reach it as one ``model`` argument, the one given (both typed with
    different values is a usage error naming ``what``)."""
    params = [option("context", typer.Context, None), option(MODEL_ARG, argument, None), option("model", flag, default)]
    return lambda command: extend(
        command, "model", params, lambda v: pick_model(v["context"], v[MODEL_ARG], v["model"], what), place="first"
    )


# ---- where outputs go ------------------------------------------------------------------------------------
def run_folder(command: str, model: str, source: str, run_name: str | None) -> Path:
    """results/<run-name>, the name given or made of the command, the model's name, the text's source and a stamp."""
    from infoeval.input.prepare import default_run_name

    return Path("results") / (run_name or default_run_name(command, ModelSettings(model=model), source))


def text_source(data: dict) -> str:
    """The text's source name in a result's provenance (a file's stem, a dataset, 'prompt', ...)."""
    return data["provenance"]["text"]["source"]

"""What every command shares: option types, --config TOML defaults, settings and output paths."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from infoeval.settings import ModelSettings, TextSettings, WindowSettings
from infoeval.errors import UsageError
from infoeval.models import DEFAULT_MODEL
from infoeval.text import DATASETS


def read_toml(path: Path, what: str) -> dict:
    """A TOML file as a dict; a missing or invalid file is a usage error naming it (``what``: "config file")."""
    import tomllib

    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{what} '{path}' does not exist") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise UsageError(f"{what} '{path}' is not valid TOML: {e}") from None


def _load_config(ctx: typer.Context, param, value: Optional[Path]) -> Optional[Path]:
    """--config FILE.toml: its keys (option names, '-' or '_') become this command's defaults; options given on
    the command line still win. Keys may sit at the top level or under a table named after the command."""
    if value is None:
        return value
    data = read_toml(Path(value), "config file")
    section = data.get(ctx.info_name, {k: v for k, v in data.items() if not isinstance(v, dict)})
    allowed = {p.name for p in ctx.command.params if p.name != "config"}
    defaults = {}
    for key, val in section.items():
        name = key.replace("-", "_")
        if name not in allowed:
            raise UsageError(f"config file '{value}': unknown key '{key}' for {ctx.info_name}; allowed: {', '.join(sorted(allowed))}")
        if name == "schemes" and isinstance(val, list):
            val = ",".join(val)
        defaults[name] = val
    ctx.default_map = {**(ctx.default_map or {}), **defaults}
    return value


# ---- reusable option types -------------------------------------------------------------------------------
ModelOpt = Annotated[str, typer.Option("--model", "-m", help=f"HF folder, hub id (org/name), .gguf file, or '{DEFAULT_MODEL}'.")]
DeviceOpt = Annotated[str, typer.Option(help="auto (CUDA when present), cpu, cuda or cuda:N.")]
DtypeOpt = Annotated[str, typer.Option(help="auto (float32 on CPU, bfloat16 on CUDA), float32, bfloat16, float16.")]
DeviceMapOpt = Annotated[Optional[str], typer.Option(help="accelerate device_map for models larger than one device, e.g. auto.")]
TextOpt = Annotated[Optional[Path], typer.Option("--text", "-t", help="A UTF-8 text file to score.")]
DatasetOpt = Annotated[Optional[str], typer.Option(help=f"Built-in text: {', '.join(DATASETS)} (default python-docs).")]
DataDirOpt = Annotated[Optional[Path], typer.Option(help="Folder holding wikitext-2-raw/ or tinyshakespeare/ (or set INFOEVAL_DATA_DIR).")]
DEFAULT_MAX_TOKENS = "8192"
MaxTokensOpt = Annotated[
    str, typer.Option(help="Score at most this many tokens, or 'all' for the whole text (the default keeps a first run to minutes).")
]


def _max_tokens(value: str | int) -> int | None:
    if str(value).strip().lower() == "all":
        return None
    try:
        n = int(value)
    except ValueError:
        raise UsageError(f"--max-tokens '{value}' is not allowed; give a positive integer or 'all'") from None
    if n < 1:
        raise UsageError(f"--max-tokens {n} is not allowed; give a positive integer or 'all'")
    return n
CtxOpt = Annotated[int, typer.Option(help="Window length in tokens (n_ctx).")]
StrideOpt = Annotated[Optional[int], typer.Option(help="Tokens between window starts (default = ctx); ≤ ctx.")]
ProtocolOpt = Annotated[str, typer.Option(help="rolling (every token scored once) or llama.cpp (llama-perplexity's chunks).")]
PrefixOpt = Annotated[str, typer.Option(help="Token put before the text: auto (BOS, else EOS), bos, eos or none.")]
SchemesOpt = Annotated[str, typer.Option(help="Comma-separated schemes: int<bits>-channel | int<bits>-g<N> [-asym].")]
IncludeOpt = Annotated[Optional[list[str]], typer.Option(help="Also quantize modules matching this glob (repeatable), e.g. lm_head.")]
ExcludeOpt = Annotated[Optional[list[str]], typer.Option(help="Do not quantize modules matching this glob (repeatable).")]
CsvOpt = Annotated[Optional[Path], typer.Option(help="Write the summary CSV here (a row per variant, or per compressor).")]
JsonOpt = Annotated[Optional[Path], typer.Option(help="Write metrics and provenance as JSON here.")]
PositionsOpt = Annotated[Optional[Path], typer.Option(help="Write per-position columns as CSV here.")]
OutDirOpt = Annotated[Optional[Path], typer.Option(help="Folder for summary.csv, result.json, positions.csv (default results/<run-name>/).")]
RunNameOpt = Annotated[Optional[str], typer.Option(help="Name of the run folder under results/.")]
ConfigOpt = Annotated[
    Optional[Path],
    typer.Option("--config", is_eager=True, callback=_load_config, help="TOML file of option defaults (see configs/)."),
]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")]


def settings(model, device, dtype, device_map, text, dataset, data_dir, max_tokens, ctx, stride, protocol, prefix):
    return (
        ModelSettings(model, device, dtype, device_map),
        TextSettings(text, dataset, data_dir, _max_tokens(max_tokens)),
        WindowSettings(ctx, stride, protocol, prefix),
    )


def output_paths_for(command: str, ms: ModelSettings, result: dict, csv, json_, positions, out_dir, run_name) -> dict[str, Path]:
    from infoeval.results import output_paths
    from infoeval.prepare import default_run_name

    name = run_name or default_run_name(command, ms, result["provenance"]["text"]["source"])
    return output_paths(csv, json_, positions, out_dir, Path("results") / name)

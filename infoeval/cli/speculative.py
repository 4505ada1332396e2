"""Commands for speculative decoding and distillation (issue 4): spec-accept, spec-decode, distill, temperature.

Each command parses options, calls ``infoeval.speculative`` and renders; p = target/teacher, q = draft/student.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from infoeval.cli.options import (
    DEFAULT_MAX_TOKENS, ConfigOpt, CsvOpt, CtxOpt, DataDirOpt, DatasetOpt, DeviceMapOpt, DeviceOpt, DtypeOpt, JsonOpt,
    MaxTokensOpt, ModelOpt, OutDirOpt, PositionsOpt, PrefixOpt, ProtocolOpt, QuietOpt, RunNameOpt, StrideOpt, TextOpt,
    output_paths_for, settings,
)
from infoeval.errors import UsageError
from infoeval.models import DEFAULT_MODEL

TargetArg = Annotated[Optional[str], typer.Argument(help="The target (teacher) model; same as --model.", show_default=False)]
DraftOpt = Annotated[Optional[str], typer.Option(help="Draft: another model with the same tokenizer (folder, .gguf, hub id).")]
DraftSchemeOpt = Annotated[Optional[str], typer.Option(help="Draft: the target fake-quantized with this scheme, e.g. int4-channel.")]
DraftLayersOpt = Annotated[Optional[int], typer.Option(help="Draft: the target's first N decoder layers + its final norm and head.")]
StudentOpt = Annotated[Optional[str], typer.Option(help="Student: another model with the same tokenizer.")]
StudentSchemeOpt = Annotated[Optional[str], typer.Option(help="Student: the teacher fake-quantized with this scheme, e.g. int4-g128.")]
StudentLayersOpt = Annotated[Optional[int], typer.Option(help="Student: the teacher's first N decoder layers + its final norm and head.")]
TempsOpt = Annotated[str, typer.Option("--temperature", "--T", help="Comma-separated temperatures, e.g. 0.5,1,2.")]
PlotOpt = Annotated[Optional[Path], typer.Option(help="Also draw acceptance against target entropy (T = 1) into this PNG (needs matplotlib).")]


def _target(target: str | None, model: str) -> str:
    if target is not None and model not in (DEFAULT_MODEL, target):
        raise UsageError(f"the target is given twice ('{target}' and --model '{model}'); give one")
    return target or model


def _wrote(written: list[str]) -> None:
    Console(stderr=True).print("wrote " + ", ".join(written), style="dim")


def _check_plot(plot: Path | None) -> None:
    """Fail before the long run when --plot cannot be drawn (no plotting module or matplotlib, bad file type)."""
    import importlib.util

    if plot is None:
        return
    if importlib.util.find_spec("infoeval.plots") is None:
        raise UsageError("--plot needs infoeval.plots, which this installation lacks")
    from infoeval.plots import require

    require(plot)


def spec_accept(
    target: TargetArg = None,
    model: ModelOpt = DEFAULT_MODEL,
    draft: DraftOpt = None,
    draft_scheme: DraftSchemeOpt = None,
    draft_layers: DraftLayersOpt = None,
    temperature: TempsOpt = "1",
    text: TextOpt = None,
    dataset: DatasetOpt = None,
    data_dir: DataDirOpt = None,
    max_tokens: MaxTokensOpt = DEFAULT_MAX_TOKENS,
    ctx: CtxOpt = 512,
    stride: StrideOpt = None,
    protocol: ProtocolOpt = "rolling",
    prefix: PrefixOpt = "auto",
    device: DeviceOpt = "auto",
    dtype: DtypeOpt = "auto",
    device_map: DeviceMapOpt = None,
    csv: CsvOpt = None,
    json: JsonOpt = None,
    positions: PositionsOpt = None,
    plot: PlotOpt = None,
    out_dir: OutDirOpt = None,
    run_name: RunNameOpt = None,
    quiet: QuietOpt = False,
    config: ConfigOpt = None,
) -> None:
    """How well a draft q would draft for the target p: per-position acceptance β = Σ min(p, q), KL(p‖q), Pinsker,
    acceptance by target-entropy quartile, top-1 runs and expected tokens per target call, at each temperature."""
    from infoeval.report import RichReporter, stdout_console
    from infoeval.results import write_outputs
    from infoeval.speculative.accept import SUMMARY_COLUMNS, parse_temperatures, plot_acceptance, positions_frame, spec_accept, summary_rows
    from infoeval.speculative.drafts import DraftSettings
    from infoeval.speculative.report import print_spec_accept

    import pandas as pd

    temps = parse_temperatures(temperature)
    _check_plot(plot)
    ms, ts, ws = settings(_target(target, model), device, dtype, device_map, text, dataset, data_dir, max_tokens, ctx, stride, protocol, prefix)
    result, cols = spec_accept(ms, ts, ws, DraftSettings(draft, draft_scheme, draft_layers), temps, RichReporter(enabled=not quiet))
    paths = output_paths_for("spec-accept", ms, result, csv, json, positions, out_dir, run_name)
    written = write_outputs(paths, result, lambda: pd.DataFrame(summary_rows(result)).reindex(columns=SUMMARY_COLUMNS),
                            lambda: positions_frame(cols))  # fmt: skip
    if plot is not None:
        plot_acceptance(result, cols, plot)
        written.append(str(plot))
    print_spec_accept(stdout_console(), result)
    _wrote(written)


def spec_decode(
    target: TargetArg = None,
    model: ModelOpt = DEFAULT_MODEL,
    draft: DraftOpt = None,
    draft_scheme: DraftSchemeOpt = None,
    draft_layers: DraftLayersOpt = None,
    prompt: Annotated[str, typer.Option(help="The prompt (tokenized with the tokenizer's default special tokens).")] = "Once upon a time",
    gamma: Annotated[int, typer.Option(help="Draft tokens proposed per target call.")] = 4,
    max_new_tokens: Annotated[int, typer.Option(help="New tokens generated by each loop (EOS does not stop them).")] = 64,
    temperature: Annotated[float, typer.Option("--temperature", "--T", help="Sampling temperature of both models (> 0).")] = 1.0,
    seed: Annotated[int, typer.Option(help="Seed of each loop's random generator.")] = 0,
    repeats: Annotated[int, typer.Option(help="Time each loop this many times (alternating) and keep the fastest.")] = 1,
    verify: Annotated[int, typer.Option(help="Also check Theorem 1 by Monte Carlo with this many samples per sampler (0: no).")] = 0,
    device: DeviceOpt = "auto",
    dtype: DtypeOpt = "auto",
    device_map: DeviceMapOpt = None,
    csv: CsvOpt = None,
    json: JsonOpt = None,
    positions: Annotated[Optional[Path], typer.Option(help="Write one row per speculative round (proposed, accepted, emitted) as CSV here.")] = None,
    out_dir: OutDirOpt = None,
    run_name: RunNameOpt = None,
    quiet: QuietOpt = False,
    config: ConfigOpt = None,
) -> None:
    """Speculative sampling with KV caches (draft proposes γ tokens, the target verifies them in one pass) against
    plain sampling from the target: acceptance, tokens per target call, wall time and speed-up."""
    from infoeval.settings import ModelSettings
    from infoeval.report import RichReporter, stdout_console
    from infoeval.results import output_paths, write_outputs
    from infoeval.prepare import default_run_name
    from infoeval.speculative.drafts import DraftSettings
    from infoeval.speculative.generate import rounds_frame, spec_decode, summary_frame
    from infoeval.speculative.report import print_spec_decode

    ms = ModelSettings(_target(target, model), device, dtype, device_map)
    result, spec = spec_decode(ms, DraftSettings(draft, draft_scheme, draft_layers), prompt, gamma, max_new_tokens, temperature,
                               seed, repeats, verify, RichReporter(enabled=not quiet))  # fmt: skip
    name = run_name or default_run_name("spec-decode", ms, "prompt")
    paths = output_paths(csv, json, positions, out_dir, Path("results") / name)
    written = write_outputs(paths, result, lambda: summary_frame(result), lambda: rounds_frame(spec))
    print_spec_decode(stdout_console(), result)
    _wrote(written)


def distill(
    teacher: Annotated[Optional[str], typer.Argument(help="The teacher model; same as --model.", show_default=False)] = None,
    model: ModelOpt = DEFAULT_MODEL,
    student: StudentOpt = None,
    student_scheme: StudentSchemeOpt = None,
    student_layers: StudentLayersOpt = None,
    temperatures: Annotated[str, typer.Option("--T", "--temperatures", help="Comma-separated distillation temperatures.")] = "1,2,4,8",
    alpha: Annotated[float, typer.Option(help="Weight α of the hard loss in L = α·H(y, q) + (1 − α)·T²·KL(p_T‖q_T).")] = 0.1,
    text: TextOpt = None,
    dataset: DatasetOpt = None,
    data_dir: DataDirOpt = None,
    max_tokens: MaxTokensOpt = DEFAULT_MAX_TOKENS,
    ctx: CtxOpt = 512,
    stride: StrideOpt = None,
    protocol: ProtocolOpt = "rolling",
    prefix: PrefixOpt = "auto",
    device: DeviceOpt = "auto",
    dtype: DtypeOpt = "auto",
    device_map: DeviceMapOpt = None,
    csv: CsvOpt = None,
    json: JsonOpt = None,
    positions: PositionsOpt = None,
    out_dir: OutDirOpt = None,
    run_name: RunNameOpt = None,
    quiet: QuietOpt = False,
    config: ConfigOpt = None,
) -> None:
    """Distillation terms per temperature: hard CE, KL(p_T‖q_T), T²·KL and the total loss, the teacher's entropy and
    tail mass, and the norm of the soft gradient with and without the T² factor."""
    import pandas as pd

    from infoeval.report import RichReporter, stdout_console
    from infoeval.results import write_outputs
    from infoeval.speculative.accept import parse_temperatures
    from infoeval.speculative.distill import SUMMARY_COLUMNS, distill, positions_frame
    from infoeval.speculative.drafts import DraftSettings
    from infoeval.speculative.report import print_distill

    temps = parse_temperatures(temperatures, "--T")
    ms, ts, ws = settings(_target(teacher, model), device, dtype, device_map, text, dataset, data_dir, max_tokens, ctx, stride, protocol, prefix)
    ds = DraftSettings(student, student_scheme, student_layers, role="student")
    result, cols = distill(ms, ts, ws, ds, temps, alpha, RichReporter(enabled=not quiet))
    paths = output_paths_for("distill", ms, result, csv, json, positions, out_dir, run_name)
    written = write_outputs(paths, result, lambda: pd.DataFrame(result["rows"]).reindex(columns=SUMMARY_COLUMNS),
                            lambda: positions_frame(cols))  # fmt: skip
    print_distill(stdout_console(), result)
    _wrote(written)


def temperature(
    logits: Annotated[Optional[str], typer.Option(help="Comma-separated logits, e.g. 9.1,6.2,4.6,3.3.")] = None,
    labels: Annotated[Optional[str], typer.Option(help="Comma-separated class names for --logits, e.g. cat,lion,lynx,dog.")] = None,
    model: Annotated[Optional[str], typer.Option("--model", "-m", help=f"Use this model's next-token logits after --prompt (e.g. {DEFAULT_MODEL}).")] = None,
    prompt: Annotated[Optional[str], typer.Option(help="The prompt whose next-token logits are shown (with --model).")] = None,
    top: Annotated[int, typer.Option(help="With --model: show the N likeliest tokens.", min=1)] = 8,
    temperatures: Annotated[str, typer.Option("--T", "--temperatures", help="Comma-separated temperatures.")] = "0.25,0.5,1,2,4",
    device: DeviceOpt = "auto",
    dtype: DtypeOpt = "auto",
    csv: Annotated[Optional[Path], typer.Option(help="Write the table (a row per T) as CSV here.")] = None,
    json: JsonOpt = None,
    out_dir: OutDirOpt = None,
    run_name: RunNameOpt = None,
    config: ConfigOpt = None,
) -> None:
    """The temperature slider as a table: softmax(z/T) per class, top probability, tail mass and entropy in bits,
    for --logits given by hand or a model's next-token logits (--model M --prompt TEXT)."""
    from infoeval.settings import ModelSettings
    from infoeval.report import stdout_console
    from infoeval.results import output_paths, write_outputs
    from infoeval.prepare import default_run_name
    from infoeval.speculative.accept import parse_temperatures
    from infoeval.speculative.report import print_temperature
    from infoeval.speculative.temperature import parse_logits, summary_frame, temperature_table

    temps = parse_temperatures(temperatures, "--T")
    if (logits is None) == (model is None):
        raise UsageError("give either --logits Z,Z,... (optionally --labels) or --model M --prompt TEXT")
    if model is not None:
        if prompt is None:
            raise UsageError("--model needs --prompt TEXT (the next-token logits after it are shown)")
        if labels is not None:
            raise UsageError("--labels goes with --logits; with --model the tokens are the labels")
        from infoeval.models import load_model, resolve_device, resolve_dtype

        dev = resolve_device(device)
        result = temperature_table(temps, loaded=load_model(model, dev, resolve_dtype(dtype, dev)), prompt=prompt, top=top)
    else:
        if prompt is not None:
            raise UsageError("--prompt goes with --model; with --logits there is no prompt")
        result = temperature_table(temps, logits=parse_logits(logits), labels=labels)
    name = run_name or default_run_name("temperature", ModelSettings(model or "logits"), "prompt" if model else "table")
    paths = output_paths(csv, json, None, out_dir, Path("results") / name)
    paths.pop("positions", None)
    written = write_outputs(paths, result, lambda: summary_frame(result), None)
    print_temperature(stdout_console(), result)
    _wrote(written)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the infoeval app."""
    app.command("spec-accept")(spec_accept)
    app.command("spec-decode")(spec_decode)
    app.command("distill")(distill)
    app.command("temperature")(temperature)

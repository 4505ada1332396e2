"""Commands for CI regression gates: `reference`, `gate`, `quantize`. Options only; the work is in infoeval.gating (through infoeval.api.gates)."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Annotated, Optional

import typer

from infoeval.cli.options import (
    DEVICE_DEFAULT, DTYPE_DEFAULT, DeviceMapOpt, DeviceOpt, DtypeOpt, ExcludeOpt, IncludeOpt, model_options,
    typed, calibration_options, RunOptions, FloorOpt, FloorSeedOpt, extend, option, typer_type,
)  # fmt: skip
from infoeval.cli.compare import GATE_TABLES, TableOpt, check_table
from infoeval.cli.output import PageOptions, as_json, page_extras, page_options
from infoeval.cli.outputs import Outputs, output_options, scoring_options

CandidateArg = Annotated[
    Optional[str],
    typer.Argument(metavar="CANDIDATE", show_default=False,
                   help="Candidate checkpoint: HF folder, hub id or .gguf (default: the reference's own model, with --scheme)."),
]  # fmt: skip
CandidateOpt = Annotated[Optional[str], typer.Option("--model", "-m", help="The candidate; same as CANDIDATE.", show_default=False)]
OutRefOpt = Annotated[Path, typer.Option("--out", "-o", help="Reference file to write (.safetensors).")]
TopKOpt = Annotated[int, typer.Option(help="Most likely tokens kept per position.")]
TailSamplesOpt = Annotated[int, typer.Option(help="Tokens sampled from the tail per position (unbiased KL; 0: lower bound only).")]
SeedOpt = Annotated[int, typer.Option(help="Seed of the tail sampling.")]
ReferenceOpt = Annotated[Path, typer.Option("--reference", "-r", help="Reference file written by `infoeval reference`.")]
GateSchemeOpt = Annotated[Optional[str], typer.Option(help="Quantize the candidate with this scheme first: int8-channel (infoeval's rounding) or a library's, e.g. hqq:int4-g64.")]
LimitsOpt = Annotated[Optional[Path], typer.Option(help="TOML file with a \\[limits] table (see configs/gates/default.toml).")]
ConfidenceOpt = Annotated[float, typer.Option(help="One-sided confidence at which limits on means must hold.")]
PointOpt = Annotated[bool, typer.Option("--point", help="Compare point estimates instead of confidence bounds.")]
BaselineOpt = Annotated[Optional[Path], typer.Option(help="An earlier `gate` run: its run folder (result.json and positions.csv: paired on the same positions, fail when worse beyond noise) or a result JSON (by --baseline-tolerance).")]
BaselineToleranceOpt = Annotated[float, typer.Option(help="Relative tolerance for --baseline.")]
SequentialOpt = Annotated[bool, typer.Option("--sequential", help="Visit windows in a fixed seeded order and stop as soon as the verdict is certain (anytime-valid confidence sequences).")]
# the limits the API takes (api.gates.LIMITS), each an option --max-kl-mean … of float or None
LIMIT_HELP = {"max_kl_mean": "Limit on mean KL(reference‖candidate), nats.", "max_kl_p99": "Limit on the 99th percentile of per-position KL, nats.",
              "min_top1": "Limit on top-1 agreement (fraction).", "max_ppl_ratio": "Limit on PPL candidate / PPL reference.",
              "max_bpb_increase": "Limit on the bits/byte increase."}  # fmt: skip
# the sequential gate's settings (api.gates.SEQUENTIAL: SequentialSettings' fields, whose types and defaults they take)
SEQUENTIAL_HELP = {
    "alpha": "the error level of the verdict, in (0, 0.5): P(false PASS) ≤ alpha and P(false FAIL) ≤ alpha.",
    "min_tokens": "decide nothing before this many scored positions.",
    "max_tokens": "the budget in scored positions (default: the whole reference).",
    "order": "the windows' visiting order, seeded (a permutation fixed by --order-seed) or text.",
    "order_seed": "the seed of the visiting order.",
    "undecided": "the verdict when the budget runs out undecided: fail, or pass (then the fixed-budget verdict).",
    "round_windows": "windows per rank evaluated between two decisions (the verdict and the stopping window do not depend on it).",
}
JunitOpt = Annotated[Optional[Path], typer.Option(help="Write JUnit XML here (one testcase per limit).")]
MarkdownOpt = Annotated[Optional[Path], typer.Option(help="Write a markdown summary here (e.g. $GITHUB_STEP_SUMMARY).")]
QuantSchemeOpt = Annotated[str, typer.Option(help="Scheme: int<bits>-channel | int<bits>-g<N> [-asym].")]
OutCheckpointOpt = Annotated[Path, typer.Option("--out", "-o", help="Folder to write the checkpoint to.")]
ForceOpt = Annotated[bool, typer.Option("--force", help="Replace --out if it exists.")]
OneRecipeOpt = Annotated[Optional[Path], typer.Option("--recipe", help="Recipe TOML (unit → scheme, as `infoeval mix` writes) applied instead of one --scheme.")]
FormatOpt = Annotated[
    str, typer.Option("--format", help="fake (dequantized float weights) or pack-quantized (real int4 codes, compressed-tensors).")
]


@scoring_options("quiet")
def reference(
    model: str = None,  # MODEL or --model (see model_options)
    out: OutRefOpt = Path("reference.safetensors"),
    top_k: TopKOpt = 64,
    tail_samples: TailSamplesOpt = 128,
    seed: SeedOpt = 0,
    run: RunOptions = None,  # the shared text, window and device options (see run_options)
    outputs: Outputs = None,  # the output options (see output_options)
) -> None:
    """One pass of the reference model writes a compact, self-validating reference file for `gate`: top-K
    log-probs, tail mass and tail samples per scored position, the token ids of every window, provenance."""
    from infoeval.api.gates import reference as build_reference
    from infoeval.gating.report import reference_summary_table

    info = as_json(build_reference(model, out=out, top_k=top_k, tail_samples=tail_samples, seed=seed, progress=not outputs.quiet,
                                   **run.keywords()))  # fmt: skip
    outputs.emit(info, command="reference", model=model, source="", tables=lambda console, data: console.print(reference_summary_table(data)),
                 also_written=(f"{out} ({info['file_bytes']:,} bytes)",))  # fmt: skip


def limit_options(command):
    """Give ``gate`` an option per limit the API takes (--max-kl-mean … --max-bpb-increase), declared once here; they
    reach it as one ``limit_values`` dict, the API's keywords."""
    from infoeval.api.gates import LIMITS

    params = [option(n, Annotated[Optional[float], typer.Option(help=LIMIT_HELP[n], show_default=False)], None) for n in LIMITS]
    return extend(command, "limit_values", params, lambda values: {n: values[n] for n in LIMITS}, place="here")


def sequential_options(command):
    """Give ``gate`` the sequential gate's options (--alpha … --round-windows), their types and defaults
    SequentialSettings' own, declared once here; they reach it as one ``sequential_values`` dict, the API's keywords:
    all of them with --sequential, else those typed, which the API refuses ('--alpha needs --sequential'; a --config
    default is not typed)."""
    import dataclasses

    from infoeval.api.gates import SEQUENTIAL
    from infoeval.gating.sequential_gate import SequentialSettings

    fields = dict(zip(SEQUENTIAL, dataclasses.fields(SequentialSettings)))
    hints = typing.get_type_hints(SequentialSettings)
    params = [option(n, Annotated[typer_type(hints[f.name]), typer.Option(help=f"--sequential: {SEQUENTIAL_HELP[n]}", show_default=f.default is not None)],
                     f.default) for n, f in fields.items()]  # fmt: skip
    given = lambda v: {n: v[n] for n in SEQUENTIAL if v["sequential"] or typed(v["context"], n, v[n])}  # noqa: E731
    return extend(command, "sequential_values", params, given, place="here")


@output_options("csv", "json", "positions", "folder", "quiet")
@calibration_options
@model_options(CandidateArg, CandidateOpt, None, "the candidate")
@page_options
@sequential_options
@limit_options
def gate(
    context: typer.Context,
    model: str | None = None,  # CANDIDATE or --model (see model_options)
    reference: ReferenceOpt = Path("reference.safetensors"),
    scheme: GateSchemeOpt = None,
    recipe: OneRecipeOpt = None,
    limits: LimitsOpt = None,
    limit_values: dict = None,  # --max-kl-mean … --max-bpb-increase (see limit_options)
    confidence: ConfidenceOpt = 0.95,
    point: PointOpt = False,
    baseline: BaselineOpt = None,
    baseline_tolerance: BaselineToleranceOpt = 0.05,
    sequential: SequentialOpt = False,
    sequential_values: dict = None,  # --alpha … --round-windows (see sequential_options)
    junit: JunitOpt = None, markdown: MarkdownOpt = None,
    page: PageOptions = None,  # --topk and --html (see page_options)
    floor: FloorOpt = "sampled", floor_seed: FloorSeedOpt = 0,  # the noise floor beside the candidate
    device: DeviceOpt = DEVICE_DEFAULT,
    dtype: DtypeOpt = DTYPE_DEFAULT,
    device_map: DeviceMapOpt = None,
    table: TableOpt = "default",
    outputs: Outputs = None,  # the output options (see output_options)
    calibration_settings=None,  # --calibration and its options, for a calibrated --scheme (see calibration_options)
) -> None:
    """Run only the candidate on the reference's token ids and check it against limits: exit 0 pass, 1 fail."""
    from infoeval.api.gates import gate as run_gate
    from infoeval.errors import EXIT_GATE_FAILED

    llama = check_table(table, GATE_TABLES) == "llama.cpp"
    result = run_gate(model, reference=reference, scheme=scheme, recipe=recipe, limits=limits, confidence=confidence, point=point, baseline=baseline,
                      baseline_tolerance=baseline_tolerance, sequential=sequential, top_k=page.top_k, floor=floor, floor_seed=floor_seed,
                      calibration=calibration_settings, device=device, dtype=dtype, device_map=device_map, progress=not outputs.quiet,
                      **limit_values, **sequential_values)  # fmt: skip
    data = _emit_gate(result, outputs, scheme or (recipe.stem if recipe else None), {junit: "junit", markdown: "markdown"}, llama, page.html)
    if not data["passed"]:
        raise typer.Exit(EXIT_GATE_FAILED)


def _emit_gate(result, outputs: Outputs, suffix: str | None, extra_paths: dict, llama: bool, html: Path | None) -> dict:
    """Write the gate's result files (JSON, CSVs, JUnit, markdown, the tokens' text and the page; ``outputs``: the
    output options, ``suffix``: the scheme or recipe that names the run) and print its tables."""

    from infoeval.gating.report import floor_lines, gate_table, junit_xml, markdown, print_gate_llamacpp, summary_table

    makers = {"junit": lambda: junit_xml(data), "markdown": lambda: markdown(data)}
    files = {path: makers[kind] for path, kind in extra_paths.items() if path}
    data, cols, frame = result.to_json(), result.columns, lambda: result.positions  # the frame is built once, when first read
    title = " ".join(["gate:", data["candidate"]["spec"], data["candidate"]["scheme"] or ""]).strip()
    extras = lambda paths: files | page_extras(data, frame, cols.get("vocab", {}), paths, html, title)  # noqa: E731
    model = data["candidate"]["spec"] + (f"-{suffix}" if suffix else "")
    return outputs.emit(data, command="gate", model=model, source="reference", positions=frame, extras=extras,
         tables=print_gate_llamacpp if llama else lambda console, d: (console.print(summary_table(d)), console.print(gate_table(d)),
                                                                      *(console.print(line) for line in floor_lines(d))))  # fmt: skip


@output_options()
@model_options()
def quantize(
    context: typer.Context,
    model: str = None,  # MODEL or --model (see model_options)
    scheme: QuantSchemeOpt = "int8-channel",
    recipe: OneRecipeOpt = None,
    out: OutCheckpointOpt = Path("quantized"),
    include: IncludeOpt = None,
    exclude: ExcludeOpt = None,
    force: ForceOpt = False,
    format: FormatOpt = "fake",
    device: DeviceOpt = DEVICE_DEFAULT,
    dtype: DtypeOpt = DTYPE_DEFAULT,
    outputs: Outputs = None,  # --config (see output_options)
) -> None:
    """Write a fake-quantized checkpoint (safetensors, config, tokenizer, per-layer report) that transformers loads."""
    from infoeval.api.gates import quantize as write_checkpoint
    from infoeval.output.report import stdout_console

    typed_scheme = getattr(context.get_parameter_source("scheme"), "name", "") != "DEFAULT"
    info = write_checkpoint(model, out=out, scheme=scheme if typed_scheme or recipe is None else None, recipe=recipe,
                            include=include or (), exclude=exclude or (), force=force, format=format, device=device, dtype=dtype)  # fmt: skip
    stdout_console().print(
        f"wrote {info['out']} ({info['format']}): {info['scheme']}, {info['layers_quantized']} layers quantized, {info['layers_skipped']} "
        f"skipped, SQNR min {info['sqnr_db_min']:.2f} dB / mean {info['sqnr_db_mean']:.2f} dB"
    )


def register(app: typer.Typer) -> None:
    """Add reference, gate and quantize to the infoeval app."""
    app.command("reference")(reference)
    app.command("gate")(gate)
    app.command("quantize")(quantize)

"""Commands for CI regression gates: `reference`, `gate`, `quantize`. Options only; the work is in infoeval.gating
(through infoeval.api.gates)."""

from __future__ import annotations

from pathlib import Path

import typer

from infoeval.cli.compare import GATE_TABLES, LLAMACPP_TABLE, TableOpt, check_table
from infoeval.cli.gate_options import (
    BaselineOpt,
    BaselineToleranceOpt,
    CandidateArg,
    CandidateOpt,
    ConfidenceOpt,
    ForceOpt,
    FormatOpt,
    GateSchemeOpt,
    HeadOpt,
    JunitOpt,
    LimitsOpt,
    MarkdownOpt,
    OneRecipeOpt,
    OutCheckpointOpt,
    OutRefOpt,
    PointOpt,
    QuantSchemeOpt,
    ReferenceFormatOpt,
    ReferenceOpt,
    SeedOpt,
    SequentialOpt,
    TailSamplesOpt,
    TopKOpt,
    limit_options,
    sequential_options,
)
from infoeval.cli.options import (
    DEVICE_DEFAULT,
    DTYPE_DEFAULT,
    DeviceMapOpt,
    DeviceOpt,
    DtypeOpt,
    RunOptions,
    model_options,
)
from infoeval.cli.output import PageOptions, as_json, page_extras, page_options
from infoeval.cli.outputs import Outputs, output_options, scoring_options
from infoeval.cli.variant_options import ExcludeOpt, FloorOpt, FloorSeedOpt, IncludeOpt, calibration_options
from infoeval.errors import EXIT_GATE_FAILED


@scoring_options("quiet")
def reference(
    model: str = None,  # MODEL or --model (see model_options)
    out: OutRefOpt = Path("reference.safetensors"),
    top_k: TopKOpt = 64,
    tail_samples: TailSamplesOpt = 128,
    seed: SeedOpt = 0,
    format: ReferenceFormatOpt = "topk",
    head: HeadOpt = "stored",
    run: RunOptions = None,  # the shared text, window and device options (see run_options)
    outputs: Outputs = None,  # the output options (see output_options)
) -> None:
    """One pass of the reference model writes a self-validating reference file for `gate`: top-K log-probs, tail
    mass and tail samples per scored position (--format topk), or the last hidden states and the head (--format
    hidden: exact), the token ids of every window, provenance."""
    from infoeval.api.gates import reference as build_reference
    from infoeval.gating.report import reference_summary_table

    info = as_json(
        build_reference(
            model,
            out=out,
            top_k=top_k,
            tail_samples=tail_samples,
            seed=seed,
            format=format,
            head=head,
            progress=not outputs.quiet,
            **run.keywords(),
        )
    )
    outputs.emit(
        info,
        command="reference",
        model=model,
        source="",
        tables=lambda console, data: console.print(reference_summary_table(data)),
        also_written=(f"{out} ({info['file_bytes']:,} bytes)",),
    )


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
    junit: JunitOpt = None,
    markdown: MarkdownOpt = None,
    page: PageOptions = None,  # --topk and --html (see page_options)
    floor: FloorOpt = "sampled",
    floor_seed: FloorSeedOpt = 0,  # the noise floor beside the candidate
    device: DeviceOpt = DEVICE_DEFAULT,
    dtype: DtypeOpt = DTYPE_DEFAULT,
    device_map: DeviceMapOpt = None,
    table: TableOpt = "default",
    outputs: Outputs = None,  # the output options (see output_options)
    calibration_settings=None,  # --calibration and its options, for a calibrated --scheme (see calibration_options)
) -> None:
    """Run only the candidate on the reference's token ids and check it against limits: exit 0 pass, 1 fail."""
    from infoeval.api.gates import gate as run_gate
    from infoeval.output.results import check_file_option

    llama = check_table(table, GATE_TABLES) == LLAMACPP_TABLE
    check_file_option(junit, "--junit")
    check_file_option(markdown, "--markdown")
    result = run_gate(
        model,
        reference=reference,
        scheme=scheme,
        recipe=recipe,
        limits=limits,
        confidence=confidence,
        point=point,
        baseline=baseline,
        baseline_tolerance=baseline_tolerance,
        sequential=sequential,
        top_k=page.top_k,
        floor=floor,
        floor_seed=floor_seed,
        calibration=calibration_settings,
        device=device,
        dtype=dtype,
        device_map=device_map,
        progress=not outputs.quiet,
        **limit_values,
        **sequential_values,
    )
    suffix = scheme or (recipe.stem if recipe else None)  # names the run
    data = _emit_gate(result, outputs, suffix, {junit: "junit", markdown: "markdown"}, llama, page.html)
    if not data["passed"]:
        raise typer.Exit(EXIT_GATE_FAILED)


def _emit_gate(result, outputs: Outputs, suffix: str | None, extra_paths: dict, llama: bool, html: Path | None) -> dict:
    """Write the gate's result files (JSON, CSVs, JUnit, markdown, the tokens' text and the page; ``outputs``: the
    output options, ``suffix``: the scheme or recipe that names the run) and print its tables."""

    from infoeval.gating.ci_report import junit_xml, markdown
    from infoeval.gating.report import floor_lines, gate_table, print_gate_llamacpp, summary_table

    makers = {"junit": lambda: junit_xml(data), "markdown": lambda: markdown(data)}
    files = {path: makers[kind] for path, kind in extra_paths.items() if path}
    data, cols, frame = (
        result.to_json(),
        result.columns,
        lambda: result.positions,
    )  # the frame is built once, when first read
    title = " ".join(["gate:", data["candidate"]["spec"], data["candidate"]["scheme"] or ""]).strip()
    extras = lambda paths: files | page_extras(data, frame, cols.get("vocab", {}), paths, html, title)  # noqa: E731
    model = data["candidate"]["spec"] + (f"-{suffix}" if suffix else "")
    return outputs.emit(
        data,
        command="gate",
        model=model,
        source="reference",
        positions=frame,
        extras=extras,
        tables=print_gate_llamacpp
        if llama
        else lambda console, d: (
            console.print(summary_table(d)),
            console.print(gate_table(d)),
            *(console.print(line) for line in floor_lines(d)),
        ),
    )


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
    info = write_checkpoint(
        model,
        out=out,
        scheme=scheme if typed_scheme or recipe is None else None,
        recipe=recipe,
        include=include or (),
        exclude=exclude or (),
        force=force,
        format=format,
        device=device,
        dtype=dtype,
    )
    stdout_console().print(
        f"wrote {info['out']} ({info['format']}): {info['scheme']}, {info['layers_quantized']} layers "
        f"quantized, {info['layers_skipped']} "
        f"skipped, SQNR min {info['sqnr_db_min']:.2f} dB / mean {info['sqnr_db_mean']:.2f} dB"
    )


def register(app: typer.Typer) -> None:
    """Add reference, gate and quantize to the infoeval app."""
    app.command("reference")(reference)
    app.command("gate")(gate)
    app.command("quantize")(quantize)

"""Commands for CI regression gates: `reference`, `gate`, `quantize`. Options only; the work is in infoeval.gating
(through infoeval.api.gates)."""

from __future__ import annotations

from pathlib import Path

import typer

from infoeval.cli.command import command
from infoeval.cli.outputs import Outputs, emit
from infoeval.errors import EXIT_GATE_FAILED
from infoeval.gating.request import GateOutputs, GateRequest, QuantizeRequest, ReferenceRequest
from infoeval.output.destinations import LLAMACPP_TABLE
from infoeval.output.emit import as_json
from infoeval.report.page import page_extras


def reference(request: ReferenceRequest, outputs: Outputs) -> None:
    """One pass of the reference model writes a self-validating reference file for `gate`: top-K log-probs, tail
    mass and tail samples per scored position (--format topk), or the last hidden states and the head (--format
    hidden: exact), the token ids of every window, provenance."""
    from infoeval.api.gates import reference as build_reference
    from infoeval.gating.tables import reference_summary_table

    result = build_reference(outputs.running(request))
    if request.cache_key:  # the key alone on stdout, for a workflow to read
        typer.echo(result.key)
        return
    info = as_json(result)
    emit(
        outputs,
        info,
        command="reference",
        model=request.model.model,
        source="",
        tables=lambda console, data: console.print(reference_summary_table(data)),
        also_written=(f"{request.out} ({info['file_bytes']:,} bytes)",),
    )


def gate(request: GateRequest, outputs: GateOutputs) -> None:
    """Run only the candidate on the reference's token ids and check it against limits: exit 0 pass, 1 fail."""
    from infoeval.api.gates import gate as run_gate

    result = run_gate(outputs.running(request))
    suffix = request.scheme or (request.recipe.stem if request.recipe else None)  # names the run
    extra_paths = {outputs.junit: "junit", outputs.markdown: "markdown"}
    data = _emit_gate(result, outputs, suffix, extra_paths, outputs.table == LLAMACPP_TABLE, outputs.html)
    if not data["passed"]:
        raise typer.Exit(EXIT_GATE_FAILED)


def _emit_gate(result, outputs: Outputs, suffix: str | None, extra_paths: dict, llama: bool, html: Path | None) -> dict:
    """Write the gate's result files (JSON, CSVs, JUnit, markdown, the tokens' text and the page; ``outputs``: the
    output options, ``suffix``: the scheme or recipe that names the run) and print its tables."""

    from infoeval.gating.ci_summary import junit_xml, markdown
    from infoeval.gating.tables import floor_lines, gate_table, print_gate_llamacpp, summary_table

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
    return emit(
        outputs,
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


def quantize(request: QuantizeRequest, outputs: None) -> None:
    """Write a fake-quantized checkpoint (safetensors, config, tokenizer, per-layer report) that transformers loads."""
    from infoeval.api.gates import quantize as write_checkpoint
    from infoeval.output.tables import stdout_console

    info = write_checkpoint(request)
    stdout_console().print(
        f"wrote {info['out']} ({info['format']}): {info['scheme']}, {info['layers_quantized']} layers "
        f"quantized, {info['layers_skipped']} "
        f"skipped, SQNR min {info['sqnr_db_min']:.2f} dB / mean {info['sqnr_db_mean']:.2f} dB"
    )


def register(app: typer.Typer) -> None:
    """Add reference, gate and quantize to the infoeval app."""
    app.command("reference")(command(ReferenceRequest, reference, outputs=Outputs, output_names=("quiet",)))
    gate_outputs = ("csv", "json", "positions", "folder", "quiet", "html", "junit", "markdown", "table")
    app.command("gate")(
        command(
            GateRequest,
            gate,
            outputs=GateOutputs,
            output_names=gate_outputs,
            metavar="CANDIDATE",
            what="the candidate",
            positional_help="Candidate checkpoint: HF folder, hub id or .gguf (default: the reference's own model, "
            "with --scheme).",
            helps={"model": "The candidate; same as CANDIDATE."},
        )
    )
    app.command("quantize")(command(QuantizeRequest, quantize))

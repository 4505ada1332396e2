"""Commands for CI regression gates: `reference`, `gate`, `quantize`. Options only; the work is in infoeval.gate."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from infoeval.cli.options import (
    DEFAULT_MAX_TOKENS, ConfigOpt, CsvOpt, CtxOpt, DataDirOpt, DatasetOpt, DeviceMapOpt, DeviceOpt, DtypeOpt,
    ExcludeOpt, IncludeOpt, JsonOpt, MaxTokensOpt, OutDirOpt, PositionsOpt, PrefixOpt, ProtocolOpt, QuietOpt,
    RunNameOpt, StrideOpt, TextOpt, output_paths_for, read_toml, settings,
)
from infoeval.settings import ModelSettings
from infoeval.errors import UsageError
from infoeval.models import DEFAULT_MODEL

ModelArg = Annotated[str, typer.Argument(help=f"HF folder, hub id, .gguf file or '{DEFAULT_MODEL}'.")]
CandidateArg = Annotated[
    Optional[str],
    typer.Argument(help="Candidate checkpoint: HF folder, hub id or .gguf (default: the reference's own model, with --scheme)."),
]


def _limits_from(limits_file: Optional[Path], overrides: dict) -> tuple:
    from infoeval.gate.limits import DEFAULT_LIMITS, parse_limits

    raw = dict(DEFAULT_LIMITS)
    if limits_file is not None:
        data = read_toml(limits_file, "limits file")
        raw = data.get("limits", data)
        if not isinstance(raw, dict):
            raise UsageError(f"limits file '{limits_file}': [limits] must be a table of name = number")
    raw = {**raw, **{k: v for k, v in overrides.items() if v is not None}}
    return tuple(parse_limits(raw))


def register(app: typer.Typer) -> None:
    """Add reference, gate and quantize to the infoeval app."""

    @app.command("reference")
    def reference(
        model: ModelArg = DEFAULT_MODEL,
        out: Annotated[Path, typer.Option("--out", "-o", help="Reference file to write (.safetensors).")] = Path("reference.safetensors"),
        top_k: Annotated[int, typer.Option(help="Most likely tokens kept per position.")] = 64,
        tail_samples: Annotated[int, typer.Option(help="Tokens sampled from the tail per position (unbiased KL; 0: lower bound only).")] = 128,
        seed: Annotated[int, typer.Option(help="Seed of the tail sampling.")] = 0,
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
        quiet: QuietOpt = False,
        config: ConfigOpt = None,
    ) -> None:
        """One pass of the reference model writes a compact, self-validating reference file for `gate`: top-K
        log-probs, tail mass and tail samples per scored position, the token ids of every window, provenance."""
        from infoeval.gate.report import reference_summary_table
        from infoeval.gate.pipeline import build_reference
        from infoeval.report import RichReporter, stdout_console

        ms, ts, ws = settings(model, device, dtype, device_map, text, dataset, data_dir, max_tokens, ctx, stride, protocol, prefix)
        info = build_reference(ms, ts, ws, out, top_k, tail_samples, seed, RichReporter(enabled=not quiet))
        stdout_console().print(reference_summary_table(info))
        Console(stderr=True).print(f"wrote {out} ({info['file_bytes']:,} bytes)", style="dim")

    @app.command("gate")
    def gate(
        candidate: CandidateArg = None,
        reference: Annotated[Path, typer.Option("--reference", "-r", help="Reference file written by `infoeval reference`.")] = Path("reference.safetensors"),
        scheme: Annotated[Optional[str], typer.Option(help="Fake-quantize the candidate with this scheme first, e.g. int8-channel.")] = None,
        limits: Annotated[Optional[Path], typer.Option(help="TOML file with a \\[limits] table (see configs/gates/default.toml).")] = None,
        max_kl_mean: Annotated[Optional[float], typer.Option(help="Limit on mean KL(reference‖candidate), nats.")] = None,
        max_kl_p99: Annotated[Optional[float], typer.Option(help="Limit on the 99th percentile of per-position KL, nats.")] = None,
        min_top1: Annotated[Optional[float], typer.Option(help="Limit on top-1 agreement (fraction).")] = None,
        max_ppl_ratio: Annotated[Optional[float], typer.Option(help="Limit on PPL candidate / PPL reference.")] = None,
        max_bpb_increase: Annotated[Optional[float], typer.Option(help="Limit on the bits/byte increase.")] = None,
        confidence: Annotated[float, typer.Option(help="One-sided confidence at which limits on means must hold.")] = 0.95,
        point: Annotated[bool, typer.Option("--point", help="Compare point estimates instead of confidence bounds.")] = False,
        baseline: Annotated[Optional[Path], typer.Option(help="Earlier `gate` result JSON: fail when a metric got worse than it.")] = None,
        baseline_tolerance: Annotated[float, typer.Option(help="Relative tolerance for --baseline.")] = 0.05,
        junit: Annotated[Optional[Path], typer.Option(help="Write JUnit XML here (one testcase per limit).")] = None,
        markdown: Annotated[Optional[Path], typer.Option(help="Write a markdown summary here (e.g. $GITHUB_STEP_SUMMARY).")] = None,
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
        """Run only the candidate on the reference's token ids and check it against limits: exit 0 pass, 1 fail."""
        import pandas as pd

        from infoeval.errors import EXIT_GATE_FAILED
        from infoeval.gate.report import gate_table, junit_xml, summary_table, write_text
        from infoeval.gate.report import markdown as to_markdown
        from infoeval.gate.pipeline import GateSettings, run_gate
        from infoeval.report import RichReporter, stdout_console
        from infoeval.results import write_outputs

        overrides = {"max_kl_mean": max_kl_mean, "max_kl_p99": max_kl_p99, "min_top1": min_top1,
                     "max_ppl_ratio": max_ppl_ratio, "max_bpb_increase": max_bpb_increase}  # fmt: skip
        gs = GateSettings(reference, candidate, scheme, _limits_from(limits, overrides), confidence, point, baseline, baseline_tolerance)
        ms = ModelSettings(candidate or "", device, dtype, device_map)
        result, cols = run_gate(gs, ms, RichReporter(enabled=not quiet))
        name_ms = ModelSettings(result["candidate"]["spec"] + (f"-{scheme}" if scheme else ""))
        paths = output_paths_for("gate", name_ms, {"provenance": {"text": {"source": "reference"}}}, csv, json, positions, out_dir, run_name)
        written = write_outputs(
            paths, result, lambda: pd.DataFrame(result["verdicts"]), lambda: pd.DataFrame({
                "position": range(len(cols["variant"]["nll"])), "nll_reference": cols["reference"]["nll"],
                "nll_candidate": cols["variant"]["nll"], "entropy_reference": cols["reference"]["entropy"],
                **{k: cols["variant"][k] for k in ("kl", "kl_lower", "tv", "rkl")},
                "top1_match": cols["variant"]["top1"].astype("int8")}),
        )  # fmt: skip
        if junit:
            write_text(junit, junit_xml(result))
            written.append(str(junit))
        if markdown:
            write_text(markdown, to_markdown(result))
            written.append(str(markdown))
        console = stdout_console()
        console.print(summary_table(result))
        console.print(gate_table(result))
        Console(stderr=True).print("wrote " + ", ".join(written), style="dim")
        if not result["passed"]:
            raise typer.Exit(EXIT_GATE_FAILED)

    @app.command("quantize")
    def quantize(
        model: ModelArg = DEFAULT_MODEL,
        scheme: Annotated[str, typer.Option(help="Scheme: int<bits>-channel | int<bits>-g<N> [-asym].")] = "int8-channel",
        out: Annotated[Path, typer.Option("--out", "-o", help="Folder to write the checkpoint to.")] = Path("quantized"),
        include: IncludeOpt = None,
        exclude: ExcludeOpt = None,
        force: Annotated[bool, typer.Option("--force", help="Replace --out if it exists.")] = False,
        format: Annotated[str, typer.Option("--format", help="fake (dequantized float weights) or pack-quantized (real int4 codes, compressed-tensors).")] = "fake",
        device: DeviceOpt = "auto",
        dtype: DtypeOpt = "auto",
        config: ConfigOpt = None,
    ) -> None:
        """Write a fake-quantized checkpoint (safetensors, config, tokenizer, per-layer report) that transformers loads."""
        from infoeval.quant.export import quantize_checkpoint
        from infoeval.report import stdout_console

        info = quantize_checkpoint(ModelSettings(model, device, dtype), scheme, out, tuple(include or ()), tuple(exclude or ()), force, format)
        stdout_console().print(
            f"wrote {info['out']} ({info['format']}): {info['scheme']}, {info['layers_quantized']} layers quantized, {info['layers_skipped']} "
            f"skipped, SQNR min {info['sqnr_db_min']:.2f} dB / mean {info['sqnr_db_mean']:.2f} dB"
        )

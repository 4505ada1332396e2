"""The options of the gate commands (`reference`, `gate`, `quantize`), declared once: their Annotated aliases, and
the groups that give `gate` an option per limit and the sequential gate's options."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Annotated

import typer

from infoeval.cli.options import typed
from infoeval.cli.signatures import extend, option, typer_type

CandidateArg = Annotated[
    str | None,
    typer.Argument(
        metavar="CANDIDATE",
        show_default=False,
        help="Candidate checkpoint: HF folder, hub id or .gguf (default: the reference's own model, with --scheme).",
    ),
]
CandidateOpt = Annotated[
    str | None, typer.Option("--model", "-m", help="The candidate; same as CANDIDATE.", show_default=False)
]
OutRefOpt = Annotated[Path, typer.Option("--out", "-o", help="Reference file to write (.safetensors).")]
TopKOpt = Annotated[int, typer.Option(help="Most likely tokens kept per position.")]
TailSamplesOpt = Annotated[
    int, typer.Option(help="Tokens sampled from the tail per position (unbiased KL; 0: lower bound only).")
]
SeedOpt = Annotated[int, typer.Option(help="Seed of the tail sampling.")]
ReferenceOpt = Annotated[
    Path, typer.Option("--reference", "-r", help="Reference file written by `infoeval reference`.")
]
GateSchemeOpt = Annotated[
    str | None,
    typer.Option(
        help="Quantize the candidate with this scheme first: int8-channel (infoeval's rounding) or a "
        "library's, e.g. hqq:int4-g64."
    ),
]
LimitsOpt = Annotated[
    str | None,  # not a Path: that would read ./strict as the set strict
    typer.Option(
        metavar="NAME|FILE",
        help="A built-in set of limits (default, strict) or a TOML file with a \\[limits] table "
        "(configs/gates/*.toml in the repository show the sets as files).",
    ),
]
ConfidenceOpt = Annotated[float, typer.Option(help="One-sided confidence at which limits on means must hold.")]
PointOpt = Annotated[bool, typer.Option("--point", help="Compare point estimates instead of confidence bounds.")]
BaselineOpt = Annotated[
    Path | None,
    typer.Option(
        help="An earlier `gate` run: its run folder (result.json and positions.csv: paired on the same "
        "positions, fail when worse beyond noise) or a result JSON (by --baseline-tolerance)."
    ),
]
BaselineToleranceOpt = Annotated[float, typer.Option(help="Relative tolerance for --baseline.")]
SequentialOpt = Annotated[
    bool,
    typer.Option(
        "--sequential",
        help="Visit windows in a fixed seeded order and stop as soon as the verdict is certain (anytime-valid "
        "confidence sequences).",
    ),
]
# the limits the API takes (api.gates.LIMITS), each an option --max-kl-mean … of float or None
LIMIT_HELP = {
    "max_kl_mean": "Limit on mean KL(reference‖candidate), nats.",
    "max_kl_p99": "Limit on the 99th percentile of per-position KL, nats.",
    "min_top1": "Limit on top-1 agreement (fraction).",
    "max_ppl_ratio": "Limit on PPL candidate / PPL reference.",
    "max_bpb_increase": "Limit on the bits/byte increase.",
}
# the sequential gate's settings (api.gates.SEQUENTIAL: SequentialSettings' fields, whose types and defaults they take)
SEQUENTIAL_HELP = {
    "alpha": "the error level of the verdict, in (0, 0.5): P(false PASS) ≤ alpha and P(false FAIL) ≤ alpha.",
    "min_tokens": "decide nothing before this many scored positions.",
    "max_tokens": "the budget in scored positions (default: the whole reference).",
    "order": "the windows' visiting order, seeded (a permutation fixed by --order-seed) or text.",
    "order_seed": "the seed of the visiting order.",
    "undecided": "the verdict when the budget runs out undecided: fail, or pass (then the fixed-budget verdict).",
    "round_windows": "windows per rank evaluated between two decisions (the verdict and the stopping window do "
    "not depend on it).",
}
JunitOpt = Annotated[Path | None, typer.Option(help="Write JUnit XML here (one testcase per limit).")]
MarkdownOpt = Annotated[Path | None, typer.Option(help="Write a markdown summary here (e.g. $GITHUB_STEP_SUMMARY).")]
QuantSchemeOpt = Annotated[str, typer.Option(help="Scheme: int<bits>-channel | int<bits>-g<N> [-asym].")]
OutCheckpointOpt = Annotated[Path, typer.Option("--out", "-o", help="Folder to write the checkpoint to.")]
ForceOpt = Annotated[bool, typer.Option("--force", help="Replace --out if it exists.")]
OneRecipeOpt = Annotated[
    Path | None,
    typer.Option(
        "--recipe", help="Recipe TOML (unit → scheme, as `infoeval mix` writes) applied instead of one --scheme."
    ),
]
ReferenceFormatOpt = Annotated[
    str,
    typer.Option(
        "--format",
        help="topk (compact: top-K log-probs and tail samples; KL estimated) or hidden (the last hidden states and "
        "the head: the reference's logits exactly, 4·hidden bytes a position).",
    ),
]
HeadOpt = Annotated[
    str,
    typer.Option(
        "--head",
        help="With --format hidden: stored (the head in the file) or candidate (only its sha256: a gate takes the "
        "candidate's head, which must be the reference's bit for bit).",
    ),
]
FormatOpt = Annotated[
    str,
    typer.Option(
        "--format", help="fake (dequantized float weights) or pack-quantized (real int4 codes, compressed-tensors)."
    ),
]


def limit_options(command):
    """Give ``gate`` an option per limit the API takes (--max-kl-mean … --max-bpb-increase), declared once here; they
    reach it as one ``limit_values`` dict, the API's keywords."""
    from infoeval.api.gates import LIMITS

    params = [
        option(n, Annotated[float | None, typer.Option(help=LIMIT_HELP[n], show_default=False)], None) for n in LIMITS
    ]
    return extend(command, "limit_values", params, lambda values: {n: values[n] for n in LIMITS}, place="here")


def sequential_options(command):
    """Give ``gate`` the sequential gate's options (--alpha … --round-windows), their types and defaults
    SequentialSettings' own, declared once here; they reach it as one ``sequential_values`` dict, the API's keywords:
    all of them with --sequential, else those typed, which the API refuses ('--alpha needs --sequential'; a --config
    default is not typed)."""
    import dataclasses

    from infoeval.api.gates import SEQUENTIAL
    from infoeval.gating.settings import SequentialSettings

    fields = dict(zip(SEQUENTIAL, dataclasses.fields(SequentialSettings)))
    hints = typing.get_type_hints(SequentialSettings)
    params = [
        option(
            n,
            Annotated[
                typer_type(hints[f.name]),
                typer.Option(help=f"--sequential: {SEQUENTIAL_HELP[n]}", show_default=f.default is not None),
            ],
            f.default,
        )
        for n, f in fields.items()
    ]
    given = lambda v: {n: v[n] for n in SEQUENTIAL if v["sequential"] or typed(v["context"], n, v[n])}  # noqa: E731
    return extend(command, "sequential_values", params, given, place="here")

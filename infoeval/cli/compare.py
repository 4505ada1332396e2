"""Commands comparing a model with its quantized variants and with compressors: quantize-compare, compress-bits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import typer

from infoeval.cli.options import RunOptions
from infoeval.cli.output import PageOptions, page_extras, page_options
from infoeval.cli.outputs import RUN_OUTPUTS, Outputs, scoring_options
from infoeval.cli.signatures import extend, option
from infoeval.cli.variant_options import ExcludeOpt, FloorOpt, FloorSeedOpt, IncludeOpt, RecipeOpt, SchemesOpt
from infoeval.quant.schemes import DEFAULT_SCHEMES

LLAMACPP_TABLE = "llama.cpp"  # --table llama.cpp: llama-perplexity --kl-divergence's block (output/llamacpp_table.py)
GATE_TABLES = ("default", LLAMACPP_TABLE)  # the layouts of every command with --table
TABLES = (*GATE_TABLES, "confidence")  # quantize-compare's: also KL by confidence
TableOpt = Annotated[
    str,
    typer.Option(
        "--table",
        help="Table layout: default, llama.cpp (llama-perplexity --kl-divergence's statistics block, per "
        "variant) or, for quantize-compare, confidence (mean KL and top-1 by the reference's top-1 probability).",
    ),
]


def check_table(table: str, allowed: tuple[str, ...] = TABLES) -> str:
    """--table's value, or a usage error naming the ``allowed`` ones (before the long run)."""
    from infoeval.errors import UsageError

    if table not in allowed:
        raise UsageError(f"--table '{table}' is not allowed; give one of {', '.join(allowed)}")
    return table


UntilSeOpt = Annotated[
    float | None,
    typer.Option(
        "--until-se",
        help="Run to a precision: windows of the whole text in a seeded order until the watched standard error "
        "is ≤ this; --max-tokens, when given, is then the budget.",
        show_default=False,
    ),
]
OrderSeedOpt = Annotated[int, typer.Option(help="--until-se: the seed of the windows' visiting order.")]


@dataclass(frozen=True)
class Precision:
    """--until-se and --order-seed (``@precision_options``), checked before anything loads; ``whole_text``: the run
    reads the whole text (a run to a precision whose --max-tokens was not given)."""

    until_se: float | None
    order_seed: int
    whole_text: bool

    def keywords(self) -> dict:
        """The API's keywords of a run to a precision."""
        return {"until_se": self.until_se, "order_seed": self.order_seed}


def until_settings(context: typer.Context, until_se: float | None, order_seed: int, run: RunOptions) -> Precision:
    """--until-se and --order-seed, checked here, before anything loads; a run to a precision whose --max-tokens was not
    given reads the whole text (its default keeps a first run short; a precision run reads the whole text unless told
    otherwise)."""
    from infoeval.cli.options import typed
    from infoeval.comparison.until import UntilSettings
    from infoeval.errors import UsageError
    from infoeval.input.settings import max_tokens_of

    if until_se is None:
        if typed(context, "order_seed", order_seed):
            raise UsageError("--order-seed needs --until-se")
        return Precision(None, order_seed, False)
    given = (
        getattr(context.get_parameter_source("max_tokens"), "name", "DEFAULT") != "DEFAULT"
    )  # typed, or from --config
    UntilSettings(until_se, max_tokens_of(run.max_tokens) if given else None, order_seed)
    return Precision(until_se, order_seed, not given)


def precision_options(command):
    """Give a command --until-se and --order-seed, declared once here; they reach it as one ``precision: Precision``
    argument (the command declares ``context`` and ``run``)."""
    params = [option("until_se", UntilSeOpt, None), option("order_seed", OrderSeedOpt, 0)]
    return extend(
        command,
        "precision",
        params,
        lambda v: until_settings(v["context"], v["until_se"], v["order_seed"], v["run"]),
        place="here",
    )


CheckpointsOpt = Annotated[
    str | None,
    typer.Option(
        "--checkpoints",
        help="Saved checkpoints to compare beside the schemes, comma-separated: folders (a library's quantized "
        "save, or a float one), .gguf files or hub ids; each must share the reference's tokenizer, and is "
        "named by its folder or file. Alone (without --schemes) only they are compared.",
        show_default=False,
    ),
]
BaselineOpt = Annotated[
    str | None,
    typer.Option(
        "--baseline",
        help="A variant of the run (e.g. int4-g128): every other is compared with it on the same positions "
        "(mean KL, P99 KL, top-1, Δ ln PPL: paired difference ± SE, better / worse / not distinguishable).",
        show_default=False,
    ),
]
PairedAlphaOpt = Annotated[
    float | None,
    typer.Option(
        "--alpha",
        help="--baseline: the verdicts' level, two-sided, Holm across the variants (default 0.05).",
        show_default=False,
    ),
]
PlanOpt = Annotated[
    str,
    typer.Option(
        "--plan",
        help="auto (lockstep where its estimated peak fits --memory-budget, else reference-first), lockstep (every "
        "model at once) or reference-first (the reference's last hidden states first, then one model at a time).",
    ),
]
MemoryBudgetOpt = Annotated[
    float | None,
    typer.Option(
        "--memory-budget",
        help="GiB the run may take, checked against each plan's estimate before anything loads (default: 90 % of the "
        "memory available: RAM, or the GPU's free memory).",
        show_default=False,
    ),
]
VerifyCodingOpt = Annotated[
    bool,
    typer.Option(
        "--verify-coding",
        help="Also compress the scored bytes with the model and a range coder, decompress them, and report the "
        "real file's size (an 'arithmetic-coded' row).",
    ),
]


def compare_options(calibration: bool = False):
    """The options quantize-compare and compress-bits share, declared once: the scoring, output, --until-se and page
    options (``calibration``: and the calibration options)."""
    return lambda command: scoring_options(*RUN_OUTPUTS, calibration=calibration)(
        page_options(precision_options(command))
    )


@compare_options(calibration=True)
def quantize_compare(
    context: typer.Context,
    model: str = None,  # MODEL or --model (see model_options)
    schemes: SchemesOpt = DEFAULT_SCHEMES,
    include: IncludeOpt = None,
    exclude: ExcludeOpt = None,
    recipe: RecipeOpt = None,
    checkpoints: CheckpointsOpt = None,
    floor: FloorOpt = "sampled",
    floor_seed: FloorSeedOpt = 0,
    table: TableOpt = "default",
    baseline: BaselineOpt = None,
    alpha: PairedAlphaOpt = None,
    plan: PlanOpt = "auto",
    memory_budget: MemoryBudgetOpt = None,
    precision: Precision = None,  # --until-se and --order-seed (see precision_options)
    page: PageOptions = None,  # --topk and --html (see page_options)
    run: RunOptions = None,  # the shared text, window and device options (see run_options)
    outputs: Outputs = None,  # the output options (see output_options)
    calibration_settings=None,  # --calibration and its options (see calibration_options)
) -> None:
    """Fake-quantize a model's weights with each scheme and compare every variant with the original: PPL,
    KL(reference‖variant) mean and tails, top-1 agreement, reverse KL and TV on the same windows."""
    from infoeval.api.scoring import compare
    from infoeval.comparison.report import print_quantize_compare, print_quantize_compare_llamacpp
    from infoeval.input.settings import check_floor

    if (recipe or checkpoints) and getattr(context.get_parameter_source("schemes"), "name", "") == "DEFAULT":
        schemes = ""  # --recipe or --checkpoints alone: only their variants
    check_floor(floor)
    outputs.check()  # before the long run
    from infoeval.comparison.views import print_quantize_compare_confidence

    tables = {LLAMACPP_TABLE: print_quantize_compare_llamacpp, "confidence": print_quantize_compare_confidence}.get(
        check_table(table), print_quantize_compare
    )
    result = compare(
        model,
        schemes=schemes,
        include=include or (),
        exclude=exclude or (),
        recipes=recipe or (),
        floor=floor,
        floor_seed=floor_seed,
        checkpoints=[c.strip() for c in (checkpoints or "").split(",") if c.strip()],
        calibration=calibration_settings,
        top_k=page.top_k,
        baseline=baseline,
        alpha=alpha,
        plan=plan,
        memory_budget=memory_budget,
        progress=not outputs.quiet,
        **precision.keywords(),
        **run.keywords(precision.whole_text),
    )
    _emit_run(result, "quantize-compare", model, tables, page.html, outputs)


def _emit_run(result, command: str, model: str, tables, html, outputs: Outputs) -> None:
    """Write, draw and print a quantize-compare or compress-bits run."""
    data, cols = result.to_json(), result.columns

    def draw(path):
        from infoeval.output.plots import plot_compress_bits, plot_quantize_compare

        (plot_quantize_compare if command == "quantize-compare" else plot_compress_bits)(data, cols, path)

    frame = lambda: result.positions  # noqa: E731  (built once, for the CSV and the page)
    outputs.emit(
        data,
        command=command,
        model=model,
        positions=frame,
        draw=draw,
        tables=tables,
        extras=lambda paths: page_extras(data, frame, cols.vocab, paths, html, f"{command}: {model}"),
    )


@compare_options()
def compress_bits(
    context: typer.Context,
    model: str = None,  # MODEL or --model (see model_options)
    verify_coding: VerifyCodingOpt = False,
    precision: Precision = None,  # --until-se and --order-seed (see precision_options)
    page: PageOptions = None,  # --topk and --html (see page_options)
    run: RunOptions = None,  # the shared text, window and device options (see run_options)
    outputs: Outputs = None,  # the output options (see output_options)
) -> None:
    """Total bits, bits/token and bits/byte of a model on a text, beside gzip, bz2, xz and zstd on the very
    same bytes (and, with --verify-coding, a real arithmetic-coded file of them)."""
    from infoeval.api.scoring import compress_bits as run_compress_bits
    from infoeval.comparison.report import print_compress_bits

    outputs.check()  # before the long run
    result = run_compress_bits(
        model,
        verify_coding=verify_coding,
        top_k=page.top_k,
        progress=not outputs.quiet,
        **precision.keywords(),
        **run.keywords(precision.whole_text),
    )
    _emit_run(result, "compress-bits", model, print_compress_bits, page.html, outputs)


def register(app) -> None:
    """Add quantize-compare and compress-bits to the infoeval app."""
    app.command("quantize-compare")(quantize_compare)
    app.command("compress-bits")(compress_bits)

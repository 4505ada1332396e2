"""Commands for speculative decoding and distillation: spec-accept, spec-decode, distill, temperature.

Each command parses options, calls ``infoeval.speculative`` and renders; p = target/teacher, q = draft/student.
"""

from __future__ import annotations

import typer

from infoeval.cli.command import command
from infoeval.cli.outputs import Outputs, emit
from infoeval.input.settings import DEFAULT_MODEL
from infoeval.speculative.request import DistillRequest, SpecAcceptRequest, SpecDecodeRequest, TemperatureRequest


def spec_accept(request: SpecAcceptRequest, outputs: Outputs) -> None:
    """How well a draft q would draft for the target p: per-position acceptance β = Σ min(p, q), KL(p‖q), Pinsker,
    acceptance by target-entropy quartile, top-1 runs and expected tokens per target call, at each temperature."""
    from infoeval.api.drafting import spec_accept as run_accept
    from infoeval.speculative.accept import plot_acceptance
    from infoeval.speculative.tables import print_spec_accept

    outputs.check()
    result = run_accept(outputs.running(request))
    data = result.to_json()
    emit(
        outputs,
        data,
        model=request.model.model,
        positions=lambda: result.positions,
        draw=lambda path: plot_acceptance(data, result.columns, path),
        tables=print_spec_accept,
    )


def spec_decode(request: SpecDecodeRequest, outputs: Outputs) -> None:
    """Speculative sampling with KV caches (draft proposes γ tokens, the target verifies them in one pass) against
    plain sampling from the target: acceptance, tokens per target call, wall time and speed-up."""
    from infoeval.api.drafting import spec_decode as run_decode
    from infoeval.speculative.tables import print_spec_decode

    result = run_decode(outputs.running(request))
    emit(
        outputs,
        result,
        model=request.model.model,
        source="prompt",
        tables=print_spec_decode,
    )


def distill(request: DistillRequest, outputs: Outputs) -> None:
    """Distillation terms per temperature: hard CE, KL(p_T‖q_T), T²·KL and the total loss, the teacher's entropy and
    tail mass, and the norm of the soft gradient with and without the T² factor."""
    from infoeval.api.drafting import distill as run_distill
    from infoeval.speculative.tables import print_distill

    result = run_distill(outputs.running(request))
    emit(
        outputs,
        result,
        model=request.model.model,
        tables=print_distill,
    )


def temperature(request: TemperatureRequest, outputs: Outputs) -> None:
    """The temperature slider as a table: softmax(z/T) per class, top probability, tail mass and entropy in bits,
    for --logits given by hand or a model's next-token logits (--model M --prompt TEXT)."""
    from infoeval.api.drafting import temperature as temperature_table
    from infoeval.speculative.tables import print_temperature

    model = request.model.model
    emit(
        outputs,
        temperature_table(request),
        command="temperature",
        model=model or "logits",
        source="prompt" if model else "table",
        tables=print_temperature,
    )


def register(app: typer.Typer) -> None:
    """Add spec-accept, spec-decode, distill and temperature to the infoeval app."""
    tables = ("csv", "json", "positions", "folder", "quiet")
    target = {
        "metavar": "TARGET",
        "what": "the target",
        "positional_help": "The target (teacher) model; same as --model.",
    }
    plot = "Also draw acceptance against target entropy (T = 1) into this PNG (needs matplotlib)."
    accept = command(
        SpecAcceptRequest, spec_accept, outputs=Outputs, output_names=(*tables, "plot"), helps={"plot": plot}, **target
    )
    rounds = "Write one row per speculative round (proposed, accepted, emitted) as CSV here."
    decode = command(
        SpecDecodeRequest, spec_decode, outputs=Outputs, output_names=tables, helps={"positions": rounds}, **target
    )
    teacher = command(
        DistillRequest,
        distill,
        outputs=Outputs,
        output_names=tables,
        metavar="TEACHER",
        what="the teacher",
        positional_help="The teacher model; same as --model.",
    )
    helps = {
        "model": f"Use this model's next-token logits after --prompt (e.g. {DEFAULT_MODEL}).",
        "csv": "Write the table (a row per T) as CSV here.",
    }
    slider = command(
        TemperatureRequest,
        temperature,
        outputs=Outputs,
        output_names=("json", "folder", "csv"),
        metavar=None,
        helps=helps,
    )
    app.command("spec-accept")(accept)
    app.command("spec-decode")(decode)
    app.command("distill")(teacher)
    app.command("temperature")(slider)

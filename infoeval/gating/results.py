"""The records the `reference` and `gate` commands return (``ReferenceResult``, ``GateResult``), and the gate's
record built from its verdicts, the candidate and the reference file's provenance."""

from __future__ import annotations

from dataclasses import dataclass

from infoeval.gating.reference_file import Reference
from infoeval.gating.settings import GateSettings
from infoeval.gating.tables import verdicts_frame
from infoeval.input.provenance import provenance
from infoeval.output.results import Result


@dataclass(frozen=True)
class ReferenceResult(Result):
    """reference: the file written, its size against llama.cpp's, and the reference's own metrics."""

    file: str
    file_bytes: int
    bytes_per_position: float
    llama_cpp_bytes_per_position: int
    vocab_size: int
    tokenizer_fingerprint: str
    top_k: int
    tail_samples: int
    seed: int
    reference: dict[str, float]
    # a hidden-state reference's: the states' dtype and width, the head's settings and sha256, whether it is stored
    hidden: dict | None = None
    FAMILY = "reference"
    OMITTED_WHEN_NONE = ("hidden",)  # a top-K reference's record as before


@dataclass(frozen=True)
class GateResult(Result):
    """gate: the verdict of every limit (and of the baseline), the candidate's metrics, the reference's."""

    passed: bool
    verdicts: tuple[dict, ...]
    baseline: dict | None
    metrics: dict[str, float]
    reference: dict[str, float]
    candidate: dict
    sequential: dict | None = (
        None  # gate --sequential: the stop, tokens used of the budget, the bounds (sequential_gate.py)
    )
    floor: dict | None = None  # the noise floor: its windows, metrics, the candidate against it, the limits below it
    FAMILY = "gate"
    SUMMARY = staticmethod(verdicts_frame)
    OMITTED_WHEN_NONE = ("sequential", "floor")  # the fixed gate's record with --floor off is the same as before


def gate_result(
    gate_settings: GateSettings,
    ref: Reference,
    candidate: tuple,
    timings: dict,
    passed: bool,
    verdicts: tuple,
    base_rows: list,
    metrics: dict,
    sequential: dict | None = None,
    floor: dict | None = None,
) -> GateResult:
    """The gate's result record (``sequential``: the block of a sequential gate, else None; ``floor``: the noise
    floor's block, ``gate_floor``)."""
    spec, loaded, qreport = candidate[:3]
    return GateResult(
        provenance(
            "gate",
            model=loaded.info,
            reference_file=str(gate_settings.reference),
            reference_provenance=ref.meta["provenance"],
            top_k=ref.meta["top_k"],
            tail_samples=ref.meta["tail_samples"],
            confidence=gate_settings.confidence,
            point=gate_settings.point,
            positions_top_k=gate_settings.top_k,
            **({"reference_kind": "hidden"} if ref.kind == "hidden" else {}),
        ),
        timings,
        passed=passed,
        verdicts=verdicts,
        baseline={"file": str(gate_settings.baseline), "rows": base_rows} if gate_settings.baseline else None,
        metrics=metrics,
        reference=ref.meta["reference"],
        candidate={
            "spec": spec,
            "model": loaded.info.to_json(),
            "scheme": gate_settings.scheme or (f"recipe {gate_settings.recipe}" if gate_settings.recipe else None),
            "quantization": qreport,
        },
        sequential=sequential,
        floor=floor,
    )

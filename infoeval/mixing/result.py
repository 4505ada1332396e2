"""mix's typed result: the units and their KLs, the solver's choice for each budget, the measured variants (the
mixes and the uniform schemes, on the held-out windows), the additivity check and the exports."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from infoeval.mixing.problem import Problem
from infoeval.mixing.solve import Choice
from infoeval.mixing.tables import summary_frame
from infoeval.output.results import Result


@dataclass(frozen=True)
class MixResult(Result):
    """``measured`` has one row per measured variant (``kind`` "mix" or "uniform"): its stored bits per weight,
    the predicted KL (Σ of its units' own KLs from the sweep), the measured metrics on the held-out windows, and
    ``additivity`` = measured mean KL / predicted. ``solutions`` has one row per budget, naming the measured
    variant it is. ``target`` compares the mix at --budget-bits with the uniform scheme it names (if it does)."""

    settings: dict
    held_out: dict
    reference: dict
    units: tuple
    solutions: tuple
    measured: tuple
    target: dict | None
    exports: dict
    sensitivity: dict
    FAMILY = "quantize-compare"
    SUMMARY = staticmethod(summary_frame)

    @property
    def sweep(self) -> dict | None:
        """The sensitivity sweep's own result JSON where this run swept (reusable as ``sensitivity=``, written
        beside the result as sensitivity.json), else None; not part of result.json."""
        return self.__dict__.get("_sweep")

    def with_sweep(self, sweep: dict | None) -> MixResult:
        object.__setattr__(self, "_sweep", sweep)
        return self


def unit_rows(problem: Problem) -> list[dict]:
    """Per unit: layers, weights, and per scheme its own mean KL ± SE and stored bits per weight."""
    out = []
    for u in problem.units:
        per = {
            s.name: {"kl_mean": kl, "kl_se": se, "bits_per_weight": bits / u.n_weights}
            for s, kl, se, bits in zip(problem.schemes, u.kl, u.kl_se, u.bits)
        }
        out.append({"unit": u.name, "kind": u.kind, "layers": list(u.layers), "n_weights": u.n_weights, "schemes": per})
    return out


def solution_row(problem: Problem, choice: Choice, variant: str) -> dict:
    return {
        "budget_bits": float(choice.budget_bits),
        "budget_fraction": str(choice.budget_bits),
        "bits_per_weight": choice.bits_per_weight,
        "total_bits": choice.total_bits,
        "n_weights": choice.n_weights,
        "predicted_kl": choice.predicted_kl,
        "method": choice.method,
        "gap": choice.gap,
        "variant": variant,
        "choice": {u.name: problem.schemes[k].name for u, k in zip(problem.units, choice.picks)},
    }


def measured_row(
    name: str, kind: str, bits: float, predicted: float, metrics: Mapping, budgets: Sequence[float]
) -> dict:
    kl = metrics["kl_mean"]
    return {
        "name": name,
        "kind": kind,
        "bits_per_weight": bits,
        "budgets": list(budgets),
        "predicted_kl": predicted,
        "measured_kl": kl,
        "measured_kl_se": metrics["kl_se"],
        "additivity": kl / predicted if predicted > 0 else None,
        "metrics": dict(metrics),
    }


def target_row(measured: Sequence[dict], main: str, scheme: str | None) -> dict | None:
    """The mix at the budget against the uniform scheme the budget names: the ratio of measured mean KLs."""
    rows = {r["name"]: r for r in measured}
    if scheme is None or scheme not in rows:
        return None
    mix, uni = rows[main], rows[scheme]
    return {
        "mix": main,
        "uniform": scheme,
        "mix_bits": mix["bits_per_weight"],
        "uniform_bits": uni["bits_per_weight"],
        "mix_kl": mix["measured_kl"],
        "uniform_kl": uni["measured_kl"],
        "ratio": mix["measured_kl"] / uni["measured_kl"] if uni["measured_kl"] > 0 else None,
        "predicted_ratio": mix["predicted_kl"] / uni["predicted_kl"] if uni["predicted_kl"] > 0 else None,
    }

"""From a sensitivity sweep's per-unit KLs and the model's layer shapes to the solver's problem: units × schemes
of predicted KL (the unit's own mean KL, quantized alone) and stored bits (``quant/bits.py``). No torch.

The held-out split: ``mix`` measures on the run's text options (by default the first 8,192 tokens of the text,
the very windows of ``quantize-compare``) and sweeps on the tokens right after them, so the prediction and its
check never share a token (``split_windows``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

from infoeval.errors import DataError, UsageError, spell
from infoeval.mixing.solve import as_budget
from infoeval.quant.bits import layer_bits
from infoeval.quant.schemes import Scheme, SchemeError, parse_scheme


@dataclass(frozen=True)
class Unit:
    """One unit: its layers, weights, and per scheme (in the problem's order) its KL ± SE and stored bits."""

    name: str
    kind: str
    layers: tuple[str, ...]
    n_weights: int
    kl: tuple[float, ...]
    kl_se: tuple[float, ...]
    bits: tuple[int, ...]


@dataclass(frozen=True)
class Problem:
    schemes: tuple[Scheme, ...]
    units: tuple[Unit, ...]

    @property
    def kl(self) -> np.ndarray:
        return np.array([u.kl for u in self.units], dtype=np.float64)

    @property
    def cost(self) -> np.ndarray:
        return np.array([u.bits for u in self.units], dtype=np.int64)

    @property
    def weights(self) -> int:
        return sum(u.n_weights for u in self.units)

    def uniform_bits(self, k: int) -> Fraction:
        """Bits per weight of scheme k on every unit."""
        return Fraction(sum(u.bits[k] for u in self.units), self.weights)

    def predicted(self, picks: Sequence[int]) -> float:
        """Σ of the picked units' own KLs, in unit order."""
        return float(sum(u.kl[k] for u, k in zip(self.units, picks)))

    def assignment(self, picks: Sequence[int]) -> dict[str, Scheme]:
        """Layer name → scheme of a choice."""
        return {layer: self.schemes[k] for u, k in zip(self.units, picks) for layer in u.layers}


def load_sensitivity(paths: Sequence[Path]) -> tuple[list[dict], list[dict]]:
    """The unit rows of sensitivity result files, and each file's provenance, ``by`` and split (if any)."""
    rows, meta = [], []
    for path in paths:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise UsageError(
                f"sensitivity file '{path}' does not exist; give the JSON `infoeval sensitivity --json` wrote"
            ) from None
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise DataError(f"sensitivity file '{path}' is not valid JSON") from None
        if not str(data.get("schema", "")).startswith("infoeval/sensitivity/") or not isinstance(
            data.get("units"), list
        ):
            raise DataError(f"'{path}' is not a result of `infoeval sensitivity` (schema {data.get('schema')!r})")
        rows += data["units"]
        meta.append(
            {
                "file": str(path),
                "by": data.get("by"),
                "provenance": data.get("provenance", {}),
                "split": data.get("held_out_split"),
            }
        )
    return rows, meta


def build_problem(rows: Sequence[Mapping], schemes: Sequence[Scheme], shapes: Mapping[str, tuple[int, int]]) -> Problem:
    """The units of the rows (one per unit × scheme) with every scheme of ``schemes``; a unit missing a scheme,
    or naming a layer the model lacks, is an error; rows of other schemes are ignored."""
    wanted = [s.name for s in schemes]
    table: dict[str, dict] = {}
    for r in rows:
        try:
            name = parse_scheme(str(r["scheme"])).name
        except (SchemeError, KeyError):
            raise DataError(
                f"sensitivity row of unit {r.get('unit')!r} has no valid scheme ({r.get('scheme')!r})"
            ) from None
        if name in wanted:
            entry = table.setdefault(r["unit"], {"kind": r.get("kind", "?"), "layers": tuple(r["layers"]), "kl": {}})
            entry["kl"][name] = (float(r["kl_mean"]), float(r.get("kl_se") or 0.0))
    if not table:
        raise UsageError(f"the sensitivity results have no unit measured with {', '.join(wanted)}")
    units = []
    for uname, e in table.items():
        missing = [s for s in wanted if s not in e["kl"]]
        if missing:
            raise UsageError(
                f"unit '{uname}' was not measured with {', '.join(missing)}; sweep every scheme of {spell('schemes')}"
            )
        absent = [layer for layer in e["layers"] if layer not in shapes]
        if absent:
            raise DataError(
                f"unit '{uname}' names layer {absent[0]}, which the model has not; a sensitivity file of another model?"
            )
        units.append(
            Unit(
                uname,
                e["kind"],
                e["layers"],
                sum(shapes[n][0] * shapes[n][1] for n in e["layers"]),
                tuple(e["kl"][s][0] for s in wanted),
                tuple(e["kl"][s][1] for s in wanted),
                tuple(sum(layer_bits(s, shapes[n]) for n in e["layers"]) for s in schemes),
            )
        )
    layers = [n for u in units for n in u.layers]
    if len(set(layers)) != len(layers):
        raise DataError(f"the sensitivity units overlap (a layer in two units); use results of one {spell('by')}")
    return Problem(tuple(schemes), tuple(units))


def parse_budget(text: str, problem: Problem) -> tuple[Fraction, str | None]:
    """A budget in bits per weight, or a scheme's name meaning that scheme's exact bits on this model's units."""
    try:
        scheme = parse_scheme(text)
    except SchemeError:
        return as_budget(text), None
    names = [s.name for s in problem.schemes]
    if scheme.name not in names:
        raise UsageError(
            f"{spell('budget_bits')} {scheme.name}: name one of {spell('schemes')} ({', '.join(names)}) or give "
            "bits per weight"
        )
    return problem.uniform_bits(names.index(scheme.name)), scheme.name


def parse_sweep(text: str) -> list[Fraction]:
    """'3.5:6:0.25' → 3.5, 3.75, …, 6 (inclusive, exact fractions)."""
    parts = text.split(":")
    try:
        lo, hi, step = (as_budget(p) for p in parts) if len(parts) == 3 else (None, None, None)
    except UsageError:
        lo = None
    if lo is None or step <= 0 or hi < lo:
        raise UsageError(
            f"{spell('sweep')} '{text}' is not allowed; give START:STOP:STEP bits per weight, e.g. 3.5:6:0.25"
        )
    n = int((hi - lo) / step) + 1
    if n > 200:
        raise UsageError(f"{spell('sweep')} '{text}' asks for {n} budgets; at most 200")
    return [lo + i * step for i in range(n)]


def split_windows(windows: Sequence, measured_tokens: int) -> tuple[list, list]:
    """(measured, sweep): windows whose first target is within the first ``measured_tokens`` scored stream
    positions, and the windows after them."""
    measured = [w for w in windows if w.first_target <= measured_tokens]
    return measured, [w for w in windows if w.first_target > measured_tokens]

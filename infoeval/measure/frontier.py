"""The bits-versus-KL frontier of a run's variants: which variants no other beats on both stored bits per weight
and a KL figure (mean KL, and the 99.9th percentile that Unsloth's dynamic-quant pages read off). A variant is
**Pareto-optimal** for a figure when no other variant has at most its bits and at most its figure, with one of
the two strictly less; ties on both keep both. Variants without stored bits (a module you built) are left out,
and listed."""

from __future__ import annotations

import math

FIGURES = ("kl_mean", "kl_p999")
X = "bits_per_weight"


def pareto(points: dict[str, tuple[float, float]]) -> list[str]:
    """The names whose (x, y) no other point dominates (x' ≤ x and y' ≤ y, one strictly), in increasing x then y;
    points with a NaN are left out.

    >>> pareto({"a": (4, 0.3), "b": (8, 0.01), "c": (4.5, 0.4), "d": (8, 0.02), "e": (3, 1.0)})
    ['e', 'a', 'b']
    """
    clean = {
        k: (float(x), float(y)) for k, (x, y) in points.items() if not (math.isnan(float(x)) or math.isnan(float(y)))
    }
    keep = [
        k
        for k, (x, y) in clean.items()
        if not any(x2 <= x and y2 <= y and (x2 < x or y2 < y) for k2, (x2, y2) in clean.items() if k2 != k)
    ]
    return sorted(keep, key=lambda k: clean[k])


def frontier_points(result: dict) -> list[dict] | None:
    """The frontier as every view draws it, from a result: each variant with stored bits (its name, bits, mean KL,
    P99.9 and the figures on whose frontier it stands), by bits then mean KL; None without a ``frontier`` block."""
    front = result.get("frontier")
    if not front:
        return None
    points = [
        {
            "name": v["name"],
            "bits": v["quantization"][X],
            "kl_mean": v["metrics"]["kl_mean"],
            "kl_p999": v["metrics"]["kl_p999"],
            "on": [f for f in FIGURES if v["name"] in front[f]],
        }
        for v in result["variants"]
        if v["name"] not in front["without_bits"]
    ]
    return sorted(points, key=lambda p: (p["bits"], p["kl_mean"]))


def frontier_block(variants: list[dict]) -> dict | None:
    """The result's ``frontier``: per figure, the Pareto-optimal variants (by bits per weight); None with fewer than
    two variants that have stored bits. ``variants``: the result's variant records (name, metrics, quantization)."""
    with_bits = [v for v in variants if (v.get("quantization") or {}).get(X) is not None]
    if len(with_bits) < 2:
        return None
    out = {"x": X, "figures": list(FIGURES), "without_bits": [v["name"] for v in variants if v not in with_bits]}
    for figure in FIGURES:
        out[figure] = pareto({v["name"]: (v["quantization"][X], v["metrics"][figure]) for v in with_bits})
    return out

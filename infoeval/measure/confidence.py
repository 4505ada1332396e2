"""KL by confidence: each variant's mean KL and top-1 agreement in buckets of the reference's top-1 probability
(exllamav3's qbench view). Where the reference is sure (p_top1 near 1) a variant's KL is usually small and its
top-1 usually agrees; the buckets show whether a variant's damage sits in the confident positions, which a text's
mean hides. Fixed edges 0, 0.2, 0.4, 0.6, 0.8, 0.9, 1.0; a bucket holds p_top1 in [lo, hi), the last one [0.9, 1]."""

from __future__ import annotations

import numpy as np

EDGES = (0.0, 0.2, 0.4, 0.6, 0.8, 0.9, 1.0)


def bucket_of(p_top1: np.ndarray) -> np.ndarray:
    """Each position's bucket index, 0 … len(EDGES) − 2.

    >>> bucket_of(np.array([0.0, 0.19, 0.2, 0.85, 0.9, 1.0])).tolist()
    [0, 0, 1, 4, 5, 5]
    """
    return np.clip(
        np.searchsorted(np.asarray(EDGES), np.asarray(p_top1, dtype=np.float64), side="right") - 1, 0, len(EDGES) - 2
    )


def _means(values: np.ndarray, buckets: np.ndarray, counts: np.ndarray) -> list[float | None]:
    sums = np.bincount(buckets, weights=np.asarray(values, dtype=np.float64), minlength=counts.size)
    return [float(s / c) if c else None for s, c in zip(sums, counts)]


def confidence_block(p_top1: np.ndarray, variants: dict[str, dict]) -> dict:
    """The result's ``by_confidence``: the edges, each bucket's count, and per variant its mean KL and top-1
    agreement in each bucket (None where a bucket is empty)."""
    buckets = bucket_of(p_top1)
    counts = np.bincount(buckets, minlength=len(EDGES) - 1)
    return {
        "of": "the reference's top-1 probability",
        "edges": list(EDGES),
        "counts": [int(c) for c in counts],
        "variants": {
            name: {"kl_mean": _means(v["kl"], buckets, counts), "top1": _means(v["top1"], buckets, counts)}
            for name, v in variants.items()
        },
    }

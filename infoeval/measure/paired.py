"""Paired verdicts between variants on the same positions (``quantize-compare --baseline NAME``).

Every variant of a run is scored on the reference's positions, so two variants can be compared position by
position: for a metric m with per-position values m_v (the variant) and m_b (the baseline), the paired
difference d = m_v − m_b has mean d̄ and the batch-means SE of the same batches of whole windows as every other
SE (``stats.se``): t = d̄ / SE(d̄) on G − 1 degrees of freedom, a two-sided p-value, and Holm's step-down
adjustment across the variants (for each metric). At level α the verdict is **better** (the variant's metric is
significantly better than the baseline's), **worse**, or **not distinguishable**. The metrics: mean KL and the
P99 of KL (lower is better), top-1 agreement (higher), Δ ln PPL = mean NLL_v − mean NLL_b (lower). The P99 has no
closed-form SE: it is a seeded bootstrap over the batches (whole batches drawn with replacement, the same draw for
both variants, so the pairing is kept), SE = the bootstrap sd of q99(KL_v) − q99(KL_b).

Top-1 flips count the positions where exactly one of the two agrees with the reference: ``baseline_only`` (the
baseline agrees, the variant does not) and ``variant_only``. McNemar's test asks whether they differ beyond
chance; on correlated positions its clustered form (Obuchowski 1998) divides by a variance over clusters, which
is the squared paired t above of the top-1 difference (+1 for a variant-only flip, −1 for a baseline-only one):
the top-1 verdict is that test on the batches.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from infoeval.errors import UsageError, spell
from infoeval.measure.metrics import METRICS as REGISTRY
from infoeval.measure.stats import _t_cdf, block_labels, se, se_blocks

BOOTSTRAP = 1000  # resamples of the batches for the P99's SE
METHOD = (
    "paired differences on the same positions: t = mean(d) / SE(d), the batch-means SE over whole windows, G-1 "
    "degrees of freedom, two-sided, Holm across the variants per metric; kl_p99: SE by a seeded bootstrap over the "
    "batches (the same draw for both); top-1: McNemar's test clustered by batch (the paired t of the top-1 difference)"
)
# metric → how tables title its column (variant − baseline)
LABELS = {"kl_mean": "Δ mean KL", "kl_p99": "Δ KL P99", "top1": "Δ top-1", "ln_ppl_ratio": "Δ ln PPL"}
COLUMNS = {"kl_mean": "kl", "kl_p99": "kl", "top1": "top1", "ln_ppl_ratio": "nll"}  # metric → its per-position column


def better(metric: str) -> int:
    """+1 when a higher value of ``metric`` is better, −1 when a lower one is (the metric registry's direction)."""
    return 1 if REGISTRY[metric].higher_is_better else -1


@dataclass(frozen=True)
class PairedSettings:
    """``--baseline NAME`` (a variant of the run) and the verdicts' level ``alpha``; ``seed``: the P99's bootstrap."""

    baseline: str
    alpha: float = 0.05
    seed: int = 0

    def __post_init__(self) -> None:
        if not (isinstance(self.alpha, (int, float)) and 0.0 < self.alpha < 0.5):
            raise UsageError(f"{spell('alpha')} {self.alpha} is not allowed; give a level in (0, 0.5), e.g. 0.05")

    def check(self, names: list[str]) -> None:
        """The baseline is one of the run's variants, and there is another to compare with it."""
        listed = ", ".join(names) or "none"
        if self.baseline not in names:
            raise UsageError(
                f"{spell('baseline')} '{self.baseline}' is not a variant of this run; its variants: {listed}"
            )
        if len(names) < 2:
            raise UsageError(
                f"{spell('baseline')} '{self.baseline}' is the run's only variant; give at least one more scheme to "
                "compare with it"
            )


def t_test(d: np.ndarray, windows: np.ndarray | None) -> dict:
    """The paired difference's mean, batch-means SE, t, degrees of freedom and two-sided p-value (NaN p when the
    SE is 0 or undefined: a difference of exactly 0 everywhere is p = 1)."""
    d = np.asarray(d, dtype=np.float64).ravel()
    mean, err, df = float(d.mean()), se(d, windows), se_blocks(d.size, windows)["se_blocks"] - 1
    return _with_p({"diff": mean, "se": err, "df": df})


def _with_p(row: dict) -> dict:
    mean, err, df = row["diff"], row["se"], row["df"]
    if err > 0 and df >= 1:
        t = mean / err
        return {**row, "t": t, "p": float(min(1.0, 2.0 * (1.0 - _t_cdf(abs(t), df))))}
    return {**row, "t": float("nan"), "p": 1.0 if mean == 0 else float("nan")}


def quantile_diff(
    a: np.ndarray, b: np.ndarray, windows: np.ndarray | None, q: float = 0.99, reps: int = BOOTSTRAP, seed: int = 0
) -> dict:
    """q-quantile of a minus that of b, with its SE by a seeded bootstrap over the batches (whole batches drawn with
    replacement, the same draw for a and b), and the t-based p-value on G − 1 degrees of freedom."""
    a, b = np.asarray(a, dtype=np.float64).ravel(), np.asarray(b, dtype=np.float64).ravel()
    labels = block_labels(a.size, windows)
    members = [np.flatnonzero(labels == g) for g in range(int(labels.max()) + 1)]
    rng = np.random.default_rng(seed)
    diffs = np.empty(reps)
    for r in range(reps):
        rows = np.concatenate([members[g] for g in rng.integers(0, len(members), len(members))])
        diffs[r] = np.quantile(a[rows], q) - np.quantile(b[rows], q)
    row = {"diff": float(np.quantile(a, q) - np.quantile(b, q)), "se": float(diffs.std(ddof=1)), "df": len(members) - 1}
    return _with_p(row)


def holm(pvalues: dict[str, float]) -> dict[str, float]:
    """Holm's step-down adjusted p-values: the k-th smallest times (m − k + 1), made monotone, capped at 1; NaN
    stays NaN and does not count.

    >>> holm({"a": 0.01, "b": 0.04, "c": 0.03})
    {'a': 0.03, 'b': 0.06, 'c': 0.06}
    """
    valid = sorted((p, k) for k, p in pvalues.items() if p == p)
    out, running = {k: float("nan") for k in pvalues}, 0.0
    for i, (p, k) in enumerate(valid):
        running = max(running, min(1.0, (len(valid) - i) * p))
        out[k] = round(running, 12)
    return out


def verdict(diff: float, p_adjusted: float, alpha: float, better: int) -> str:
    """better, worse or not distinguishable: significant at ``alpha`` after Holm, in the direction ``better``
    (+1: higher is better, −1: lower)."""
    if not p_adjusted < alpha or diff == 0:
        return "not distinguishable"
    return "better" if diff * better > 0 else "worse"


def flips(top1_baseline: np.ndarray, top1_variant: np.ndarray) -> dict:
    """Positions where exactly one of the two agrees with the reference's top-1."""
    b, v = np.asarray(top1_baseline, dtype=bool), np.asarray(top1_variant, dtype=bool)
    return {
        "baseline_only": int(np.sum(b & ~v)),
        "variant_only": int(np.sum(v & ~b)),
        "both": int(np.sum(b & v)),
        "neither": int(np.sum(~b & ~v)),
    }


def paired_block(variants: dict[str, dict], settings: PairedSettings, windows: np.ndarray | None) -> dict:
    """The result's ``paired`` block: every other variant against the baseline on every metric (``variants``: each
    variant's per-position columns kl, top1, nll, in the reference's order; ``windows``: the SEs' batches)."""
    base = variants[settings.baseline]
    others = [name for name in variants if name != settings.baseline]
    rows: dict[str, dict] = {name: {} for name in others}
    for metric, column in COLUMNS.items():
        for name in others:
            a, b = variants[name][column].astype(np.float64), base[column].astype(np.float64)
            rows[name][metric] = (
                quantile_diff(a, b, windows, seed=settings.seed) if metric == "kl_p99" else t_test(a - b, windows)
            )
        adjusted = holm({name: rows[name][metric]["p"] for name in others})
        for name in others:
            row = rows[name][metric]
            row.update(
                p_holm=adjusted[name], verdict=verdict(row["diff"], adjusted[name], settings.alpha, better(metric))
            )
    for name in others:
        rows[name]["top1_flips"] = flips(base["top1"], variants[name]["top1"])
    return {
        "baseline": settings.baseline,
        "alpha": settings.alpha,
        "seed": settings.seed,
        "bootstrap": BOOTSTRAP,
        "method": METHOD,
        "variants": rows,
    }

"""The sensitivity sweep's typed result and the per-unit aggregation of its per-position columns.

``SensitivityResult.to_json()["units"]`` has one entry per unit × scheme:
``{"unit", "kind", "layers", "scheme", "n_weights", "kl_mean", "kl_se", "kl_p99", "top1", "dln_ppl",
"dln_ppl_se", "proxy", "start_block", "depth"}`` (``proxy`` None without the proxy).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from infoeval.measure.metrics import METRICS, Metric
from infoeval.measure.stats import mean_se, quantile
from infoeval.output.results import Result
from infoeval.sensitivities.tables import summary_frame

UNIT_METRICS: dict[str, Metric] = {
    "n_weights": Metric("weights", None, "weights the unit quantizes"),
    "kl_mean": METRICS["kl_mean"],
    "kl_se": METRICS["kl_se"],
    "kl_p99": METRICS["kl_p99"],
    "top1": METRICS["top1"],
    "dln_ppl": METRICS["ln_ppl_ratio"],
    "dln_ppl_se": METRICS["ln_ppl_ratio_se"],
    "proxy": Metric("nats", False, "diagonal-Fisher prediction of kl_mean: ½ · (1/n) Σ F_ii Δw_i² (see proxy.method)"),
    "spearman": Metric("", True, "Spearman rank correlation of the proxy with the direct mean KL over the units"),
    "layers_run_fraction": Metric(
        "", None, "decoder blocks the sweep ran, as a fraction of running every unit from block 0"
    ),
}


def unit_metrics(unit, variant, cols: Mapping[str, np.ndarray], key: str, n: int, proxy: float | None) -> dict:
    """One unit × scheme's entry from its per-position columns ``key/kl``, ``key/top1``, ``key/nll``."""
    kl = cols[f"{key}/kl"].astype(np.float64)
    windows = cols.get("window")
    kl_mean, kl_se = mean_se(kl, windows)
    dln, dln_se = mean_se(cols[f"{key}/nll"].astype(np.float64) - cols["ref/nll"].astype(np.float64), windows)
    n_weights = sum(int(w.numel) for w in variant.weights.values())
    return {
        "unit": unit.name,
        "kind": unit.kind,
        "layers": list(unit.layers),
        "scheme": variant.name,
        "n_weights": n_weights,
        "kl_mean": kl_mean,
        "kl_se": kl_se,
        "kl_p99": quantile(kl, 0.99),
        "top1": float(cols[f"{key}/top1"].mean()),
        "dln_ppl": dln,
        "dln_ppl_se": dln_se,
        "proxy": proxy,
        "start_block": unit.start,
        "depth": unit.depth,
    }


@dataclass(frozen=True)
class SensitivityResult(Result):
    """sensitivity: the reference's metrics, and each unit × scheme's KL, top-1, Δ ln PPL and proxy."""

    by: str
    decoder_prefix: str
    schemes: list
    block_cache: bool
    layers_run_fraction: float
    reference: dict
    units: tuple
    proxy: dict | None
    FAMILY = "sensitivity"
    SUMMARY = staticmethod(summary_frame)

    def to_json(self) -> dict:
        data = super().to_json()
        metrics = {
            k: {"unit": m.unit, "higher_is_better": m.higher_is_better, "description": m.description}
            for k, m in UNIT_METRICS.items()
        }
        return {**data, "metric_definitions": data["metric_definitions"] or metrics}

    def ranked(self, scheme: str | None = None) -> list[dict]:
        """Units from the largest mean KL down (of one scheme, or all)."""
        rows = [u for u in self.units if scheme is None or u["scheme"] == scheme]
        return sorted(rows, key=lambda u: -u["kl_mean"])

"""Aggregation of per-position columns into metrics; each metric's unit and direction live next to it.

Standard errors treat scored positions as independent (as llama.cpp does); neighbouring positions are
correlated, so the true uncertainty is somewhat larger. Quantiles interpolate linearly between order
statistics (NumPy's default).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from infoeval.stats import LN2, quantile, se



@dataclass(frozen=True)
class Metric:
    unit: str
    higher_is_better: bool | None
    description: str


METRICS: dict[str, Metric] = {
    "tokens": Metric("tokens", None, "scored tokens"),
    "bytes": Metric("bytes", None, "UTF-8 bytes of the scored text"),
    "ppl": Metric("", False, "perplexity exp(mean NLL)"),
    "ppl_se": Metric("", None, "standard error of PPL (delta method: PPL · SE of mean NLL)"),
    "nll_mean": Metric("nats/token", False, "mean negative log-likelihood of the observed tokens"),
    "bits_per_token": Metric("bits/token", False, "mean NLL / ln 2"),
    "bits_per_byte": Metric("bits/byte", False, "Σ NLL / ln 2 / UTF-8 bytes of the scored text"),
    "total_bits": Metric("bits", False, "Σ NLL / ln 2 over the scored tokens (ideal code length)"),
    "entropy_mean": Metric("bits", None, "mean per-position entropy of the reference's next-token distribution"),
    "entropy_p10": Metric("bits", None, "10th percentile of per-position entropy"),
    "entropy_p50": Metric("bits", None, "median per-position entropy"),
    "entropy_p90": Metric("bits", None, "90th percentile of per-position entropy"),
    "ln_ppl_ratio": Metric("nats", False, "Δ ln PPL = mean(NLL_variant − NLL_reference) = ln(PPL_variant / PPL_reference)"),
    "ln_ppl_ratio_se": Metric("nats", None, "paired standard error of Δ ln PPL"),
    "ppl_ratio": Metric("", False, "PPL_variant / PPL_reference"),
    "kl_mean": Metric("nats", False, "mean KL(reference ‖ variant) over scored positions"),
    "kl_se": Metric("nats", None, "standard error of mean KL"),
    "kl_p50": Metric("nats", False, "median per-position KL"),
    "kl_p90": Metric("nats", False, "90th percentile of per-position KL"),
    "kl_p99": Metric("nats", False, "99th percentile of per-position KL"),
    "kl_p999": Metric("nats", False, "99.9th percentile of per-position KL"),
    "kl_max": Metric("nats", False, "largest per-position KL"),
    "top1": Metric("fraction", True, "top-1 agreement: the reference's top token is the variant's top token (ties count as agreement)"),
    "top1_se": Metric("fraction", None, "standard error of top-1 agreement, √(a(1−a)/n)"),
    "rkl_mean": Metric("nats", False, "mean reverse KL(variant ‖ reference)"),
    "tv_mean": Metric("", False, "mean total variation ½Σ|p − q| (1 − TV is the speculative acceptance)"),
    "bits_per_byte_delta": Metric("bits/byte", False, "variant bits/byte − reference bits/byte"),
    "bits_per_byte_delta_se": Metric("bits/byte", None, "paired standard error of the bits/byte difference"),
    "kl_lower_mean": Metric("nats", False, "mean coarse KL over the reference's top-K + one tail bucket: a lower bound of mean KL"),
    "kl_lower_se": Metric("nats", None, "standard error of the mean coarse KL"),
    "tv_se": Metric("", None, "standard error of mean TV"),
}


def reference_metrics(ref: dict[str, np.ndarray]) -> dict[str, float]:
    nll = ref["nll"].astype(np.float64)
    n_bytes = int(ref["bytes"].sum())
    mean = float(nll.mean())
    ent_bits = ref["entropy"].astype(np.float64) / LN2
    ppl = math.exp(mean)
    return {
        "tokens": int(nll.size),
        "bytes": n_bytes,
        "ppl": ppl,
        "ppl_se": ppl * se(nll),
        "nll_mean": mean,
        "bits_per_token": mean / LN2,
        "bits_per_byte": float(nll.sum() / LN2 / n_bytes) if n_bytes else float("nan"),
        "total_bits": float(nll.sum() / LN2),
        "entropy_mean": float(ent_bits.mean()),
        "entropy_p10": quantile(ent_bits, 0.10),
        "entropy_p50": quantile(ent_bits, 0.50),
        "entropy_p90": quantile(ent_bits, 0.90),
    }


def variant_metrics(ref: dict[str, np.ndarray], var: dict[str, np.ndarray]) -> dict[str, float]:
    nll_r = ref["nll"].astype(np.float64)
    nll_v = var["nll"].astype(np.float64)
    diff = nll_v - nll_r
    kl = var["kl"].astype(np.float64)
    top1 = var["top1"].astype(np.float64)
    n_bytes = int(ref["bytes"].sum())
    mean_v = float(nll_v.mean())
    ppl = math.exp(mean_v)
    a = float(top1.mean())
    bpb_v = float(nll_v.sum() / LN2 / n_bytes) if n_bytes else float("nan")
    bpb_r = float(nll_r.sum() / LN2 / n_bytes) if n_bytes else float("nan")
    return {
        "tokens": int(nll_v.size),
        "ppl": ppl,
        "ppl_se": ppl * se(nll_v),
        "nll_mean": mean_v,
        "bits_per_token": mean_v / LN2,
        "bits_per_byte": bpb_v,
        "bits_per_byte_delta": bpb_v - bpb_r,
        "ln_ppl_ratio": float(diff.mean()),
        "ln_ppl_ratio_se": se(diff),
        "ppl_ratio": math.exp(float(diff.mean())),
        "kl_mean": float(kl.mean()),
        "kl_se": se(kl),
        "kl_p50": quantile(kl, 0.50),
        "kl_p90": quantile(kl, 0.90),
        "kl_p99": quantile(kl, 0.99),
        "kl_p999": quantile(kl, 0.999),
        "kl_max": float(kl.max()),
        "top1": a,
        "top1_se": math.sqrt(a * (1 - a) / top1.size) if top1.size else float("nan"),
        "rkl_mean": float(var["rkl"].astype(np.float64).mean()),
        "tv_mean": float(var["tv"].astype(np.float64).mean()),
    }

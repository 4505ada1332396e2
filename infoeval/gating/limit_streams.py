"""Every gate limit as a mean of per-window observations, so that a confidence sequence can judge it while the
windows arrive (the sequential gate, ``infoeval.measure.stopping``). No torch.

The plan (every window's scored positions n_w and bytes b_w) is known before any window is scored: N windows,
n̄ = Σn_w / N positions per window, B = Σb_w bytes. Each limit becomes "the population mean of y_w ≤ limit'":

| limit | y_w (window w) | limit' | floor | a bound b on the mean of y → the metric |
|---|---|---|---|---|
| max kl_mean, kl_lower_mean, tv_mean, rkl_mean | Σ_w x / n̄ | L | 0 | b |
| min top1 | −Σ_w 1[top-1 agrees] / n̄ | −L | −max n_w / n̄ | −b |
| max ppl_ratio | Σ_w (nll_cand − nll_ref) / n̄ (Δ ln PPL) | ln L | — | exp b |
| max ppl | Σ_w nll_cand / n̄ (ln PPL) | ln L | 0 | exp b |
| max bits_per_byte_delta | (Σ_w Δnll / ln 2 − L·b_w) · N / B | 0 | — | L + b |
| max bits_per_byte | (Σ_w nll_cand / ln 2 − L·b_w) · N / B | 0 | — | L + b |
| max kl_pQ (p90, p99, p999), kld_p95 | Σ_w 1[KL > L] / n̄ (exceedance) | 1 − Q | 0 | b (a share of positions) |
| max dp_rms | Σ_w Δp² / n̄ | L² | 0 | √b |
| max kl_max | max_w KL (kind "max") | L | — | b |

The population mean of Σ_w x / n̄ is Σx / Σn_w, the corpus figure (token weighting, ``sequential.token_weighted``).
A ratio such as Δ bits/byte = ΣΔnll / (ln 2 · B) ≤ L becomes the mean Σ_w(ΔnLL/ln 2 − L b_w)·N/B ≤ 0. A quantile
P_Q ≤ L holds exactly when at most a share 1 − Q of the positions exceeds L (up to the interpolation between
order statistics), a mean of indicators. The maximum has no confidence bound: one position above L is a FAIL,
and only the whole plan proves a PASS.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from infoeval.errors import UsageError, spell
from infoeval.gating.limits import Limit
from infoeval.measure.llamacpp_table_stats import delta_p
from infoeval.measure.stats import LN2
from infoeval.measure.stopping import Stream

QUANTILES = {"kl_p90": 0.90, "kl_p99": 0.99, "kl_p999": 0.999, "kld_p95": 0.95}
MEANS = {"kl_mean": "kl", "kl_lower_mean": "kl_lower", "tv_mean": "tv", "rkl_mean": "rkl"}
WINDOW_COLUMNS = ("nll_ref", "nll", "bytes", "kl", "kl_lower", "tv", "rkl", "top1")


@dataclass(frozen=True)
class Plan:
    """What the sequential gate knows before scoring: windows, mean and largest positions per window, bytes."""

    windows: int
    mean_tokens: float
    max_tokens: int
    total_bytes: int

    @classmethod
    def of(cls, tokens: np.ndarray, nbytes_total: int) -> Plan:
        tokens = np.asarray(tokens)
        return cls(len(tokens), float(tokens.mean()), int(tokens.max()), int(nbytes_total))


@dataclass(frozen=True)
class LimitStream:
    """A limit, its stream, and how to read one window's observation and turn a stream bound into the metric's."""

    limit: Limit
    stream: Stream
    observation: str  # what y_w is, in words (for the report)
    plan: Plan

    def observe(self, w: dict) -> float:
        """y_w from one window's position columns (``WINDOW_COLUMNS``)."""
        m, n_bar, lim = self.limit.metric, self.plan.mean_tokens, self.limit.value
        if m in MEANS:
            return float(np.sum(w[MEANS[m]], dtype=np.float64)) / n_bar
        diff = np.asarray(w["nll"], dtype=np.float64) - np.asarray(w["nll_ref"], dtype=np.float64)
        if m == "top1":
            return -float(np.sum(w["top1"], dtype=np.float64)) / n_bar
        if m == "ppl_ratio":
            return float(diff.sum()) / n_bar
        if m == "ppl":
            return float(np.sum(w["nll"], dtype=np.float64)) / n_bar
        if m in ("bits_per_byte_delta", "bits_per_byte"):
            nats = diff.sum() if m == "bits_per_byte_delta" else float(np.sum(w["nll"], dtype=np.float64))
            b = float(np.sum(w["bytes"], dtype=np.float64))
            return (nats / LN2 - lim * b) * self.plan.windows / self.plan.total_bytes
        if m in QUANTILES:
            return float(np.sum(np.asarray(w["kl"]) > lim)) / n_bar
        if m == "dp_rms":
            return float(np.sum(delta_p(w["nll_ref"], w["nll"]) ** 2)) / n_bar
        if m == "kl_max":
            return float(np.max(w["kl"])) if np.size(w["kl"]) else 0.0
        raise UsageError(f"the sequential gate has no stream for limit '{self.limit.key}'")

    @property
    def bound_of(self) -> str:
        """What ``to_metric`` gives a bound on: the metric itself, the share of positions above a quantile limit,
        or (the maximum) the largest window KL seen so far."""
        m = self.limit.metric
        return "share" if m in QUANTILES else "max" if m == "kl_max" else "metric"

    def to_metric(self, b: float) -> float:
        """A bound on the stream's mean as a bound on the limited metric (the table's last column)."""
        m = self.limit.metric
        if not math.isfinite(b):
            return -b if m == "top1" else b
        if m == "top1":
            return min(max(-b, 0.0), 1.0)
        if m in QUANTILES:
            return min(max(b, 0.0), 1.0)
        if m in ("ppl_ratio", "ppl"):
            return math.exp(b) if b < 700 else math.inf
        if m in ("bits_per_byte_delta", "bits_per_byte"):
            return self.limit.value + b
        if m == "dp_rms":
            return math.sqrt(max(b, 0.0))
        return b


def limit_stream(limit: Limit, plan: Plan) -> LimitStream:
    """The stream that judges ``limit`` (see the module's table); limits without one are a usage error."""
    m, lim, n_bar = limit.metric, limit.value, plan.mean_tokens
    if m in MEANS and limit.side == "max":
        return LimitStream(limit, Stream(limit.key, lim, 0.0), f"mean {MEANS[m]} (token-weighted)", plan)
    if m == "top1" and limit.side == "min":
        floor = math.sqrt(max(lim * (1.0 - lim), 0.0) / n_bar)
        return LimitStream(
            limit,
            Stream(limit.key, -lim, -plan.max_tokens / n_bar, spread_floor=floor),
            "−top-1 agreement (token-weighted)",
            plan,
        )
    if m in ("ppl_ratio", "ppl") and limit.side == "max":
        if lim <= 0:
            raise UsageError(f"gate limit '{limit.key}' = {lim} must be > 0")
        what = "Δ ln PPL" if m == "ppl_ratio" else "ln PPL"
        return LimitStream(
            limit, Stream(limit.key, math.log(lim), None if m == "ppl_ratio" else 0.0), f"{what} (token-weighted)", plan
        )
    if m in ("bits_per_byte_delta", "bits_per_byte") and limit.side == "max":
        what = "Δnll" if m == "bits_per_byte_delta" else "nll"
        return LimitStream(limit, Stream(limit.key, 0.0), f"(Σ{what}/ln 2 − {lim:g}·bytes)·N/B", plan)
    if m in QUANTILES and limit.side == "max":
        share = round(1.0 - QUANTILES[m], 12)
        floor = math.sqrt(share * (1.0 - share) / n_bar)
        return LimitStream(
            limit,
            Stream(limit.key, share, 0.0, spread_floor=floor),
            f"share of positions with KL > {lim:g} (≤ {share:g})",
            plan,
        )
    if m == "dp_rms" and limit.side == "max":
        return LimitStream(limit, Stream(limit.key, lim * lim, 0.0), "mean Δp² (token-weighted)", plan)
    if m == "kl_max" and limit.side == "max":
        return LimitStream(limit, Stream(limit.key, lim, None, "max"), "largest KL of the window", plan)
    raise UsageError(
        f"the sequential gate cannot judge limit '{limit.key}' as a mean; drop it or run the gate without "
        f"{spell('sequential')}"
    )


def window_columns(ref_cols: dict, var: dict, rows: slice) -> dict:
    """One window's position columns, as ``LimitStream.observe`` reads them."""
    return {
        "nll_ref": ref_cols["nll"][rows],
        "bytes": ref_cols["bytes"][rows],
        **{k: var[k][rows] for k in ("nll", "kl", "kl_lower", "tv", "rkl", "top1")},
    }

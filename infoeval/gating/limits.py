"""Gate limits → verdicts. No torch: reads metric dicts (as in result JSON) and decides.

A limit is ``max_<metric>`` or ``min_<metric>`` (aliases: ``max_bpb_increase`` = ``max_bits_per_byte_delta``).
Limits on means are judged with their standard errors: by default a limit passes only when it holds at the
one-sided confidence level (95 %: t ≈ 1.75 on 16 batches), i.e. for a max limit mean + t·SE ≤ max and for a
min limit mean − t·SE ≥ min. The PPL ratio is judged through its log: exp(Δ ln PPL + z·SE) ≤ max. Quantiles (kl_p99 …)
have no standard error here and are judged as point estimates. The SEs are batch means over batches of whole
windows (``stats.se``); a bound uses Student's t quantile with G − 1 degrees of freedom, G the batches
(``se_blocks`` in the metrics): 1.753 instead of z = 1.645 with 16 batches. ``point=True`` judges every metric by its
point estimate. A limit naming an unknown metric, or bounding a metric from the wrong side, is a usage error:
a gate must fail closed, never pass on a typo.

Worked example: kl_mean = 0.040, kl_se = 0.004 on 16 batches, max_kl_mean = 0.045 → bound 0.040 +
1.753·0.004 = 0.0470 > 0.045: FAIL at 95 % (a point estimate would pass).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass

from infoeval.errors import UsageError, spell
from infoeval.measure.metrics import METRICS
from infoeval.measure.stats import t_quantile

# metric → (its standard error in the metrics dict, how the bound is formed)
GATE_METRICS: dict[str, tuple[str | None, str]] = {
    "kl_mean": ("kl_se", "mean"),
    "kl_lower_mean": ("kl_lower_se", "mean"),
    "kl_p90": (None, "point"),
    "kl_p99": (None, "point"),
    "kl_p999": (None, "point"),
    "kl_max": (None, "point"),
    "top1": ("top1_se", "mean"),
    "ppl_ratio": ("ln_ppl_ratio_se", "log"),
    "ppl": ("ppl_se", "mean"),
    "bits_per_byte": (None, "point"),
    "bits_per_byte_delta": ("bits_per_byte_delta_se", "mean"),
    "tv_mean": ("tv_se", "mean"),
    "rkl_mean": (None, "point"),
    "kld_p95": (None, "point"),  # llama.cpp's percentile rule
    "dp_rms": ("dp_rms_se", "mean"),  # llama.cpp's RMS Δp
}
# where each metric can lie: a max limit under its floor or a min limit over its ceiling can never be met
_KL = (0.0, math.inf)
GATE_RANGES: dict[str, tuple[float, float]] = {
    **{m: _KL for m in ("kl_mean", "kl_lower_mean", "kl_p90", "kl_p99", "kl_p999", "kl_max", "rkl_mean", "kld_p95")},
    **{m: (0.0, 1.0) for m in ("top1", "tv_mean", "dp_rms")},
    "ppl_ratio": (0.0, math.inf),
    "ppl": (1.0, math.inf),
    "bits_per_byte": (0.0, math.inf),
    "bits_per_byte_delta": (-math.inf, math.inf),
}
ALIASES = {"max_bpb_increase": "max_bits_per_byte_delta"}
DEFAULT_LIMITS = {
    "max_kl_mean": 0.05,
    "max_kl_p99": 0.5,
    "min_top1": 0.90,
    "max_ppl_ratio": 1.05,
    "max_bpb_increase": 0.05,
}
STRICT_LIMITS = {  # for a checkpoint that should be nearly lossless (int8)
    "max_kl_mean": 0.01,
    "max_kl_p99": 0.1,
    "min_top1": 0.95,
    "max_ppl_ratio": 1.01,
    "max_bpb_increase": 0.01,
}
# --limits NAME: sets that ship with infoeval (configs/gates/NAME.toml holds each as a file to start one's own from)
LIMIT_SETS = {"default": DEFAULT_LIMITS, "strict": STRICT_LIMITS}
DEFAULT_CONFIDENCE = 0.95


@dataclass(frozen=True)
class Limit:
    key: str  # as given, e.g. max_bpb_increase
    metric: str  # e.g. bits_per_byte_delta
    side: str  # "max" or "min"
    value: float


@dataclass(frozen=True)
class Verdict:
    limit: Limit
    value: float
    se: float | None
    bound: float  # what was compared with the limit
    judged: str  # "95% one-sided bound", "point estimate"
    passed: bool
    floor: float | None = None  # set where the noise floor itself does not meet the limit (``below_floor``)

    def as_dict(self) -> dict:
        return {
            "limit": self.limit.key,
            "metric": self.limit.metric,
            "side": self.limit.side,
            "threshold": self.limit.value,
            "value": self.value,
            "se": self.se,
            "bound": self.bound,
            "judged": self.judged,
            "passed": self.passed,
        } | ({"below_floor": True, "floor_value": self.floor} if self.floor is not None else {})


def limits_from(limits_file, overrides: dict) -> tuple[Limit, ...]:
    """The limits of a gate: the defaults, a built-in set's name (``LIMIT_SETS``: default, strict) or a TOML file's
    [limits] table (``limits_file``), with ``overrides`` (name → number, None: not given) on top. A set's name wins
    over a file of that name in the working folder (give that one as ./strict)."""
    raw = dict(DEFAULT_LIMITS)
    if limits_file is not None and str(limits_file) in LIMIT_SETS:
        raw = dict(LIMIT_SETS[str(limits_file)])
    elif limits_file is not None:
        from infoeval.input.settings import read_toml

        data = read_toml(
            limits_file, "limits file", "an existing .toml file or a built-in set: " + ", ".join(LIMIT_SETS)
        )
        raw = data.get("limits", data)
        if not isinstance(raw, dict):
            raise UsageError(f"limits file '{limits_file}': [limits] must be a table of name = number")
    return tuple(parse_limits({**raw, **{k: v for k, v in overrides.items() if v is not None}}))


def parse_limits(raw: dict) -> list[Limit]:
    """{'max_kl_mean': 0.05, ...} → limits; unknown names and wrong sides are usage errors."""
    out = []
    for key, value in raw.items():
        name = ALIASES.get(key, key)
        side, _, metric = name.partition("_")
        if side not in ("max", "min") or metric not in GATE_METRICS:
            allowed = ", ".join([*(f"max_{m}/min_{m}" for m in GATE_METRICS), *ALIASES])
            raise UsageError(f"unknown gate limit '{key}'; allowed: {allowed}")
        hib = METRICS[metric].higher_is_better if metric in METRICS else False
        if (side == "max") == bool(hib):
            other = "min" if side == "max" else "max"
            raise UsageError(
                f"gate limit '{key}' bounds {metric} from the wrong side ({'higher' if hib else 'lower'} is "
                f"better); use {other}_{metric}"
            )
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise UsageError(f"gate limit '{key}' = {value!r} is not a finite number")
        _check_reachable(key, metric, side, float(value))
        out.append(Limit(key, metric, side, float(value)))
    if not out:
        raise UsageError(
            f"no gate limits given; set some in {spell('limits')} FILE.toml or with {spell('max_kl_mean')} and friends"
        )
    return out


def _check_reachable(key: str, metric: str, side: str, value: float) -> None:
    """A limit no run can meet (a KL below 0, an agreement above 1) is a usage error, not a failed gate."""
    lo, hi = GATE_RANGES[metric]
    if (side == "max" and value < lo) or (side == "min" and value > hi):
        need = f"at least {lo:g}" if side == "max" else f"at most {hi:g}"
        raise UsageError(
            f"gate limit '{key}' = {value:g} can never be met ({metric} lies in [{lo:g}, "
            + ("∞)" if hi == math.inf else f"{hi:g}]")
            + f"); give {need}"
        )


def z_value(confidence: float) -> float:
    if not 0.5 <= confidence < 1:
        raise UsageError(f"{spell('confidence')} {confidence} is not allowed; give a level in [0.5, 1), e.g. 0.95")
    return statistics.NormalDist().inv_cdf(confidence)


def quantile_for(confidence: float, blocks: int | None) -> tuple[float, str]:
    """The one-sided quantile of the bounds and how it is named: Student's t with G − 1 degrees of freedom, G the
    batches the SEs rest on (``se_blocks``, at least 2); z when they are not known.

    >>> [round(q, 3) for q, _ in (quantile_for(0.95, 16), quantile_for(0.95, 5), quantile_for(0.95, None))]
    [1.753, 2.132, 1.645]
    """
    z = z_value(confidence)
    if blocks is not None and blocks >= 2:
        return t_quantile(confidence, blocks - 1), f"{confidence:.0%} one-sided bound (t, {blocks - 1} df)"
    return z, f"{confidence:.0%} one-sided bound"


def judge(
    limits: list[Limit], metrics: dict, confidence: float = DEFAULT_CONFIDENCE, point: bool = False
) -> list[Verdict]:
    z, named = quantile_for(confidence, metrics.get("se_blocks"))
    out = []
    for lim in limits:
        se_key, how = GATE_METRICS[lim.metric]
        value = float(metrics[lim.metric])
        se = metrics.get(se_key) if se_key else None
        sign = 1.0 if lim.side == "max" else -1.0
        if point or se is None or how == "point" or not math.isfinite(se):
            bound, judged = value, "point estimate"
        elif how == "log":
            bound, judged = math.exp(math.log(value) + sign * z * se), named
        else:
            bound, judged = value + sign * z * se, named
        passed = math.isfinite(bound) and (bound <= lim.value if lim.side == "max" else bound >= lim.value)
        out.append(Verdict(lim, value, se, bound, judged, passed))
    return out


def below_floor(verdicts: list[Verdict], floor_metrics: dict | None) -> list[Verdict]:
    """The verdicts with every limit that the noise floor itself does not meet (its point estimate on the wrong
    side of the threshold) failed, closed, with the floor's value: a limit below what the run can resolve cannot be
    judged. Metrics the floor does not have are left as they are; without a floor (``--floor off``) nothing changes.

    >>> limits = parse_limits({"max_kl_mean": 1e-5, "max_kl_p99": 0.5})
    >>> v = judge(limits, {"kl_mean": 2e-6, "kl_se": 1e-7, "kl_p99": 0.1})
    >>> [(x.passed, x.floor) for x in below_floor(v, {"kl_mean": 3e-5, "kl_p99": 1e-4})]
    [(False, 3e-05), (True, None)]
    """
    if not floor_metrics:
        return verdicts
    out = []
    for v in verdicts:
        f = floor_metrics.get(v.limit.metric)
        if f is None or not math.isfinite(float(f)):
            out.append(v)
            continue
        f = float(f)
        below = f > v.limit.value if v.limit.side == "max" else f < v.limit.value
        out.append(dataclasses.replace(v, passed=False, judged="below the noise floor", floor=f) if below else v)
    return out


def floor_line(verdict: dict) -> str | None:
    """The one line of a limit below the noise floor (a verdict as in the result JSON; None for any other)."""
    if not verdict.get("below_floor"):
        return None
    return (
        f"{verdict['limit']} {verdict['threshold']:g} is below the noise floor ({verdict['metric']} "
        f"{verdict['floor_value']:.4g} for a "
        "checkpoint no user could tell from the reference): this run cannot judge it, so it fails; raise the "
        "limit, or pass --floor off"
    )


def compare_baseline(metrics: dict, baseline: dict, names: list[str], tolerance: float) -> list[dict]:
    """For each metric: fail when it is worse than the baseline's by more than ``tolerance`` (relative)."""
    if tolerance < 0:
        raise UsageError(f"{spell('baseline_tolerance')} {tolerance} is not allowed; it must be ≥ 0")
    rows = []
    for name in names:
        if name not in baseline:
            raise UsageError(
                f"the baseline result has no metric '{name}'; give a result JSON written by `infoeval gate`"
            )
        now, then = float(metrics[name]), float(baseline[name])
        hib = METRICS[name].higher_is_better if name in METRICS else False
        slack = tolerance * abs(then)
        worse = now < then - slack if hib else now > then + slack
        rows.append({"metric": name, "value": now, "baseline": then, "tolerance": tolerance, "passed": not worse})
    return rows

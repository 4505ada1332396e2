"""The result's ``sequential`` block of `gate --sequential`: the stop, the tokens used of the budget and the
saving, and per limit at the stopping window its confidence sequence's bounds, its decision and the test that
failed it."""

from __future__ import annotations

import math

import numpy as np

from infoeval.gating.settings import SequentialSettings
from infoeval.measure.sequential import FAIL, PASS
from infoeval.measure.stopping import SequentialRule

DECISIONS = {PASS: "pass", FAIL: "fail", 0: "undecided"}
METHOD = (
    "Lai's t-mixture confidence sequence on window-level observations (running intersection); PASS when every "
    "limit's upper bound at alpha holds (intersection-union), FAIL when one limit's lower bound at alpha/k breaks "
    "it (union bound), for a stream with a floor also by the exact capital test, each half of alpha/k"
)


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def limit_rows(rule: SequentialRule, streams: list, obs: np.ndarray) -> list[dict]:
    """Per limit at the stopping window: the stream, its CS, the bounds (``bound_of``: on the metric, on the share of
    positions above a quantile limit, or the largest window KL seen), the decision and which test failed it."""
    rows = []
    for s, st, x in zip(streams, rule.states(obs), obs.T):
        lim = s.limit
        rows.append(
            {
                "limit": lim.key,
                "metric": lim.metric,
                "side": lim.side,
                "threshold": lim.value,
                "observation": s.observation,
                "stream_limit": s.stream.limit,
                "stream_mean": float(x.mean()),
                "stream_lower": _finite(st.lower[-1]),
                "stream_upper": _finite(st.upper[-1]),
                # the bound that proves a PASS (upper for a max limit, lower for top-1) and the one that proves a FAIL
                "pass_bound": _finite(s.to_metric(st.upper[-1])),
                "fail_bound": _finite(s.to_metric(st.lower[-1])),
                "log_capital": None if st.log_capital is None else _finite(st.log_capital[-1]),
                "decision": DECISIONS[int(st.decision[-1])],
                "failed_by": _failed_by(s, st),
                "bound_of": s.bound_of,
            }
        )
    return rows


def _failed_by(s, st) -> str | None:
    """Which test broke a limit: the window maximum, the confidence sequence's lower bound, or the exact capital."""
    if st.decision[-1] != FAIL:
        return None
    if s.stream.kind == "max":
        return "window maximum"
    return "confidence sequence" if st.lower[-1] > s.stream.limit else "exact capital test"


def sequential_report(
    seq: SequentialSettings,
    rule: SequentialRule,
    streams: list,
    outcome,
    obs: np.ndarray,
    order: np.ndarray,
    tokens: np.ndarray,
    fixed_ok: bool,
    round_size: int,
) -> dict:
    """The result's ``sequential`` block: the stop, tokens used of the budget, the saving, every limit's bounds
    (``round_size``: the windows of a round, all ranks together)."""
    in_order = tokens[order]
    used, budget = int(in_order[: outcome.used].sum()), int(in_order[: outcome.budget].sum())
    decision = DECISIONS[outcome.decision] if outcome.decision else "undecided at budget"
    return {
        "decision": decision,
        "fixed_verdict_passed": fixed_ok,
        "undecided": seq.undecided,
        "alpha": seq.alpha,
        "guarantee": seq.order == "seeded",  # text order is not a random sample of the windows: no error bound
        "alpha_pass": rule.levels()[0],
        "alpha_fail_per_limit": rule.levels()[1],
        "method": METHOD,
        "t_opt": rule.t_opt,
        "order": seq.order,
        "seed": seq.seed,
        "round_windows": seq.round_windows,
        "round_size": round_size,
        "rounds": outcome.rounds,
        "stopped_at_window": outcome.used,
        "windows_used": outcome.used,
        "windows_evaluated": outcome.evaluated,
        "windows_budget": outcome.budget,
        "windows_total": len(order),
        "tokens_used": used,
        "tokens_evaluated": int(in_order[: outcome.evaluated].sum()),
        "tokens_budget": budget,
        "tokens_total": int(tokens.sum()),
        "min_tokens": seq.min_tokens,
        "saving": 1.0 - used / budget if budget else 0.0,
        "visited": [int(i) for i in order[: outcome.used]],
        "limits": limit_rows(rule, streams, obs[: outcome.used]),
    }

"""The mix solver, pure maths: one scheme per unit, minimising the predicted KL (the sum of the units' own KLs)
subject to the weight-averaged stored bits per quantized weight ≤ B. A multiple-choice knapsack, solved exactly.

Costs are exact integers: a unit's stored bits under a scheme (``quant/bits.py``: out · (in · b + G · (16 + z))
summed over its layers). The budget B (a decimal or a fraction) becomes the integer capacity ⌊B · N⌋ bits for N
quantized weights, so Σ bits ≤ ⌊B · N⌋ ⟺ Σ bits / N ≤ B: no rounding anywhere. The dynamic programme runs over
the *extra* bits above every unit's cheapest scheme, in units of g = gcd of all extras:

    e[u, k] = (cost[u, k] − min_k cost[u, k]) / g                            integers
    C       = ⌊(⌊B · N⌋ − Σ_u min_k cost[u, k]) / g⌋                          (exact: Σ e is an integer)
    D_0[c]  = 0;   D_u[c] = min_k { D_{u−1}[c − e[u, k]] + kl[u, k] : e[u, k] ≤ c },   c = 0 … C

D_U[C] is the optimum; one table answers every budget up to the largest (back-tracking from each C), so a
``--sweep`` of budgets costs one DP. Example (SmolLM2-135M, int3/int4/int5-g128 and int8-channel): g = 3,072
bits and about 100,000 states per unit. When units × states would exceed ``MAX_CELLS`` the solver falls back to
a Lagrangian sweep (each unit minimises kl + λ · cost; λ bisected to the budget) and reports the gap between
that feasible choice and the Lagrangian dual bound, an upper bound on how far it can be from the optimum.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import reduce

import numpy as np

from infoeval.errors import UsageError, spell

MAX_CELLS = 100_000_000  # units × DP states (one int8 choice each) before the Lagrangian fallback


@dataclass(frozen=True)
class Choice:
    """A solution: the option picked per unit, its predicted KL and bits, and how it was found."""

    picks: tuple[int, ...]
    predicted_kl: float
    total_bits: int
    n_weights: int
    budget_bits: Fraction
    method: str  # "exact" or "lagrangian"
    gap: float  # predicted_kl − a lower bound of the optimum (0 for exact)

    @property
    def bits_per_weight(self) -> float:
        return self.total_bits / self.n_weights


def as_budget(value) -> Fraction:
    """A budget in bits per weight as an exact fraction ('4.125' → 33/8; floats through their decimal repr)."""
    try:
        return Fraction(str(value))
    except (ValueError, ZeroDivisionError):
        raise UsageError(f"{spell('budget_bits')} '{value}' is not a number; give bits per weight, e.g. 4.25") from None


def _check(kl: np.ndarray, cost: np.ndarray, weights: int) -> tuple[np.ndarray, np.ndarray]:
    kl = np.asarray(kl, dtype=np.float64)
    cost = np.asarray(cost, dtype=np.int64)
    if kl.ndim != 2 or kl.shape != cost.shape or kl.shape[0] == 0 or kl.shape[1] == 0:
        raise ValueError(f"kl and cost must be (units, options) arrays of one shape, not {kl.shape} and {cost.shape}")
    if weights <= 0 or (cost < 0).any():
        raise ValueError("weights must be positive and costs non-negative")
    kl = np.where(np.isnan(kl), np.inf, kl)
    if not np.isfinite(kl).any(axis=1).all():
        raise ValueError("every unit needs at least one option with a finite KL")
    return kl, cost


def _cheapest(kl: np.ndarray, cost: np.ndarray) -> np.ndarray:
    """Each unit's cheapest available (finite-KL) option's cost."""
    return np.where(np.isfinite(kl), cost, np.iinfo(np.int64).max).min(axis=1)


def capacity(budget: Fraction, weights: int) -> int:
    """⌊B · N⌋: the most stored bits a budget of B bits per weight allows over N weights."""
    return math.floor(budget * weights)


def _infeasible(budget: Fraction, kl: np.ndarray, cost: np.ndarray, weights: int) -> UsageError:
    low = Fraction(int(_cheapest(kl, cost).sum()), weights)
    return UsageError(
        f"{spell('budget_bits')} {float(budget):g} is below the cheapest mix ({float(low):.4f} bits per weight, every "
        f"unit at its cheapest scheme); raise the budget or add a cheaper scheme"
    )


def check_budgets(cost, weights: int, budgets) -> None:
    """A usage error when a budget (bits per weight) is below the cheapest mix of ``cost`` (U, K stored bits,
    every option available): what ``solve`` would raise, without the KLs."""
    cost = np.asarray(cost, dtype=np.int64)
    kl = np.zeros(cost.shape)
    base = int(_cheapest(kl, cost).sum())
    for b in (as_budget(x) for x in budgets):
        if capacity(b, weights) < base:
            raise _infeasible(b, kl, cost, weights)


def solve(kl, cost, weights: int, budgets) -> list[Choice]:
    """The exact optimum for each budget (bits per weight; Fractions or decimal strings) of the problem with
    per-unit, per-option predicted KL ``kl`` (U, K; NaN: option not available) and stored bits ``cost`` (U, K)
    over ``weights`` quantized weights. A budget below the cheapest mix is a usage error."""
    kl, cost = _check(kl, cost, weights)
    budgets = [as_budget(b) for b in budgets]
    low = _cheapest(kl, cost)
    base = int(low.sum())
    caps = [capacity(b, weights) for b in budgets]
    for b, cap in zip(budgets, caps):
        if cap < base:
            raise _infeasible(b, kl, cost, weights)
    extra = np.where(np.isfinite(kl), cost - low[:, None], 0)  # unavailable options are skipped by the DP
    g = reduce(math.gcd, (int(x) for x in np.unique(extra) if x), 0) or 1
    reach = int(extra.max(axis=1).sum()) // g  # no state beyond every unit's dearest option is ever needed
    states = min((max(caps) - base) // g, reach) + 1
    if kl.shape[0] * states > MAX_CELLS:
        return [lagrangian(kl, cost, weights, b) for b in budgets]
    picks_table, best = _dp(kl, extra // g, states)
    out = []
    for b, cap in zip(budgets, caps):
        c = min((cap - base) // g, states - 1)
        if not np.isfinite(best[c]):
            raise _infeasible(b, kl, cost, weights)
        picks = _backtrack(picks_table, extra // g, c)
        out.append(_choice(picks, kl, cost, weights, b, "exact", 0.0))
    return out


def _dp(kl: np.ndarray, e: np.ndarray, states: int) -> tuple[np.ndarray, np.ndarray]:
    """The table of argmin options (U, states) and the final D_U over budgets c = 0 … states − 1."""
    units, options = kl.shape
    best = np.zeros(states)
    picks = np.zeros((units, states), dtype=np.int8 if options < 128 else np.int32)
    for u in range(units):
        new = np.full(states, np.inf)
        for k in range(options):
            shift = int(e[u, k])
            if shift >= states or not np.isfinite(kl[u, k]):
                continue
            cand = best[: states - shift] + kl[u, k]
            better = cand < new[shift:]
            new[shift:][better] = cand[better]
            picks[u, shift:][better] = k
        best = new
    return picks, best


def _backtrack(picks: np.ndarray, e: np.ndarray, c: int) -> list[int]:
    out = []
    for u in range(picks.shape[0] - 1, -1, -1):
        k = int(picks[u, c])
        out.append(k)
        c -= int(e[u, k])
    return out[::-1]


def _choice(picks, kl, cost, weights, budget, method, gap) -> Choice:
    rows = np.arange(len(picks))
    total = float(sum(float(x) for x in kl[rows, picks]))  # in unit order, as a reader would add them
    return Choice(tuple(int(p) for p in picks), total, int(cost[rows, picks].sum()), weights, budget, method, gap)


def _relaxed(kl: np.ndarray, cost: np.ndarray, lam: float) -> np.ndarray:
    return np.argmin(kl + lam * cost, axis=1)


def lagrangian(kl, cost, weights: int, budget) -> Choice:
    """Feasible choice from the Lagrangian relaxation (smallest λ ≥ 0 whose per-unit argmin of kl + λ · cost fits
    the budget, by bisection) with ``gap`` = its KL − the best dual bound max_λ Σ_u min_k(kl + λ cost) − λ · cap."""
    kl, cost = _check(kl, cost, weights)
    budget = as_budget(budget)
    cap = capacity(budget, weights)
    rows = np.arange(kl.shape[0])
    if int(_cheapest(kl, cost).sum()) > cap:
        raise _infeasible(budget, kl, cost, weights)
    hi = 1.0
    while int(cost[rows, _relaxed(kl, cost, hi)].sum()) > cap:
        hi *= 2.0
    lo, dual = 0.0, -math.inf
    for _ in range(200):
        for lam in (lo, hi):
            picks = _relaxed(kl, cost, lam)
            dual = max(dual, float((kl[rows, picks] + lam * cost[rows, picks]).sum() - lam * cap))
        mid = 0.5 * (lo + hi)
        if int(cost[rows, _relaxed(kl, cost, mid)].sum()) > cap:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-15 * hi:
            break
    picks = _relaxed(kl, cost, hi)
    best = _choice(picks, kl, cost, weights, budget, "lagrangian", 0.0)
    return Choice(
        best.picks,
        best.predicted_kl,
        best.total_bits,
        weights,
        budget,
        "lagrangian",
        max(0.0, best.predicted_kl - dual),
    )


def exhaustive(kl, cost, weights: int, budget) -> Choice:
    """Every combination (for tests and tiny problems): the feasible one of least KL."""
    import itertools

    kl, cost = _check(kl, cost, weights)
    budget = as_budget(budget)
    cap = capacity(budget, weights)
    rows = np.arange(kl.shape[0])
    best = None
    for picks in itertools.product(range(kl.shape[1]), repeat=kl.shape[0]):
        p = np.array(picks)
        if int(cost[rows, p].sum()) <= cap:
            total = float(kl[rows, p].sum())
            if np.isfinite(total) and (best is None or total < best[0]):
                best = (total, picks)
    if best is None:
        raise _infeasible(budget, kl, cost, weights)
    return _choice(list(best[1]), kl, cost, weights, budget, "exhaustive", 0.0)

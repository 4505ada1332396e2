"""When to stop evaluating windows: the visiting order, the rounds, and the decision after every window. Pure
NumPy (no torch, no model): a caller evaluates the windows a round names and hands back one row of observations
per window; ``run_rounds`` says when to stop. Shared by the sequential gate (``SequentialRule``) and by runs to a
precision (``run_until_se``).

* **Order** (``visit_order``): a seeded permutation of the window indices, a pure function of (seed, number of
  windows), fixed before any result is seen; "text" keeps the text's order (no exchangeability: see
  docs/sequential-method.md).
* **Budget** (``budget_count``): the longest prefix of the order whose scored positions fit in ``max_tokens``
  (at least one window).
* **Rounds** (``rounds``): consecutive slices of the order of a fixed size. Under a launcher the engine splits a
  round's windows between the ranks and gathers them, so every rank sees the same rows.
* **Decisions**: a rule maps the first t rows to a decision for window t (+1 PASS / stop, −1 FAIL, 0 go on), for
  every t at once. The stopping window is the first decisive t, found after the round holding it; since the
  decision at t depends on rows 1 … t only, the verdict and the stopping window depend neither on the round size
  nor on the number of ranks (a round only decides how many windows past the stop were evaluated for nothing).

Worked example: one limit "mean ≤ 1" at α = 0.01, a plan of 1,000 windows, observations 3, 3, 3, … with a
floor 0: the exact FAIL test Π x_i/m_i (``fail_log_capital``) is 3, 9.0, 27.2, 82.0, 247.9 after 1 … 5 windows
and reaches 2/α = 200 at window 5, so ``SequentialRule`` fails there; the t-mixture CS alone (no floor, zero
spread) cannot say anything before window 8.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from infoeval.errors import UsageError, spell
from infoeval.measure.sequential import (
    CONTINUE,
    FAIL,
    PASS,
    first_decision,
    running_mean_sd,
    split_alpha,
    t_mixture_cs,
    t_mixture_radius,
)

ORDERS = ("seeded", "text")
T_OPT = 3.0  # windows: where the gate's CSs are tightest (``SequentialRule``)


def check_order(order: str, seed: int) -> None:
    """The settings of a visiting order, as a run's options give them: a known order and an integer seed ≥ 0."""
    if order not in ORDERS:
        raise UsageError(f"{spell('order')} {order!r} is not allowed; give one of {', '.join(ORDERS)}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise UsageError(f"{spell('order_seed')} {seed} is not allowed; give an integer ≥ 0")


def visit_order(n_windows: int, seed: int = 0, order: str = "seeded") -> np.ndarray:
    """The windows' visiting order: a permutation of 0 … n−1 from (seed, n) only, or the text's order.

    >>> visit_order(5, 0, "text").tolist(), sorted(visit_order(5, 3).tolist())
    ([0, 1, 2, 3, 4], [0, 1, 2, 3, 4])
    """
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    if order == "text":
        return np.arange(n_windows)
    return np.random.default_rng(np.random.SeedSequence([int(seed), int(n_windows)])).permutation(n_windows)


def fewest_windows(alpha: float, t_opt: float = T_OPT, most: int = 1000) -> int:
    """The fewest windows after which a mean limit's PASS bound (Lai's t-mixture CS at ``alpha``) can be finite
    (4 at α = 0.05): before that the sequential gate can fail a candidate but never pass one."""
    t = np.arange(1, most + 1, dtype=np.float64)
    finite = np.isfinite(t_mixture_radius(t, np.ones_like(t), alpha, t_opt))
    return int(np.argmax(finite)) + 1 if finite.any() else most + 1


def budget_count(tokens_in_order: Sequence[int], max_tokens: int | None) -> int:
    """How many windows of the order the budget holds: the longest prefix with ≤ ``max_tokens`` scored
    positions, at least one (all with None).

    >>> budget_count([512, 512, 100], 1100), budget_count([512, 512], 10), budget_count([5, 5], None)
    (2, 1, 2)
    """
    n = len(tokens_in_order)
    if max_tokens is None:
        return n
    fits = int(np.searchsorted(np.cumsum(tokens_in_order), max_tokens, side="right"))
    return max(1, min(n, fits))


def rounds(n: int, size: int) -> list[range]:
    """Positions 0 … n−1 of the order in rounds of ``size``.

    >>> rounds(5, 2)
    [range(0, 2), range(2, 4), range(4, 5)]
    """
    if size < 1:
        raise ValueError(f"a round holds at least one window, got {size}")
    return [range(a, min(a + size, n)) for a in range(0, n, size)]


class Rule(Protocol):
    def decisions(self, obs: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """(t,) int8 decisions, one per window, from observations (t, k) and cumulative scored positions (t,)."""


@dataclass(frozen=True)
class Stream:
    """One limit as a stream of per-window observations whose population mean must be ≤ ``limit``.

    floor: a value no observation can be below (0 for KL), known before scoring; it enables the exact FAIL test.
    kind "max": the observations are window maxima; FAIL as soon as one exceeds the limit, PASS only once every
    window of the population has been seen.
    spread_floor: the least standard deviation the window observations are taken to have on the PASS side. A
    share of positions (top-1, the exceedance share of a quantile limit) can be exactly 0 in every window seen,
    and a CS built on a zero running spread would then PASS on a point; with the floor set to the spread a
    window's share would have at the limit if its positions were independent, √(L(1 − L)/n̄), the PASS bound
    is never tighter than that."""

    key: str
    limit: float
    floor: float | None = None
    kind: str = "mean"
    spread_floor: float = 0.0


def fail_log_capital(x: np.ndarray, limit: float, floor: float, population: int) -> np.ndarray:
    """ln K_t of the exact test of "population mean ≤ limit" for observations ≥ floor drawn without replacement
    from ``population`` windows: K_t = Π z_i / m_i with z = x − floor and m_i = (N(L − floor) − Σ_{j<i} z_j) /
    (N − i + 1), the conditional mean of z_i if the mean were exactly L. Under the hypothesis (mean ≤ L) every
    factor has conditional mean ≤ 1 and is ≥ 0, so K is a non-negative supermartingale and, by Ville's
    inequality, P(∃t: K_t ≥ 1/a) ≤ a. Once Σ z already exceeds N(L − floor), the hypothesis is refuted outright
    (+∞). Sticky: a running maximum.

    >>> np.round(np.exp(fail_log_capital(np.array([3.0, 3.0]), 1.0, 0.0, 100)), 3).tolist()
    [3.0, 9.186]
    """
    z = np.maximum(np.asarray(x, dtype=np.float64) - floor, 0.0)
    t = np.arange(1, z.size + 1, dtype=np.float64)
    before = np.concatenate(([0.0], np.cumsum(z)[:-1]))
    total = population * (limit - floor) * (1.0 + 1e-9)  # a relative slack against rounding in the sums
    remaining = total - before
    with np.errstate(divide="ignore", invalid="ignore"):
        m = remaining / np.maximum(population - t + 1.0, 1.0)
        steps = np.where(m > 0, np.log(z) - np.log(m), np.inf)
    refuted = np.cumsum(z) > total
    log_k = np.where(refuted, np.inf, np.cumsum(steps))
    return np.maximum.accumulate(np.nan_to_num(log_k, nan=-1e300, posinf=np.inf, neginf=-1e300))


@dataclass(frozen=True)
class StreamState:
    """One stream after every window: the CS (running intersection) and the decision."""

    lower: np.ndarray
    upper: np.ndarray
    log_capital: np.ndarray | None
    decision: np.ndarray


@dataclass(frozen=True)
class SequentialRule:
    """The sequential gate's rule for k limits: PASS when every limit passes, FAIL as soon as one fails, not
    before ``min_tokens``.

    PASS side of a limit: the upper bound of Lai's t-mixture CS at level α below the limit. The gate passes only
    when *every* limit passes, so if in truth some limit j is broken, a false PASS needs limit j's own CS to miss,
    which happens with probability ≤ α: the intersection-union test (Berger 1982, "Multiparameter hypothesis
    testing and acceptance sampling", Technometrics 24) needs no correction on this side. FAIL side: the gate
    fails when *any* limit fails, so each gets α/k (``split_alpha``, the union bound): the lower bound of the CS
    at α/k above the limit, or, for a stream with a floor, either the CS's lower bound at α/2k or the exact
    capital ``fail_log_capital`` reaching 2k/α (each half of α/k). So P(false PASS) ≤ α and P(false FAIL) ≤ α,
    at any stopping time. ``t_opt`` (in windows) is where the CS is tightest: small, since stopping early on a
    clear candidate is the point (at t = 16 the radius is 3 % wider than with t_opt = 16, at t = 64 7 %)."""

    streams: tuple[Stream, ...]
    alpha: float = 0.05
    population: int = 0  # windows in the whole plan (the target is their mean)
    t_opt: float = T_OPT
    min_tokens: int = 0

    def levels(self) -> tuple[float, float]:
        """(α of each PASS statement, α of each FAIL statement)."""
        fail = split_alpha(self.alpha, len(self.streams))
        if self.alpha >= 0.5:
            raise ValueError(f"alpha = {self.alpha:g} must be < 0.5")
        return self.alpha, fail

    def state(self, x: np.ndarray, s: Stream) -> StreamState:
        a_pass, a_fail = self.levels()
        t = np.arange(1, len(x) + 1)
        if s.kind == "max":
            top = np.maximum.accumulate(x)
            dec = np.where(top > s.limit, FAIL, np.where(t >= self.population, PASS, CONTINUE))
            return StreamState(np.full(len(x), -np.inf), top, None, dec.astype(np.int8))
        _, upper = t_mixture_cs(x, a_pass, t_opt=self.t_opt, running_intersection=True)
        if s.spread_floor > 0:
            mean, sd = running_mean_sd(x)
            floored = mean + t_mixture_radius(
                t.astype(np.float64), np.maximum(np.nan_to_num(sd), s.spread_floor), a_pass, self.t_opt
            )
            upper = np.maximum(upper, np.minimum.accumulate(floored))
        log_k = None
        if s.floor is None:
            lower, _ = t_mixture_cs(x, a_fail, t_opt=self.t_opt, running_intersection=True)
            bad = lower > s.limit
        else:
            lower, _ = t_mixture_cs(x, a_fail / 2, t_opt=self.t_opt, running_intersection=True)
            log_k = fail_log_capital(x, s.limit, s.floor, self.population)
            bad = (lower > s.limit) | (log_k >= math.log(2.0 / a_fail))
        dec = np.where(bad, FAIL, np.where(upper < s.limit, PASS, CONTINUE)).astype(np.int8)
        return StreamState(lower, upper, log_k, dec)

    def states(self, obs: np.ndarray) -> list[StreamState]:
        obs = np.asarray(obs, dtype=np.float64).reshape(-1, len(self.streams))
        return [self.state(obs[:, j], s) for j, s in enumerate(self.streams)]

    def decisions(self, obs: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        per = np.stack([st.decision for st in self.states(obs)])  # (k, t)
        out = np.where((per == FAIL).any(0), FAIL, np.where((per == PASS).all(0), PASS, CONTINUE))
        return np.where(np.asarray(tokens) >= self.min_tokens, out, CONTINUE).astype(np.int8)


@dataclass(frozen=True)
class Outcome:
    """decision: PASS / FAIL (decided at window ``used``), or CONTINUE (undecided: the budget ran out).
    used: windows the verdict rests on (the stopping time); evaluated: windows run (≥ used, whole rounds)."""

    decision: int
    used: int
    evaluated: int
    rounds: int
    budget: int


def run_rounds(
    evaluate: Callable[[np.ndarray], np.ndarray],
    order: np.ndarray,
    budget: int,
    round_size: int,
    rule: Rule,
    tokens_in_order: Sequence[int],
) -> tuple[Outcome, np.ndarray]:
    """Evaluate ``order[:budget]`` round by round (``evaluate(window indices) → (len, k) observations``), deciding
    after each round; returns the outcome and every observation row evaluated (in visiting order)."""
    cum = np.cumsum(np.asarray(tokens_in_order, dtype=np.int64)[:budget])
    rows: list[np.ndarray] = []
    parts = rounds(budget, round_size)
    for i, r in enumerate(parts, 1):
        rows.append(np.asarray(evaluate(np.asarray(order)[r.start : r.stop]), dtype=np.float64).reshape(len(r), -1))
        obs = np.concatenate(rows)
        decision, t = first_decision(rule.decisions(obs, cum[: len(obs)]))
        if decision != CONTINUE:
            return Outcome(decision, t, len(obs), i, budget), obs
    obs = np.concatenate(rows) if rows else np.zeros((0, 0))
    return Outcome(CONTINUE, budget, budget, len(parts), budget), obs


def run_until_se(
    evaluate: Callable[[np.ndarray], None],
    order: np.ndarray,
    budget: int,
    round_size: int,
    se_after: Callable[[int], np.ndarray],
    target: float,
    min_windows: int = 2,
) -> tuple[Outcome, np.ndarray]:
    """Runs to a precision: evaluate ``order[:budget]`` round by round and stop after the first window t (t ≥
    ``min_windows``) at which every standard error ``se_after(t)`` (of the first t windows of the order) is ≤
    ``target``; returns the outcome (PASS: reached at window ``used``; CONTINUE: the budget ran out first) and
    the standard errors at the stop. Like ``run_rounds``, the stopping window depends on the order only, not on
    the round size."""
    if not (math.isfinite(target) and target > 0):
        raise ValueError(f"target must be a finite number > 0, got {target}")
    order, parts = np.asarray(order), rounds(budget, round_size)
    ses = np.full(0, np.nan)
    for i, r in enumerate(parts, 1):
        evaluate(order[r.start : r.stop])
        for t in range(max(r.start + 1, min_windows), r.stop + 1):
            ses = np.atleast_1d(np.asarray(se_after(t), dtype=np.float64))
            if (ses <= target).all():
                return Outcome(PASS, t, r.stop, i, budget), ses
    if budget and budget < min_windows:
        ses = np.atleast_1d(np.asarray(se_after(budget), dtype=np.float64))
    return Outcome(CONTINUE, budget, budget, len(parts), budget), ses

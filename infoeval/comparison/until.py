"""Runs to a precision (`quantize-compare --until-se X`, `compress-bits --until-se X`): the windows of the whole
text in a seeded order fixed before any result is seen (``stopping.visit_order``), evaluated in rounds, until
every watched standard error is ≤ X or the budget (--max-tokens scored positions) runs out.

The standard error watched is the one the result reports: ``stats.se`` (batch means) on the positions of the
windows used so far, put back in text order; for quantize-compare each variant's mean KL, for compress-bits the
model's bits/byte. A user asks for a precision, not a token count; the result's ``until_se`` block says how many
tokens it took. Windows are visited in a random order because the first windows of a text are not a sample of
it (a manual's first pages are its introduction): the mean of randomly chosen windows estimates the whole
text's mean, and the stop is decided on windows 1 … t of that order only, so the round size (and, under a
launcher, the number of ranks: each round is split between them and gathered) changes how many windows past
the stop were evaluated, never the stop or the numbers."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from infoeval import distributed
from infoeval.errors import UsageError, counted, spell
from infoeval.input.protocols import REGISTRY, with_flag
from infoeval.measure.column_metrics import bits_per_byte_se
from infoeval.measure.sequential import PASS
from infoeval.measure.stats import cluster_se, se
from infoeval.measure.stopping import budget_count, check_order, run_until_se, visit_order

MIN_WINDOWS = 4  # an SE from fewer windows rests on one or two windows' own correlation: not trusted to stop
ROUND_WINDOWS = 4  # windows per round and rank: the lockstep run shares a variant's dequantized blocks across 4 windows


@dataclass(frozen=True)
class UntilSettings:
    """--until-se: the target standard error, the budget in scored positions (None: the whole text), the order."""

    target: float
    max_tokens: int | None = None
    seed: int = 0
    order: str = "seeded"

    def __post_init__(self) -> None:
        if (
            isinstance(self.target, bool)
            or not isinstance(self.target, (int, float))
            or not (math.isfinite(self.target) and self.target > 0)
        ):
            raise UsageError(f"{spell('until_se')} {self.target} is not allowed; give a standard error > 0, e.g. 0.01")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise UsageError(f"{spell('max_tokens')} {self.max_tokens} is not allowed; it must be at least 1")
        check_order(self.order, self.seed)


def check_protocol(protocol: str) -> None:
    """A run to a precision visits windows in any order: only a protocol whose windows stand alone (``anytime``);
    lm-eval's and GPTQ's own figures need every document or window."""
    rules = REGISTRY.get(protocol)
    if rules is None or not rules.anytime:
        allowed = " or ".join(with_flag("anytime"))
        raise UsageError(
            f"{spell('until_se')} works with {spell('protocol')} {allowed}, not {protocol} (whose figures need "
            "every window)"
        )


def _split(cols, windows) -> list:
    """The columns of a run over ``windows`` (in that order) cut into one piece per window."""
    edges = np.cumsum([0, *(w.n_scored for w in windows)])
    return [cols.slice(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]


def budget_windows(p, until: UntilSettings) -> int:
    """How many windows of the order the budget holds (for the progress bar)."""
    tokens = np.array([w.n_scored for w in p.windows])
    return budget_count(tokens[visit_order(len(tokens), until.seed, until.order)], until.max_tokens)


def evaluate_until(p, run: Callable, until: UntilSettings, se_of: Callable, join: Callable) -> tuple:
    """Evaluate ``p.windows`` in the seeded order until ``se_of(columns)`` (a dict name → SE) is ≤ the target.

    ``run(windows)`` evaluates some windows and returns columns with ``.slice(a, b)``; ``join(pieces)`` puts
    pieces back together. Returns (the used windows' columns in text order, ``p`` restricted to those windows,
    the ``until_se`` block)."""
    windows = p.windows
    tokens = np.array([w.n_scored for w in windows])
    order = visit_order(len(windows), until.seed, until.order)
    budget = budget_count(tokens[order], until.max_tokens)
    pieces: dict[int, object] = {}

    def evaluate(idx: np.ndarray) -> None:
        chosen = [windows[i] for i in idx]
        for i, piece in zip(idx, _split(run(chosen), chosen)):
            pieces[int(i)] = piece

    def columns(t: int):
        return join([pieces[i] for i in sorted(int(i) for i in order[:t])])

    names: list[str] = []

    def se_after(t: int) -> np.ndarray:
        got = se_of(columns(t))
        names[:] = list(got)
        return np.array(list(got.values()))

    round_size = ROUND_WINDOWS * (distributed.group().world_size if distributed.launched() else 1)
    outcome, ses = run_until_se(evaluate, order, budget, round_size, se_after, until.target, MIN_WINDOWS)
    used = sorted(int(i) for i in order[: outcome.used])
    in_order = tokens[order]
    block = {
        "target": until.target,
        "reached": outcome.decision == PASS,
        "standard_errors": dict(zip(names, map(float, ses))),
        "watched": ("mean KL of every variant" if "bits_per_byte" not in names else "bits/byte")
        + ": the larger of the batch-means SE (the one reported) and the SE over windows",
        "order": until.order,
        "seed": until.seed,
        "min_windows": MIN_WINDOWS,
        "round_windows": round_size,
        "rounds": outcome.rounds,
        "windows_used": outcome.used,
        "windows_evaluated": outcome.evaluated,
        "windows_budget": outcome.budget,
        "windows_total": len(windows),
        "tokens_used": int(in_order[: outcome.used].sum()),
        "tokens_evaluated": int(in_order[: outcome.evaluated].sum()),
        "tokens_budget": int(in_order[: outcome.budget].sum()),
        "tokens_total": int(tokens.sum()),
    }
    return columns(outcome.used), dataclasses.replace(p, windows=tuple(windows[i] for i in used)), block


def until_line(block: dict) -> str:
    """One sentence for the table's caption: reached or not, after how many windows and positions."""
    ses = ", ".join(f"{k} {v:.4g}" for k, v in block["standard_errors"].items())
    head = (
        f"SE ≤ {block['target']:g} reached"
        if block["reached"]
        else f"SE ≤ {block['target']:g} NOT reached: budget spent"
    )
    return (
        f"{head} after {block['windows_used']} of {counted(block['windows_total'], 'window')} in seeded order "
        f"({block['tokens_used']:,} of {block['tokens_total']:,} positions; SE {ses})"
    )


def kl_ses(cols) -> dict[str, float]:
    """quantize-compare --until-se watches every variant's mean-KL SE: the larger of the batch-means SE it reports
    and the SE over windows (the design-based SE of randomly drawn windows, steadier when they are few)."""
    labels = cols.reference["window"]
    return {
        f"{name}/kl": max(se(kl := v["kl"].astype(np.float64), labels), cluster_se(kl, labels))
        for name, v in cols.variants.items()
    }


def bpb_ses(cols) -> dict[str, float]:
    """compress-bits --until-se watches the model's bits/byte SE (the larger of batch means and over windows)."""
    nll, nbytes, labels = cols.reference["nll"], cols.reference["bytes"], cols.reference["window"]
    return {"bits_per_byte": max(bits_per_byte_se(nll, nbytes, windows=labels), bits_per_byte_se(nll, nbytes, labels))}

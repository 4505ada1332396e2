"""spec-accept's per-position columns: the (T, mode) conditions measured, and the reducer that turns both models'
logits, a chunk of rows at a time, into each condition's β, KL, TV, entropies and NLLs and the top-1 agreement."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from infoeval.input.prepare import Prepared
from infoeval.measure.infotheory import by_rows, chunk_rows, log_softmax_t, position_stats, top1_match
from infoeval.speculative.pairs import base_of, run_paired

STAT_COLUMNS = ("entropy_p", "entropy_q", "beta", "kl", "tv", "nll_p", "nll_q")


def conditions(temps: tuple[float, ...]) -> list[tuple[float, str]]:
    """(T, mode) pairs measured: (T, 'both') for every T, and (T, 'target') for every T ≠ 1."""
    out = [(t, "both") for t in temps]
    out += [(t, "target") for t in temps if t != 1.0]
    return out


def key(t: float, mode: str) -> str:
    return f"T={t:g}/{mode}"


@dataclass
class AcceptColumns:
    """Per-position columns (numpy, scored order): ``base`` (window, position, token_id, context, top1) and one
    dict of STAT_COLUMNS per condition key."""

    base: dict[str, np.ndarray]
    stats: dict[str, dict[str, np.ndarray]]
    conditions: list[tuple[float, str]]


def chunk_stats(zp, zq, targets, temps: tuple[float, ...]) -> dict:
    """top1 and every condition's STAT_COLUMNS for some rows of the target's and the draft's float32 logits."""
    out = {"top1": top1_match(zp, zq)}
    lq1 = log_softmax_t(zq, 1.0)
    for t in temps:
        lp = log_softmax_t(zp, t)
        modes = [("both", lq1 if t == 1.0 else log_softmax_t(zq, t))] + ([("target", lq1)] if t != 1.0 else [])
        for mode, lq in modes:
            cols = position_stats(lp, lq, targets)
            out |= {f"{key(t, mode)}/{k}": cols[k] for k in STAT_COLUMNS}
    return out


def evaluate_windows(p: Prepared, draft, temps: tuple[float, ...], on_forward=None) -> AcceptColumns:
    conds = conditions(temps)

    def reduce_pair(rows, zp, zq, targets) -> dict:
        return by_rows(
            zp.shape[0], lambda r: chunk_stats(zp[r].float(), zq[r].float(), targets[r], temps), chunk_rows(zp)
        )

    schema = {"top1": np.bool_, **{f"{key(*c)}/{k}": np.float32 for c in conds for k in STAT_COLUMNS}}
    cols = run_paired(p, p.loaded.model, draft, reduce_pair, schema, on_forward)
    base = base_of(cols) | {"top1": cols["top1"]}
    stats = {key(*c): {k: cols[f"{key(*c)}/{k}"] for k in STAT_COLUMNS} for c in conds}
    return AcceptColumns(base, stats, conds)

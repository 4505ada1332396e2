"""`gate --sequential`: the candidate runs on the reference's windows in a seeded order, in rounds, and stops as
soon as every limit holds with confidence (PASS) or one is broken with confidence (FAIL), judged by anytime-valid
confidence sequences on window-level observations (``limit_streams``, ``infoeval.measure.stopping``); else at the
budget, with the fixed gate's verdict on the positions seen, labelled "undecided at budget".

The model is loaded once; each round is one ``engine.run`` over the round's windows (under a launcher split
between the ranks and gathered), so every rank holds the same observations and takes the same decision, and the
decision after window t uses windows 1 … t only: the verdict and the stopping window do not depend on the world
size or the round size. At the full budget the numbers are the fixed gate's exactly (the same windows, each
run alone, the columns in the reference's order)."""

from __future__ import annotations

import numpy as np
import torch

from infoeval import distributed, engine
from infoeval.errors import UsageError, counted, spell
from infoeval.gating.baseline import judge_baseline
from infoeval.gating.columns import GATE_COLUMNS, gate_metrics, gate_reducer, reference_columns
from infoeval.gating.floor import floor_roles, gate_floor
from infoeval.gating.gate import GateSettings, open_gate
from infoeval.gating.limit_streams import Plan, limit_stream, window_columns
from infoeval.gating.limits import below_floor, judge
from infoeval.gating.positions import REFERENCE_TOP_COLUMNS, TOP_COLUMNS, row_columns
from infoeval.gating.results import GateResult, gate_result
from infoeval.gating.sequential_block import sequential_report
from infoeval.gating.settings import SequentialSettings  # noqa: F401  (re-exported)
from infoeval.input.prepare import Reporter, progress
from infoeval.input.settings import ModelSettings
from infoeval.measure.floor import floor_windows
from infoeval.measure.sequential import PASS
from infoeval.measure.stopping import (
    SequentialRule,
    budget_count,
    fewest_windows,
    run_rounds,
    visit_order,
)
from infoeval.quant.floor import FLOOR


def round_size(seq: SequentialSettings) -> int:
    """Windows per round: --round-windows per rank (under a launcher each rank takes its share of a round)."""
    return seq.round_windows * (distributed.group().world_size if distributed.launched() else 1)


def sequential_rule(streams: list, seq: SequentialSettings, windows: int) -> SequentialRule:
    """The rule for these limits over a plan of ``windows`` windows."""
    return SequentialRule(tuple(s.stream for s in streams), seq.alpha, windows, min_tokens=seq.min_tokens)


@torch.inference_mode()
def run_sequential_gate(
    gate_settings: GateSettings,
    seq: SequentialSettings,
    model_settings: ModelSettings,
    reporter: Reporter | None = None,
) -> tuple[GateResult, dict]:
    """Run the candidate window by window in the visiting order until the verdict is known; returns (result,
    per-position columns of the windows used, in the reference's order)."""
    if gate_settings.point:
        raise UsageError(
            f"{spell('sequential')} judges confidence sequences; it cannot be combined with {spell('point')}"
        )
    reporter = reporter or Reporter()
    planned: dict = {}
    ref, baseline, candidate, load_s = open_gate(
        gate_settings, model_settings, reporter, lambda r: planned.update(_plan(r, seq, gate_settings.limits))
    )
    batches, tokens, ref_cols, streams, order, budget = (
        planned[k] for k in ("batches", "tokens", "ref_cols", "streams", "order", "budget")
    )
    rule = sequential_rule(streams, seq, len(batches))
    floor_at = _floor_at(gate_settings, candidate, batches, order[:budget])
    with progress(  # a step per forward: the candidate's, and the noise floor's on its windows
        reporter,
        budget + len(floor_at),
        f"candidate: up to {budget} of {counted(len(batches), 'window')}, sequential"
        + (f", floor: {len(floor_at)}" if floor_at else ""),
    ) as bar:
        evaluate, var, floors = _evaluator(
            ref, batches, ref_cols, streams, candidate, floor_at, gate_settings.top_k, bar.step
        )
        outcome, obs = run_rounds(evaluate, order, budget, round_size(seq), rule, tokens[order])
    used = np.sort(order[: outcome.used])
    rows = np.concatenate([np.arange(batches[i].rows.start, batches[i].rows.stop) for i in used])
    var_used = {k: v[rows] for k, v in var.items()}
    ref_used = {k: v[rows] for k, v in ref_cols.items()}
    metrics = gate_metrics(ref_used, var_used)
    verdicts, floor, base_rows = _verdicts(
        gate_settings, ref, baseline, candidate, metrics, floors, ref_cols, var, floor_at, rows
    )
    fixed_ok, decided = _decision(seq, outcome, verdicts)
    report = sequential_report(seq, rule, streams, outcome, obs, order, tokens, fixed_ok, round_size(seq))
    result = gate_result(
        gate_settings,
        ref,
        candidate,
        {"load_s": load_s, "eval_s": bar.seconds},
        decided and all(r["passed"] for r in base_rows),
        tuple(v.as_dict() for v in verdicts),
        base_rows,
        metrics,
        report,
        floor,
    )
    return result, {
        "reference": ref_used,
        "variant": var_used,
        "rows": rows,
        **row_columns(ref, rows, var_used, gate_settings.top_k, candidate[1].tokenizer),
    }


def _floor_at(gate_settings: GateSettings, candidate: tuple, batches: list, visited: np.ndarray):
    """The windows of the noise floor: the first windows of the visiting order (``visited``, up to the budget),
    which every sequential gate evaluates; none without a floor model."""
    return (
        floor_windows([batches[i].windows[0].index for i in visited], 1, gate_settings.floor, first=True)
        if candidate[3] is not None
        else ()
    )


def _evaluator(ref, batches: list, ref_cols: dict, streams: list, candidate: tuple, floor_at, top_k: int, on_forward):
    """The rounds' ``evaluate``: the candidate (and the noise floor at ``floor_at``) on some windows, their columns
    put at their rows in ``var`` (``floors``), and each window's observation of every limit's stream; returns
    (evaluate, var, floors)."""
    var: dict = {}
    floors: dict = {
        "window": np.concatenate([np.full(b.rows.stop - b.rows.start, b.windows[0].index) for b in batches])
    }
    reduce, prefix_id = gate_reducer(ref, top_k), ref.meta["provenance"]["protocol"]["prefix_id"]
    roles, only = floor_roles(candidate, floor_at)

    def evaluate(idx: np.ndarray) -> list:
        part = engine.run(
            roles,
            ref.stream_ids,
            [batches[i] for i in idx],
            prefix_id,
            reduce,
            {"top1": np.bool_, f"{FLOOR}/top1": np.bool_, **TOP_COLUMNS, **REFERENCE_TOP_COLUMNS},
            on_forward=on_forward,
            n_rows=ref.n,
            only=only,
        )
        for k in (
            k
            for k in part
            if k in ("nll", *GATE_COLUMNS, *TOP_COLUMNS, *REFERENCE_TOP_COLUMNS) or k.startswith(f"{FLOOR}/")
        ):
            into = floors if k.startswith(f"{FLOOR}/") else var
            into.setdefault(k, np.zeros_like(part[k]))
            for i in idx:
                into[k][batches[i].rows] = part[k][batches[i].rows]
        return [[s.observe(w) for s in streams] for w in (window_columns(ref_cols, var, batches[i].rows) for i in idx)]

    return evaluate, var, floors


def _verdicts(
    gate_settings: GateSettings,
    ref,
    baseline,
    candidate: tuple,
    metrics: dict,
    floors: dict,
    ref_cols: dict,
    var: dict,
    floor_at,
    rows: np.ndarray,
) -> tuple[list, dict | None, list]:
    """The fixed verdicts on the rows of the windows used: every limit (held against the noise floor's block) and
    the baseline's rows; returns (verdicts, floor, baseline rows)."""
    verdicts = judge(list(gate_settings.limits), metrics, gate_settings.confidence, False)
    used_rows = np.zeros(ref.n, bool)
    used_rows[rows] = True
    floor = gate_floor(gate_settings, candidate, floors, ref_cols, var, floor_at, used_rows)
    verdicts = below_floor(verdicts, floor["metrics_all"] if floor else None)
    base_rows = judge_baseline(
        gate_settings, ref, baseline, metrics, [v.limit.metric for v in verdicts], var, ref_cols, used_rows
    )
    return verdicts, floor, base_rows


def _decision(seq: SequentialSettings, outcome, verdicts: list) -> tuple[bool, bool]:
    """(the fixed verdicts all pass, the gate passes on its limits): a PASS of the rule, or an undecided budget with
    ``--undecided pass`` and the fixed verdicts passing; never with a limit below the noise floor."""
    fixed_ok = all(v.passed for v in verdicts)
    floor_failed = any(v.floor is not None for v in verdicts)
    decided = not floor_failed and (
        outcome.decision == PASS or (outcome.decision == 0 and fixed_ok and seq.undecided == "pass")
    )
    return fixed_ok, decided


def _check_windows(seq: SequentialSettings, streams: list, budget: int, windows: int) -> None:
    """A budget of fewer windows than a PASS needs (``fewest_windows``) is a usage error: the gate could only fail."""
    need = fewest_windows(seq.alpha) if any(s.stream.kind == "mean" for s in streams) else 1
    if budget >= need:
        return
    held = f"the reference holds {windows}" + (f", of which the budget allows {budget}" if budget < windows else "")
    more = f"raise {spell('max_tokens')} or " if budget < windows else ""
    raise UsageError(
        f"{spell('sequential')} needs at least {need} windows to pass a candidate at α = {seq.alpha:g} (its confidence "
        f"sequences say nothing before) and {held}: {more}use the fixed gate (without {spell('sequential')}) or a "
        "reference of more text"
    )


def _plan(ref, seq: SequentialSettings, limits) -> dict:
    """Before the candidate is loaded: the windows, their scored positions, the limits' streams, the visiting order
    and the budget; a --min-tokens the budget cannot reach is a usage error (nothing could ever be decided)."""
    batches = engine.plan(ref.windows)
    tokens = np.array([b.rows.stop - b.rows.start for b in batches])
    ref_cols = reference_columns(ref)
    streams = [limit_stream(lim, Plan.of(tokens, int(ref_cols["bytes"].sum()))) for lim in limits]
    order = visit_order(len(batches), seq.seed, seq.order)
    budget = budget_count(tokens[order], seq.max_tokens)
    reachable = int(tokens[order][:budget].sum())
    if seq.min_tokens > reachable:
        raise UsageError(
            f"{spell('min_tokens')} {seq.min_tokens} is more than the budget's {reachable} positions ({budget} "
            "whole windows of "
            f"the reference's {len(batches)}): nothing could be decided; lower it or raise {spell('max_tokens')}"
        )
    _check_windows(seq, streams, budget, len(batches))
    return {
        "batches": batches,
        "tokens": tokens,
        "ref_cols": ref_cols,
        "streams": streams,
        "order": order,
        "budget": budget,
    }

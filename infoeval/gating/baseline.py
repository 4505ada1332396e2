"""`gate --baseline EARLIER`: the candidate against an earlier gate run.

When the earlier run kept its per-position table (a run folder with ``result.json`` and ``positions.csv`` or
``.parquet``, or a result JSON with ``positions.csv`` beside it) on the same reference, each limited metric is
compared **position by position**: the paired difference candidate − baseline, its batch-means SE over whole
windows (``measure/paired.py``), and a one-sided bound at the gate's confidence (t on G − 1 degrees of freedom);
the row fails only when the candidate is worse beyond that noise. Without such a table (or on another reference,
or for a metric with no per-position column) the row keeps the tolerance form: worse than the baseline's value
by more than ``--baseline-tolerance`` (relative), and says so.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from infoeval.errors import DataError, spell
from infoeval.gating.limits import compare_baseline
from infoeval.measure.paired import better, quantile_diff, t_test
from infoeval.measure.stats import LN2, t_quantile
from infoeval.output.results import positions_table, read_positions

# a limited metric → (the baseline table's column, the candidate's column); its direction is the registry's
PAIRED = {
    "kl_mean": ("kl", "kl"),
    "kl_p99": ("kl", "kl"),
    "top1": ("top1_match", "top1"),
    "tv_mean": ("tv", "tv"),
    "rkl_mean": ("rkl", "rkl"),
    "ln_ppl_ratio": ("nll_candidate", "nll"),
    "ppl_ratio": ("nll_candidate", "nll"),
    "bits_per_byte_delta": ("nll_candidate", "nll"),
}


def read_baseline(path: Path) -> tuple[dict, object]:
    """The earlier gate result's metrics and its per-position table (a DataFrame, or None when it kept none)."""
    path = Path(path)
    file = path / "result.json" if path.is_dir() else path
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        if path.is_dir():  # a folder that holds no gate run
            raise DataError(
                f"baseline folder '{path}' holds no result.json; give an earlier gate's run folder or its result "
                f"JSON ({spell('json')})"
            ) from None
        raise DataError(
            f"baseline file '{path}' does not exist; give an earlier gate's result JSON ({spell('json')}) or its "
            "run folder"
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise DataError(f"baseline file '{path}' is not valid JSON") from None
    if not str(data.get("schema", "")).startswith("infoeval/gate/"):
        raise DataError(f"baseline file '{path}' is not a result of `infoeval gate` (schema {data.get('schema')!r})")
    table = positions_table(file.parent)
    frame = None if table is None else read_positions(table)
    return data["metrics"], frame


def matched_rows(frame, identity: dict, used: np.ndarray) -> np.ndarray | None:
    """The baseline table's row for each used reference row (its ``position`` is the reference's row; the same
    token there), or None when the table is not of this reference (a row or token missing or different)."""
    if frame is None or not {"position", "token_id"} <= set(frame.columns):
        return None
    where = {int(p): i for i, p in enumerate(frame["position"].to_numpy())}
    positions = np.flatnonzero(used)
    rows = np.array([where.get(int(p), -1) for p in positions], dtype=np.int64)
    if (rows < 0).any() or not np.array_equal(frame["token_id"].to_numpy()[rows], identity["token_id"][used]):
        return None
    return rows


def paired_row(
    name: str, candidate: np.ndarray, baseline: np.ndarray, windows: np.ndarray, confidence: float, scale: float = 1.0
) -> dict:
    """One limited metric, paired: difference ± SE (in the metric's units: ``scale``), the one-sided bound of the
    worsening at ``confidence``, and whether the candidate is worse beyond it."""
    row = quantile_diff(candidate, baseline, windows) if name == "kl_p99" else t_test(candidate - baseline, windows)
    diff, se = row["diff"] * scale, row["se"] * scale
    q = t_quantile(confidence, row["df"]) if row["df"] >= 1 else float("nan")
    worsening = -better(name) * diff  # > 0: the candidate is worse
    bound = (
        worsening - q * se
    )  # the worsening's lower confidence bound (NaN without an SE: baseline_rows then judges by tolerance)
    return {
        "metric": name,
        "form": "paired",
        "diff": diff,
        "se": se,
        "df": row["df"],
        "worse_by_at_least": bound,
        "confidence": confidence,
        "passed": not bound > 0,
    }


def baseline_rows(
    metrics: dict, baseline: tuple[dict, object], names: list[str], tolerance: float, cols: dict, confidence: float
) -> list[dict]:
    """Every limited metric against the earlier run: paired on its positions where it can be, else by tolerance
    (``cols``: the candidate's columns, ``identity`` (window, position, token id of every reference row) and
    ``used``, the rows this run judged; ``bytes``: the scored bytes, for bits/byte)."""
    base_metrics, frame = baseline
    tolerance_rows = {r["metric"]: r for r in compare_baseline(metrics, base_metrics, names, tolerance)}
    rows = matched_rows(frame, cols["identity"], cols["used"])
    why = (
        (
            "the baseline kept no per-position table"
            if frame is None
            else "the baseline's positions are not this reference's"
        )
        if rows is None
        else None
    )
    out = []
    for name in names:
        then = tolerance_rows[name]
        if rows is None or name not in PAIRED:
            out.append({**then, "form": "tolerance", "note": why or f"{name} has no per-position column"})
            continue
        base_col, cand_col = PAIRED[name]
        scale = (
            float(cols["used"].sum() / LN2 / cols["bytes"]) if name == "bits_per_byte_delta" and cols["bytes"] else 1.0
        )
        cand = cols["variant"][cand_col][cols["used"]].astype(np.float64)
        base = frame[base_col].to_numpy()[rows].astype(np.float64)
        row = paired_row(name, cand, base, cols["identity"]["window"][cols["used"]], confidence, scale)
        if (
            not row["se"] == row["se"] or row["df"] < 1
        ):  # one batch: no SE to pair with, so the tolerance judges (fail closed)
            out.append({**then, "form": "tolerance", "note": "too few positions to pair (fewer than two batches)"})
            continue
        out.append({**row, "value": then["value"], "baseline": then["baseline"]})
    return out


def judge_baseline(
    gate_settings, ref, baseline, metrics: dict, names: list[str], var: dict, ref_cols: dict, used: np.ndarray
) -> list[dict]:
    """The baseline rows of a gate run (none without --baseline); ``used``: the reference rows it judged."""
    if baseline is None:
        return []
    from types import SimpleNamespace

    from infoeval.engine.columns import identity_columns

    identity = identity_columns(SimpleNamespace(windows=ref.windows), ref.stream_ids)
    cols = {"variant": var, "identity": identity, "used": used, "bytes": float(ref_cols["bytes"][used].sum())}
    return baseline_rows(metrics, baseline, names, gate_settings.baseline_tolerance, cols, gate_settings.confidence)

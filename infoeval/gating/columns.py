"""The gate's per-position columns and its metrics: the engine reducer that scores the candidate's logits (and the
noise floor's) against the reference file's rows, the reference's own columns, and the candidate's metrics from
both."""

from __future__ import annotations

import numpy as np
import torch

from infoeval import engine
from infoeval.errors import DataError
from infoeval.gating.compact import CompactDist
from infoeval.gating.hidden import exact_gate_reducer
from infoeval.gating.positions import candidate_top
from infoeval.gating.reference_file import Reference
from infoeval.measure.column_metrics import reference_metrics, variant_metrics
from infoeval.measure.compact_kl import compact_divergences
from infoeval.measure.infotheory import by_rows, chunk_rows, log_softmax
from infoeval.measure.stats import se
from infoeval.quant.floor import FLOOR

CANDIDATE = "the candidate"
GATE_COLUMNS = ("kl", "kl_lower", "tv", "rkl", "top1")


def _slice(d: CompactDist, a: int, b: int) -> CompactDist:
    return CompactDist(*(getattr(d, f)[a:b] for f in CompactDist.__dataclass_fields__))


def _gate_rows(ref: Reference, z: torch.Tensor, rows: slice, top_k: int = 0) -> dict:
    """The gate's columns for the column rows ``rows`` from the candidate's logits ``z`` of those rows (with
    ``top_k``, its k most likely tokens and their probabilities too)."""
    lq = log_softmax(z).cpu()
    d = compact_divergences(_slice(ref.dist, rows.start, rows.stop), lq)
    return {
        "nll": -lq.gather(-1, ref.target_ids[rows, None])[:, 0],
        **{k: getattr(d, k) for k in GATE_COLUMNS},
        **candidate_top(lq, top_k),
    }


def gate_reducer(ref: Reference, top_k: int = 0):
    """The engine's reducer of a gate: the candidate's per-position columns against the reference's rows (a
    hidden-state reference's exact columns: ``gating/hidden.py``; its head resolved by ``open_gate``)."""
    if ref.hidden is not None:
        return exact_gate_reducer(ref, ref.head, CANDIDATE, top_k)

    def reduce(step: engine.Step) -> dict:
        z, a = step.logits[CANDIDATE][0], step.batch.rows.start
        if z.shape[1] != ref.meta["vocab_size"]:
            raise DataError(
                f"the candidate has {z.shape[1]} output logits, the reference {ref.meta['vocab_size']}: "
                "different vocabularies"
            )
        out = by_rows(z.shape[0], lambda r: _gate_rows(ref, z[r], slice(a + r.start, a + r.stop), top_k), chunk_rows(z))
        if (
            FLOOR in step.logits
        ):  # the noise floor on its windows, judged against the reference file as the candidate is
            zf = step.logits[FLOOR][0]
            floor = by_rows(
                zf.shape[0], lambda r: _gate_rows(ref, zf[r], slice(a + r.start, a + r.stop)), chunk_rows(zf)
            )
            out |= {f"{FLOOR}/{k}": floor[k] for k in ("nll", *GATE_COLUMNS)}
        return out

    return reduce


def reference_columns(ref: Reference) -> dict:
    """The reference's per-position columns the metrics read: NLL, bytes, entropy."""
    return {"nll": (-ref.target_logp).numpy(), "bytes": ref.nbytes.numpy(), "entropy": ref.entropy.numpy()}


def gate_metrics(ref_cols: dict, var: dict) -> dict:
    """The candidate's metrics against the reference's columns, with the KL lower bound's mean and SE."""
    m = variant_metrics(ref_cols, var)
    lower = var["kl_lower"].astype(np.float64)
    m["kl_lower_mean"] = float(lower.mean())
    m["kl_lower_se"] = se(lower, ref_cols.get("window"))
    m["reference_ppl"] = reference_metrics(ref_cols)["ppl"]
    return m

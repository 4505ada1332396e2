"""The gate's per-position table: each scored row's window, token and context beside the candidate's columns, and
with ``--topk K`` both models' K most likely tokens and their probabilities (the reference's from its file, the
candidate's from its logits) and the text of every token named, for the report page."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import torch

from infoeval.comparison.frames import top_k_columns
from infoeval.engine.columns import identity_columns
from infoeval.errors import UsageError, spell
from infoeval.input.tokens import token_texts
from infoeval.measure.llamacpp_table_stats import delta_p
from infoeval.measure.topk import top_k_probs

TOP_COLUMNS = {"top_ids": np.int32, "top_p": np.float32}  # the candidate's, (n, k) each, with --topk K
# the reference's, from a hidden-state reference's logits (a top-K reference's are in its file)
REFERENCE_TOP_COLUMNS = {"ref_top_ids": np.int32, "ref_top_p": np.float32}


def check_top_k(k: int, ref_top_k: int) -> None:
    """--topk of a gate: the reference file keeps its top ``ref_top_k`` tokens per position, so at most that."""
    if not 0 <= k <= ref_top_k:
        raise UsageError(
            f"{spell('topk')} {k} is not allowed with this reference: give 0 (none) to {ref_top_k}, the top-K its "
            "file keeps"
        )


def candidate_top(lq: torch.Tensor, k: int) -> dict:
    """The candidate's k most likely tokens and their probabilities from its log-probabilities ``lq`` (n, V)."""
    if not k:
        return {}
    ids, p = top_k_probs(lq, k, log_normalizer=lq.new_zeros(lq.shape[0]))
    return {"top_ids": ids, "top_p": p}


def row_columns(ref, rows: np.ndarray, var: dict, k: int, tokenizer) -> dict:
    """The page's columns of the reference rows ``rows``: window, token id and context (``identity``), with k > 0
    the reference's top-k (``reference_top``) and the text of every token named (``vocab``)."""
    whole = identity_columns(SimpleNamespace(windows=ref.windows), ref.stream_ids)  # every row, in the file's order
    out = {"identity": {c: whole[c][rows] for c in ("window", "token_id", "context")}}
    if k and "ref_top_ids" in var:  # ``var``'s rows are ``rows``
        ids = var["ref_top_ids"]
        out["reference_top"] = {"top_ids": ids, "top_p": var["ref_top_p"]}
    elif k:
        ids = ref.dist.top_ids[rows, :k].numpy().astype(np.int32)
        out["reference_top"] = {"top_ids": ids, "top_p": np.exp(ref.dist.top_logp[rows, :k].numpy()).astype(np.float32)}
    if k:
        named = np.concatenate([out["identity"]["token_id"], ids.ravel(), var["top_ids"].ravel()])
        out["vocab"] = token_texts(tokenizer, named)
    return out


def positions_frame(cols: dict) -> pd.DataFrame:
    """One row per scored position: its window, token and context, both NLLs, the reference's entropy, KL (and
    its lower bound), TV, reverse KL, top-1, Δp, and with --topk both models' top-k."""
    ref, cand, ident = cols["reference"], cols["variant"], cols.get("identity", {})
    return pd.DataFrame(
        {
            "position": cols.get("rows", range(len(cand["nll"]))),
            **ident,
            "nll_reference": ref["nll"],
            "nll_candidate": cand["nll"],
            "entropy_reference": ref["entropy"],
            **{k: cand[k] for k in ("kl", "kl_lower", "tv", "rkl")},
            "top1_match": cand["top1"].astype("int8"),
            "dp": delta_p(ref["nll"], cand["nll"]),
            **top_k_columns(cols.get("reference_top", {}), "ref_"),
            **top_k_columns(cand, ""),
        }
    )

"""quantize-compare's and compress-bits' CSV frames, read from the result's JSON: summary.csv's stable columns (the
reference, each variant and the noise floor), positions.csv's long table (one row per position and variant) and
compress-bits' summary. No torch."""

from __future__ import annotations

import numpy as np
import pandas as pd

from infoeval.measure.llamacpp_table_stats import DP_PERCENTILES, KLD_PERCENTILES, delta_p

CSV_COLUMNS = [
    "variant",
    "bits",
    "group_size",
    "symmetric",
    "tokens",
    "bytes",
    "ppl",
    "ppl_se",
    "ln_ppl_ratio",
    "ln_ppl_ratio_se",
    "ppl_ratio",
    "kl_mean",
    "kl_se",
    "kl_p50",
    "kl_p90",
    "kl_p99",
    "kl_p999",
    "kl_max",
    "top1",
    "top1_se",
    "rkl_mean",
    "tv_mean",
    "bits_per_token",
    "bits_per_byte",
    "bits_per_byte_delta",
    "layers_quantized",
    "layers_skipped",
    "sqnr_db_min",
    "sqnr_db_mean",
    # llama-perplexity --kl-divergence's statistics (llamacpp_table_stats)
    "ppl_ratio_se",
    "ppl_diff",
    "ppl_diff_se",
    "ln_ppl_cor",
    *(f"kld_{k}" for k, _, _ in KLD_PERCENTILES),
    "dp_mean",
    "dp_se",
    "dp_rms",
    "dp_rms_se",
    "dp_positive",
    *(f"dp_{k}" for k, _, _ in DP_PERCENTILES),
    "same_top_se",
    # schema 3: the batch-means SEs' blocks, more SEs, and llama.cpp's own sd/√n SEs
    "se_block",
    "se_blocks",
    "rkl_se",
    "tv_se",
    "bits_per_byte_delta_se",
    *(
        f"llamacpp_{k}"
        for k in (
            "ppl_se",
            "ppl_base_se",
            "ln_ppl_ratio_se",
            "ppl_ratio_se",
            "ppl_diff_se",
            "kl_se",
            "dp_se",
            "dp_rms_se",
        )
    ),
    # the noise floor (measure/floor.py): each variant against it; the floor's own row has its KL and top-1
    "x_floor",
    "floor_diff",
    "floor_diff_se",
    "at_floor",
    # stored bits per weight: codes, scales and zero points (a checkpoint's, read from its files)
    "bits_per_weight",
]


def summary_frame(result: dict) -> pd.DataFrame:
    """One row for the reference, one per variant and one for the noise floor (where the run has one), with the
    stable CSV_COLUMNS."""
    rows = [{"variant": "reference", **result["reference"]}]
    floor = result.get("floor") or {}
    for v in result.get("variants", []):
        q = v.get("quantization", {})
        s = q.get("scheme", {})
        rows.append(
            {
                "variant": v["name"],
                "bits": s.get("bits"),
                "group_size": s.get("group_size"),
                "symmetric": s.get("symmetric"),
                "bytes": result["reference"].get("bytes"),
                "layers_quantized": q.get("layers_quantized"),
                "layers_skipped": q.get("layers_skipped"),
                "sqnr_db_min": q.get("sqnr_db_min"),
                "sqnr_db_mean": q.get("sqnr_db_mean"),
                "bits_per_weight": q.get("bits_per_weight"),
                **v["metrics"],
                **(floor.get("variants") or {}).get(v["name"], {}),
            }
        )
    if floor.get("metrics"):
        m = floor["metrics"]
        rows.append(
            {
                "variant": "floor",
                "tokens": m["positions"],
                "kl_mean": m["kl_mean"],
                "kl_se": m["kl_se"],
                "kl_p99": m["kl_p99"],
                "top1": 1 - m["top1_disagree"],
                "top1_se": m["top1_disagree_se"],
                "layers_quantized": floor["layers"],
            }
        )
    frame = pd.DataFrame(rows).reindex(columns=CSV_COLUMNS)
    for col in ("bits", "group_size", "tokens", "bytes", "layers_quantized", "layers_skipped"):
        frame[col] = frame[col].astype("Int64")  # integers stay integers beside the reference's empty cells
    frame["symmetric"] = frame["symmetric"].astype("boolean")
    frame["at_floor"] = frame["at_floor"].astype("boolean")
    return frame


def top_k_columns(cols: dict[str, np.ndarray], prefix: str) -> dict[str, np.ndarray]:
    """--topk K: {prefix}top{j}_id and {prefix}top{j}_p for j = 1 … K, the j-th most likely token and its
    probability (nothing without --topk)."""
    if "top_ids" not in cols:
        return {}
    ids, probs = cols["top_ids"], cols["top_p"]
    out = {}
    for j in range(ids.shape[1]):
        out[f"{prefix}top{j + 1}_id"] = ids[:, j]
        out[f"{prefix}top{j + 1}_p"] = probs[:, j]
    return out


def positions_frame(reference: dict[str, np.ndarray], variants: dict[str, dict[str, np.ndarray]]) -> pd.DataFrame:
    """Long format: one row per scored position and variant (only reference columns without variants)."""
    base = pd.DataFrame(
        {
            "window": reference["window"],
            "position": reference["position"],
            "token_id": reference["token_id"],
            "context": reference["context"],
            "bytes": reference["bytes"],
            "nll_ref": reference["nll"],
            "entropy_ref": reference["entropy"],
            **({"p_top1_ref": reference["p_top1"]} if "p_top1" in reference else {}),
            **top_k_columns(reference, "ref_"),
        }
    )
    if not variants:
        return base
    frames = []
    for name, cols in variants.items():
        f = base.copy()
        f.insert(5, "variant", name)
        f["nll"] = cols["nll"]
        f["entropy"] = cols["entropy"]
        f["kl"] = cols["kl"]
        f["rkl"] = cols["rkl"]
        f["tv"] = cols["tv"]
        f["top1_match"] = cols["top1"].astype(np.int8)
        f["dp"] = delta_p(reference["nll"], cols["nll"])  # q(y) − p(y), float64
        for key, column in top_k_columns(cols, "").items():
            f[key] = column
        frames.append(f)
    return pd.concat(frames, ignore_index=True)


def compress_frame(result: dict) -> pd.DataFrame:
    """compress-bits summary: the model's ideal code length, then each compressor, on the same bytes."""
    ref = result["reference"]
    rows = [{"method": "model", "bytes": None, "bits": ref["total_bits"], "bits_per_byte": ref["bits_per_byte"]}]
    rows += [{k: r[k] for k in ("method", "bytes", "bits", "bits_per_byte")} for r in result["compressors"]]
    frame = pd.DataFrame(rows)
    frame["bits_vs_model"] = frame["bits"] / ref["total_bits"]
    frame["bytes"] = frame["bytes"].astype("Int64")
    return frame

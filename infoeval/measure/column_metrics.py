"""The aggregation of quantize-compare's per-position columns (a reference's, a variant's against it) into the
metrics of the registry (``metrics.METRICS``), and the standard error of bits/byte.

Standard errors of means over positions are batch means over consecutive blocks in text order
(``stats.se``), which allow for the correlation of neighbouring positions; ``se_block`` and ``se_blocks`` say
how many positions per block and how many blocks. llama.cpp's own SEs (positions as independent) are the
``llamacpp_*`` keys, for ``--table llama.cpp``. Quantiles interpolate linearly between order statistics (NumPy's
default).
"""

from __future__ import annotations

import math

import numpy as np

from infoeval.measure.llamacpp_table_stats import kld_statistics
from infoeval.measure.stats import LN2, cluster_se, quantile, se, se_blocks


def bits_per_byte_se(
    nll: np.ndarray, nbytes: np.ndarray, clusters: np.ndarray | None = None, windows: np.ndarray | None = None
) -> float:
    """SE of bits/byte R = Σ nll / (ln 2 · Σ bytes), a ratio of two means: by the delta method the SE of the mean
    of the linearised series z = (nll/ln 2 − R·bytes) / mean bytes (batch means over whole ``windows``, ``stats.se``).
    With equal bytes per position it is SE(nll)/(ln 2 · bytes). NaN without bytes. With ``clusters`` (a label per
    position, e.g. its window) the SE over those clusters instead of batch means (``stats.cluster_se``).

    >>> round(bits_per_byte_se(np.array([1.0, 2.0, 3.0, 4.0]) * LN2, np.full(4, 2)), 4)  # se 1.0 over 2 bytes
    0.5
    """
    x = np.asarray(nll, dtype=np.float64) / LN2
    b = np.asarray(nbytes, dtype=np.float64)
    if b.sum() <= 0:
        return float("nan")
    ratio = x.sum() / b.sum()
    z = (x - ratio * b) / b.mean()
    return se(z, windows) if clusters is None else cluster_se(z, clusters)


def reference_metrics(ref: dict[str, np.ndarray]) -> dict[str, float]:
    nll, windows = ref["nll"].astype(np.float64), ref.get("window")
    n_bytes = int(ref["bytes"].sum())
    mean = float(nll.mean())
    ent_bits = ref["entropy"].astype(np.float64) / LN2
    ppl = math.exp(mean)
    return {
        "tokens": int(nll.size),
        "bytes": n_bytes,
        "ppl": ppl,
        "ppl_se": ppl * se(nll, windows),
        **se_blocks(nll.size, windows),
        "nll_mean": mean,
        "bits_per_token": mean / LN2,
        "bits_per_byte": float(nll.sum() / LN2 / n_bytes) if n_bytes else float("nan"),
        "bits_per_byte_se": bits_per_byte_se(nll, ref["bytes"], windows=windows),
        "total_bits": float(nll.sum() / LN2),
        "entropy_mean": float(ent_bits.mean()),
        "entropy_p10": quantile(ent_bits, 0.10),
        "entropy_p50": quantile(ent_bits, 0.50),
        "entropy_p90": quantile(ent_bits, 0.90),
    }


def variant_metrics(ref: dict[str, np.ndarray], var: dict[str, np.ndarray]) -> dict[str, float]:
    nll_r, windows = ref["nll"].astype(np.float64), ref.get("window")
    nll_v = var["nll"].astype(np.float64)
    diff = nll_v - nll_r
    kl = var["kl"].astype(np.float64)
    top1 = var["top1"].astype(np.float64)
    rkl, tv = var["rkl"].astype(np.float64), var["tv"].astype(np.float64)
    n_bytes = int(ref["bytes"].sum())
    mean_v = float(nll_v.mean())
    ppl = math.exp(mean_v)
    a = float(top1.mean())
    bpb_v = float(nll_v.sum() / LN2 / n_bytes) if n_bytes else float("nan")
    bpb_r = float(nll_r.sum() / LN2 / n_bytes) if n_bytes else float("nan")
    return {
        "tokens": int(nll_v.size),
        "ppl": ppl,
        "ppl_se": ppl * se(nll_v, windows),
        **se_blocks(nll_v.size, windows),
        "nll_mean": mean_v,
        "bits_per_token": mean_v / LN2,
        "bits_per_byte": bpb_v,
        "bits_per_byte_delta": bpb_v - bpb_r,
        "bits_per_byte_delta_se": se(diff, windows) * diff.size / LN2 / n_bytes if n_bytes else float("nan"),
        "ln_ppl_ratio": float(diff.mean()),
        "ln_ppl_ratio_se": se(diff, windows),
        "ppl_ratio": math.exp(float(diff.mean())),
        "kl_mean": float(kl.mean()),
        "kl_se": se(kl, windows),
        "kl_p50": quantile(kl, 0.50),
        "kl_p90": quantile(kl, 0.90),
        "kl_p99": quantile(kl, 0.99),
        "kl_p999": quantile(kl, 0.999),
        "kl_max": float(kl.max()),
        "top1": a,
        "top1_se": se(top1, windows),
        "rkl_mean": float(rkl.mean()),
        "rkl_se": se(rkl, windows),
        "tv_mean": float(tv.mean()),
        "tv_se": se(tv, windows),
        **kld_statistics(nll_r, nll_v, var["kl"], var["top1"]),
    }

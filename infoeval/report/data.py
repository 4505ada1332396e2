"""The page's numbers for one run, from its result and positions table: per scored position the token, window,
context length, the reference's NLL, entropy and top-K, and per variant its KL, Δp, NLL, top-1 match and
top-K; the worst positions; the metrics and the provenance for the section's header. Pure: no torch, no I/O."""

from __future__ import annotations

import numpy as np
import pandas as pd

WORST = 30  # positions listed per variant, by KL
DIGITS = 5  # significant digits kept for the page's numbers


def _round(x: np.ndarray) -> list:
    """Numbers to DIGITS significant digits (the page shows 4): smaller JSON, the same figures. Taken as float32,
    the precision they are measured in, so a table read back from CSV gives the very same page."""
    x = np.asarray(x, dtype=np.float32).astype(np.float64)
    return [float(f"{v:.{DIGITS}g}") for v in x]


def _top(frame: pd.DataFrame, prefix: str) -> dict | None:
    ids = sorted((c for c in frame.columns if c.startswith(f"{prefix}top") and c.endswith("_id")), key=lambda c: int(c[len(prefix) + 3 : -3]))
    if not ids:
        return None
    return {"ids": frame[ids].to_numpy(np.int64).tolist(), "p": [_round(row) for row in frame[[c[:-3] + "_p" for c in ids]].to_numpy()]}


def run_data(result: dict, frame: pd.DataFrame, vocab: dict[int, str], title: str) -> dict:
    """The JSON a page section is drawn from."""
    names = [v["name"] for v in result["variants"]]
    per = {name: frame[frame["variant"] == name].sort_values("position") for name in names} if "variant" in frame else {}
    first = per[names[0]] if names else frame.sort_values("position")
    variants = {}
    for name, f in per.items():
        kl = f["kl"].to_numpy(np.float64)
        worst = np.argsort(-kl, kind="stable")[:WORST]
        variants[name] = {"kl": _round(kl), "dp": _round(f["dp"]), "nll": _round(f["nll"]), "top1": f["top1_match"].astype(int).tolist(),
                          "top": _top(f, ""), "worst": worst.tolist()}  # fmt: skip
    prov = result["provenance"]
    used = {int(i) for i in first["token_id"]}
    for top in [_top(first, "ref_")] + [v["top"] for v in variants.values()]:
        if top:
            used.update(i for row in top["ids"] for i in row)
    return {
        "title": title, "command": " ".join(["infoeval", *(prov.get("argv") or ())[1:]]), "model": prov.get("model", {}).get("spec"),
        "text": prov.get("text", {}), "protocol": prov.get("protocol", {}), "created": prov.get("created"),
        "metrics": {v["name"]: v["metrics"] for v in result["variants"]}, "reference_metrics": result["reference"],
        "n": len(first), "token": first["token_id"].astype(int).tolist(), "window": first["window"].astype(int).tolist(),
        "context": first["context"].astype(int).tolist(), "position": first["position"].astype(int).tolist(),
        "ref": {"nll": _round(first["nll_ref"]), "entropy": _round(first["entropy_ref"]), "top": _top(first, "ref_")},
        "variants": variants, "vocab": {str(i): vocab.get(i, f"<{i}>") for i in sorted(used)},
    }  # fmt: skip

"""The page's numbers for one run, from its result and positions table: per scored position the token, window,
context length, the reference's NLL, entropy and top-K, and per variant (a quantize-compare scheme, a gate's
candidate; none for compress-bits) its KL, Δp, NLL, top-1 match and top-K; the worst positions; the metrics, a
gate's verdicts, compress-bits' compressors and the provenance for the section's header. The per-position
columns are packed (``packed``: typed-array bytes in base64). Pure: no torch, no I/O."""

from __future__ import annotations

from pathlib import PurePath

import numpy as np
import pandas as pd

from infoeval.measure.frontier import frontier_points
from infoeval.report.packed import pack_floats, pack_ints

WORST = 30  # positions listed per variant, by KL and by Δp (by the reference's NLL without variants)
GATE_NAMES = {
    "nll_reference": "nll_ref",
    "entropy_reference": "entropy_ref",
    "nll_candidate": "nll",
}  # gate → quantize-compare


def command_of(result: dict) -> str:
    """The command a result JSON came from (its schema ``infoeval/<command>/<version>``)."""
    return str(result.get("schema", "")).removeprefix("infoeval/").partition("/")[0]


def variant_names(result: dict) -> list[str]:
    """The variants of a run: quantize-compare's schemes, a gate's candidate (the last part of its name or path,
    and its scheme), none for compress-bits."""
    command = command_of(result)
    if command == "gate":
        c = result["candidate"]
        return [" ".join(x for x in (PurePath(c["spec"]).name or c["spec"], c.get("scheme")) if x)]
    return [v["name"] for v in result.get("variants", ())]


def variant_metrics(result: dict) -> dict[str, dict]:
    """name → the metrics of each variant (a gate's candidate metrics under its name)."""
    if command_of(result) == "gate":
        return {variant_names(result)[0]: result["metrics"]}
    return {v["name"]: v["metrics"] for v in result.get("variants", ())}


def reference_provenance(result: dict) -> dict:
    """The provenance of the reference's pass: the run's own, or for a gate the reference file's."""
    return result["provenance"].get("reference_provenance") or result["provenance"]


def _top_ids(frame: pd.DataFrame, prefix: str) -> list[str]:
    """The columns {prefix}top1_id … {prefix}topK_id, in rank order."""
    return sorted(
        (c for c in frame.columns if c.startswith(f"{prefix}top") and c.endswith("_id")),
        key=lambda c: int(c[len(prefix) + 3 : -3]),
    )


def _top(frame: pd.DataFrame, prefix: str) -> dict | None:
    ids = _top_ids(frame, prefix)
    if not ids:
        return None
    return {
        "k": len(ids),
        "ids": pack_ints(frame[ids].to_numpy(np.int64).ravel()),
        "p": pack_floats(frame[[c[:-3] + "_p" for c in ids]].to_numpy().ravel()),
    }


def _worst(x: np.ndarray) -> list[int]:
    return np.argsort(-np.asarray(x, dtype=np.float64), kind="stable")[:WORST].tolist()


def _per_variant(result: dict, frame: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    """The reference's rows (one per scored position) and each variant's, all in position order."""
    names = variant_names(result)
    if command_of(result) == "gate":
        frame = frame.rename(columns=GATE_NAMES)
        per = {names[0]: frame.sort_values("position")}
    else:
        per = (
            {name: frame[frame["variant"] == name].sort_values("position") for name in names}
            if "variant" in frame
            else {}
        )
    return (per[names[0]] if per else frame.sort_values("position")), per


def _header(result: dict) -> dict:
    """What a section's header shows besides the metrics: the command, model, text, protocol, and a gate's verdicts
    or compress-bits' compressors."""
    prov, ref_prov = result["provenance"], reference_provenance(result)
    out = {
        "command": " ".join(["infoeval", *(prov.get("argv") or ())[1:]]),
        "model": prov.get("model", {}).get("spec"),
        "text": ref_prov.get("text") or {},
        "protocol": ref_prov.get("protocol") or {},
        "created": prov.get("created"),
    }
    if command_of(result) == "gate":
        seq = result.get("sequential") or {}
        keep = ("decision", "stopped_at_window", "windows_budget", "tokens_used", "tokens_budget", "alpha")
        out["gate"] = {
            "passed": result["passed"],
            "verdicts": list(result["verdicts"]),
            "baseline": (result.get("baseline") or {}).get("rows", []),
            "sequential": {k: seq[k] for k in keep if k in seq} or None,
            "reference_model": ref_prov.get("model", {}).get("spec"),
        }
    if "compressors" in result:
        out["compressors"] = [{k: r[k] for k in ("method", "bits_per_byte")} for r in result["compressors"]]
    out["floor"] = floor_header(result)
    return out


def floor_header(result: dict) -> dict | None:
    """The noise floor as the header shows it: its windows, mean KL ± SE, P99, top-1 disagreement, and each
    variant's × floor and at floor (a gate's candidate under its name); None without one."""
    f = result.get("floor") or {}
    if not f.get("metrics"):
        return None
    versus = f.get("variants") or ({variant_names(result)[0]: f["candidate"]} if f.get("candidate") else {})
    return {
        "windows": len(f["windows"]),
        "mode": f["mode"],
        **{k: f["metrics"][k] for k in ("kl_mean", "kl_se", "kl_p99", "top1_disagree")},
        "versus": {n: {"x_floor": v["x_floor"], "at_floor": v["at_floor"]} for n, v in versus.items()},
    }


def run_data(result: dict, frame: pd.DataFrame, vocab: dict[int, str], title: str) -> dict:
    """The JSON a page section is drawn from."""
    first, per = _per_variant(result, frame)
    variants = {}
    for name, f in per.items():
        variants[name] = {
            "kl": pack_floats(f["kl"]),
            "dp": pack_floats(f["dp"]),
            "nll": pack_floats(f["nll"]),
            "top1": pack_ints(f["top1_match"]),
            "top": _top(f, ""),
            "worst": _worst(f["kl"]),
            "worst_dp": _worst(-f["dp"].to_numpy(np.float64)),
        }
    named = [
        first["token_id"].to_numpy(),
        first[_top_ids(first, "ref_")].to_numpy().ravel(),
        *(f[_top_ids(f, "")].to_numpy().ravel() for f in per.values()),
    ]
    used = np.unique(np.concatenate(named).astype(np.int64)).tolist()
    return {
        "title": title,
        "kind": command_of(result),
        **_header(result),
        "metrics": variant_metrics(result),
        "reference_metrics": result["reference"],
        "n": len(first),
        **{
            key: pack_ints(first[column])
            for key, column in (
                ("token", "token_id"),
                ("window", "window"),
                ("context", "context"),
                ("position", "position"),
            )
        },
        "ref": {
            "nll": pack_floats(first["nll_ref"]),
            "entropy": pack_floats(first["entropy_ref"]),
            "top": _top(first, "ref_"),
            "worst": _worst(first["nll_ref"]),
        },
        "variants": variants,
        "vocab": {str(i): vocab.get(i, f"<{i}>") for i in used},
        "frontier_points": frontier_points(result),
        **{k: result[k] for k in ("paired", "by_confidence") if result.get(k)},
    }

"""Several runs on one page: the comparison table of every variant of every run, and the check that the runs can
be compared at all. Their numbers are comparable only when every run scored the same positions of the same text
with the same reference model (same weights, dtype, window protocol); runs that differ are refused with one line
unless the page is asked for without a table (``--separate``). Pure: no I/O."""

from __future__ import annotations

from infoeval.errors import UsageError, spell
from infoeval.report.data import command_of, reference_provenance, variant_metrics

KEYS = ("model", "dtype", "text", "protocol", "positions")  # what runs on one comparison table must share


def shared_key(result: dict) -> dict[str, str]:
    """What a run's numbers depend on besides its variants: the reference model (its weights' hash where known,
    else its name and revision) and dtype, the text's hash, the window protocol and the number of scored positions."""
    prov = reference_provenance(result)
    model, text, proto = prov.get("model") or {}, prov.get("text") or {}, prov.get("protocol") or {}
    return {
        "model": str(model.get("sha256") or f"{model.get('spec')}@{model.get('revision') or 'main'}"),
        "dtype": str(model.get("dtype") or prov.get("dtype")),
        "text": str(text.get("sha256")),
        "protocol": f"{proto.get('name')} ctx {proto.get('ctx')} stride {proto.get('stride')} prefix "
        f"{proto.get('prefix_id')}",
        "positions": str(result["reference"].get("tokens")),
    }


def check_comparable(results: list[dict], names: list[str]) -> None:
    """Refuse, with one line naming the first difference, runs that did not score the same positions of the same
    text with the same reference."""
    keys = [shared_key(r) for r in results]
    for name, key in zip(names[1:], keys[1:]):
        for k in KEYS:
            if key[k] != keys[0][k]:
                a, b = keys[0][k], key[k]
                raise UsageError(
                    f"'{names[0]}' and '{name}' differ in the reference's {k} ({a[:24]} vs {b[:24]}), so their numbers "
                    f"are not comparable; give runs of one text, model and protocol, or {spell('separate')} for "
                    "sections "
                    "without a table"
                )


def comparison_rows(results: list[dict], titles: list[str]) -> list[dict]:
    """One row per variant of every run (one per compress-bits run, for its model alone): the run, the variant,
    its scored positions, mean KL ± SE, KL P99, top-1, PPL ratio, Δ bits/byte and a gate's verdict."""
    rows = []
    for result, title in zip(results, titles):
        ref, command = result["reference"], command_of(result)
        base = {
            "run": title,
            "command": command,
            "reference_ppl": ref.get("ppl"),
            "reference_bpb": ref.get("bits_per_byte"),
        }
        metrics = variant_metrics(result)
        if not metrics:
            rows.append({**base, "variant": "(the model alone)", "positions": ref.get("tokens")})
        for name, m in metrics.items():
            rows.append(
                {
                    **base,
                    "variant": name,
                    "positions": m.get("tokens"),
                    "kl_mean": m.get("kl_mean"),
                    "kl_se": m.get("kl_se"),
                    "kl_p99": m.get("kl_p99"),
                    "top1": m.get("top1"),
                    "ppl_ratio": m.get("ppl_ratio"),
                    "bpb_delta": m.get("bits_per_byte_delta"),
                    "passed": result.get("passed") if command == "gate" else None,
                }
            )
    return rows

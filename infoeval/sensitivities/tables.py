"""sensitivity's terminal table (units ranked by mean KL) and its summary CSV frame; no torch import."""

from __future__ import annotations

import pandas as pd
from rich import box
from rich.console import Console

from infoeval.output.tables import fmt_num, fmt_pm, report_table, run_header

COLUMNS = (
    "unit",
    "kind",
    "scheme",
    "n_weights",
    "kl_mean",
    "kl_se",
    "kl_p99",
    "top1",
    "dln_ppl",
    "dln_ppl_se",
    "proxy",
    "start_block",
    "depth",
    "layers",
)


def ranked(data: dict) -> list[dict]:
    """Units × schemes from the largest mean KL down."""
    return sorted(data["units"], key=lambda u: -(u["kl_mean"] if u["kl_mean"] is not None else float("-inf")))


def _proxy_ranks(rows: list[dict]) -> dict[tuple[str, str], int]:
    """(unit, scheme) → rank of its proxy within its scheme (1 = largest)."""
    out = {}
    for scheme in {r["scheme"] for r in rows}:
        mine = sorted((r for r in rows if r["scheme"] == scheme and r["proxy"] is not None), key=lambda r: -r["proxy"])
        out |= {(r["unit"], scheme): i for i, r in enumerate(mine, 1)}
    return out


def _caption(data: dict) -> str:
    t, ref = data["timings"], data["reference"]
    cache = "block-input cache" if data["block_cache"] else "no block cache (every unit from the embeddings)"
    parts = [
        f"KL(reference‖unit quantized) in nats/token ± SE over {ref['tokens']:,} positions; Δ ln PPL = mean "
        f"NLL change ± paired SE; reference PPL {fmt_num(ref['ppl'])} (mean NLL {fmt_num(ref['nll_mean'])} nats).",
        f"sweep {t['sweep_s']:.1f} s ({t['sweep_s_per_unit']:.2f} s per unit × scheme) with {cache}, "
        f"{data['layers_run_fraction']:.0%} of the blocks a plain sweep runs.",
    ]
    px = data.get("proxy")
    if px:
        per = ", ".join(f"{k} {fmt_num(v['spearman'], 3)}" for k, v in px["per_scheme"].items())
        parts.append(
            f"proxy: {px['method']}; {t['proxy_s']:.1f} s; Spearman ρ(proxy, KL) over {px['n']} rows: "
            f"{fmt_num(px['spearman'], 3)} (per scheme: {per}); median proxy / KL {fmt_num(px.get('median_ratio'), 3)}."
        )
    return "\n".join(parts)


def print_sensitivity(console: Console, data: dict) -> None:
    """The run header, then the units ranked by mean KL."""
    console.print(run_header(data))
    rows = ranked(data)
    pranks = _proxy_ranks(rows)
    prefix = data.get("decoder_prefix") or ""
    title = f"Sensitivity by {data['by']}" + (f" (units in {prefix}.)" if prefix and data["by"] != "type" else "")
    table = report_table(
        title,
        ["#", "unit", "scheme", "weights", "KL mean ± SE", "KL P99", "top-1", "Δ ln PPL ± SE", "proxy", "p#"],
        caption=_caption(data),
        left=3,
        no_wrap=True,
    )
    table.box, table.pad_edge = box.SIMPLE_HEAD, False  # the long unit names need the width
    for i, r in enumerate(rows, 1):
        name = r["unit"][len(prefix) + 1 :] if prefix and r["unit"].startswith(prefix + ".") else r["unit"]
        table.add_row(
            str(i),
            name,
            r["scheme"],
            fmt_num(r["n_weights"]),
            fmt_pm(r["kl_mean"], r["kl_se"], 3),
            fmt_num(r["kl_p99"]),
            fmt_num(r["top1"]),
            fmt_pm(r["dln_ppl"], r["dln_ppl_se"], 3),
            fmt_num(r["proxy"]),
            str(pranks.get((r["unit"], r["scheme"]), "–")),
        )
    console.print(table)


def summary_frame(data: dict) -> pd.DataFrame:
    """One CSV row per unit × scheme (ranked), layers joined by spaces."""
    rows = [{k: (" ".join(r[k]) if k == "layers" else r.get(k)) for k in COLUMNS} for r in ranked(data)]
    return pd.DataFrame(rows, columns=list(COLUMNS))

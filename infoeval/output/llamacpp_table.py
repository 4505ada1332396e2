"""``--table llama.cpp``: the statistics block of ``llama-perplexity --kl-divergence``, line for line and in its
printf formats, from a result's metrics (Q = the variant or candidate, base = the reference). No torch.

Lines llama.cpp prints and where they come from (``llamacpp_table_stats`` has the definitions). The ± are
llama.cpp's own SEs, positions treated as independent (the ``llamacpp_*`` keys, from the variant's metrics):
infoeval's other tables print batch-means SEs, which allow for correlated neighbouring positions.

    Mean PPL(Q), Mean PPL(base)      ppl ± llamacpp_ppl_se, ref ppl ± llamacpp_ppl_base_se
    Cor(ln(PPL(Q)), ln(PPL(base)))   ln_ppl_cor
    Mean ln(PPL(Q)/PPL(base))        ln_ppl_ratio ± llamacpp_ln_ppl_ratio_se
    Mean PPL(Q)/PPL(base)            ppl_ratio ± llamacpp_ppl_ratio_se
    Mean PPL(Q)-PPL(base)            ppl_diff ± llamacpp_ppl_diff_se
    Mean KLD, KLD percentiles        kl_mean ± llamacpp_kl_se, kld_*
    Mean Δp, Δp percentiles          dp_mean ± llamacpp_dp_se, dp_* (printed in %)
    RMS Δp, Same top p               dp_rms ± llamacpp_dp_rms_se, top1 ± same_top_se (in %)
plus one line llama.cpp does not print: ``Δp > 0`` (dp_positive, in %).
"""

from __future__ import annotations

import math

from rich.console import Console

from infoeval.input.protocols import registered, with_flag
from infoeval.measure.llamacpp_table_stats import DP_PERCENTILES, KLD_PERCENTILES


def _f(fmt: str, *values) -> str:
    """printf-style formatting; a missing or NaN value prints as nan (as C's printf does)."""
    return fmt % tuple(math.nan if v is None else v for v in values)


def _pct(label: str) -> str:
    return label.replace("%", "%%")  # a label inside a printf format


def block_lines(m: dict, ref: dict) -> list[str]:
    """The three sections of llama.cpp's final block for variant metrics ``m`` against reference metrics ``ref``."""
    lines = [
        "====== Perplexity statistics ======",
        _f("Mean PPL(Q)                   : %10.6f ± %10.6f", m["ppl"], m["llamacpp_ppl_se"]),
        _f("Mean PPL(base)                : %10.6f ± %10.6f", ref["ppl"], m["llamacpp_ppl_base_se"]),
        _f("Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%", 100.0 * m["ln_ppl_cor"]),
        _f("Mean ln(PPL(Q)/PPL(base))     : %10.6f ± %10.6f", m["ln_ppl_ratio"], m["llamacpp_ln_ppl_ratio_se"]),
        _f("Mean PPL(Q)/PPL(base)         : %10.6f ± %10.6f", m["ppl_ratio"], m["llamacpp_ppl_ratio_se"]),
        _f("Mean PPL(Q)-PPL(base)         : %10.6f ± %10.6f", m["ppl_diff"], m["llamacpp_ppl_diff_se"]),
        "",
        "====== KL divergence statistics ======",
        _f("Mean    KLD: %10.6f ± %10.6f", m["kl_mean"], m["llamacpp_kl_se"]),
        *(_f(f"{_pct(label)} KLD: %10.6f", m[f"kld_{key}"]) for key, label, _ in KLD_PERCENTILES),
        "",
        "====== Token probability statistics ======",
        _f("Mean    Δp: %6.3f ± %5.3f %%", 100.0 * m["dp_mean"], 100.0 * m["llamacpp_dp_se"]),
        *(_f(f"{_pct(label)} Δp: %6.3f%%", 100.0 * m[f"dp_{key}"]) for key, label, _ in DP_PERCENTILES),
        _f("RMS Δp    : %6.3f ± %5.3f %%", 100.0 * m["dp_rms"], 100.0 * m["llamacpp_dp_rms_se"]),
        _f("Same top p: %6.3f ± %5.3f %%", 100.0 * m["top1"], 100.0 * m["same_top_se"]),
        _f("Δp > 0    : %6.3f %%", 100.0 * m["dp_positive"]),
    ]
    return lines


def print_block(console: Console, title: str, m: dict, ref: dict, notes: tuple[str, ...] = ()) -> None:
    """A title line, the block, and notes under it, as plain text (no markup, no highlighting)."""
    text = "\n".join([title, *block_lines(m, ref), *notes, ""])
    console.print(text, markup=False, highlight=False, soft_wrap=True)


def scope_note(result: dict) -> str:
    """Which positions the statistics are over, against llama.cpp's (the second half of each chunk)."""
    pr = result["provenance"].get("protocol") or result["provenance"]["reference_provenance"]["protocol"]
    same = registered(pr["name"]).llamacpp_positions
    return f"Statistics over {pr['scored_tokens']:,} positions of protocol {pr['name']} (ctx {pr['ctx']})" + (
        "."
        if same
        else "; llama.cpp scores the second half of each chunk "
        f"(--protocol {' or '.join(with_flag('llamacpp_positions'))} for its tokens)."
    )

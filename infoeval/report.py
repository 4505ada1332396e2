"""Rich tables for the terminal and a progress bar on stderr; no torch import."""

from __future__ import annotations

import math

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table


def fmt_num(x, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    if isinstance(x, int):
        return f"{x:,}"
    if x != 0 and (abs(x) < 10 ** -(digits - 1) or abs(x) >= 1e6):
        return f"{x:.{digits - 1}e}"
    return f"{x:.{digits}f}"


def fmt_pm(x, se, digits: int = 4) -> str:
    return f"{fmt_num(x, digits)} ± {fmt_num(se, 2 if se is not None and 0 < abs(se) < 1e-3 else digits)}"


class RichReporter:
    """Progress on stderr: a spinner for stages, a bar for the forward passes."""

    def __init__(self, console: Console | None = None, enabled: bool = True):
        self.console = console or Console(stderr=True)
        self.enabled = enabled
        self._progress: Progress | None = None
        self._task = None
        self._status = None

    def stage(self, text: str) -> None:
        if self.enabled:
            self._stop_status()
            self._status = self.console.status(text)
            self._status.start()

    def _stop_status(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    def start(self, total: int, text: str) -> None:
        self._stop_status()
        if not self.enabled:
            return
        self._progress = Progress(
            SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), TimeRemainingColumn(), console=self.console, transient=False,
        )  # fmt: skip
        self._progress.start()
        self._task = self._progress.add_task(text, total=total)

    def advance(self) -> None:
        if self._progress is not None:
            self._progress.advance(self._task)

    def stop(self) -> None:
        self._stop_status()
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


def _text_size(result: dict) -> str:
    pv = result["provenance"]
    if pv["protocol"]["text_tokens"] is not None:
        return f"the text's {pv['protocol']['text_tokens']:,}"
    return f"the text's {pv['text']['bytes']:,} bytes (only the part needed was tokenized)"


def run_header(result: dict) -> str:
    pv = result["provenance"]
    m, t, pr = pv["model"], pv["text"], pv["protocol"]
    src = t["path"] or t["source"]
    return (
        f"model [bold]{m['spec']}[/] ({m['architecture']}, {m['n_parameters'] / 1e6:.1f}M params, {pv['dtype']} on {pv['device']})  "
        f"text [bold]{t['source']}[/] ({src}, sha256 {t['sha256'][:12]})\n"
        f"protocol {pr['name']} ctx {pr['ctx']} stride {pr['stride']}, prefix {pr['prefix_token']}; "
        f"{pr['windows']} windows, {pr['scored_tokens']:,} tokens scored of {_text_size(result)}"
        f"{' (--max-tokens ' + str(pr['max_tokens']) + '; all for the whole text)' if pr['max_tokens'] else ''}, "
        f"{pr['context_only_tokens']:,} context-only in the stream "
        f"(context per scored token {pr['min_context']}–{pr['max_context']}, mean {pr['mean_context']:.0f})"
    )


def reference_table(ref: dict, title: str = "Reference") -> Table:
    t = Table(title=title, title_justify="left")
    for c in ("PPL", "bits/token", "bits/byte", "tokens", "bytes", "entropy P10", "P50", "P90 (bits)"):
        t.add_column(c, justify="right")
    t.add_row(
        fmt_pm(ref["ppl"], ref["ppl_se"], 3), fmt_num(ref["bits_per_token"]), fmt_num(ref["bits_per_byte"]), fmt_num(ref["tokens"]),
        fmt_num(ref["bytes"]), fmt_num(ref["entropy_p10"], 3), fmt_num(ref["entropy_p50"], 3), fmt_num(ref["entropy_p90"], 3),
    )  # fmt: skip
    return t


def variants_tables(result: dict) -> list[Table]:
    """Two tables so each fits a 100-column terminal: likelihood and agreement, then the KL distribution."""
    a = Table(title="Variants vs reference: likelihood and agreement (± one standard error)", title_justify="left")
    for c in ("scheme", "layers q/skip", "PPL", "PPL ratio", "Δ ln PPL", "top-1 agree", "Δ bits/byte"):
        a.add_column(c, justify="left" if c == "scheme" else "right", no_wrap=True)
    k = Table(title="Per-position KL(reference ‖ variant) in nats; reverse KL and TV means", title_justify="left")
    for c in ("scheme", "mean KL", "P50", "P90", "P99", "P99.9", "max", "rev KL", "TV"):
        k.add_column(c, justify="left" if c == "scheme" else "right", no_wrap=True)
    for v in result["variants"]:
        m, q = v["metrics"], v["quantization"]
        a.add_row(
            v["name"], f"{q['layers_quantized']}/{q['layers_skipped']}", fmt_num(m["ppl"], 3), fmt_num(m["ppl_ratio"]),
            fmt_pm(m["ln_ppl_ratio"], m["ln_ppl_ratio_se"]), fmt_pm(100 * m["top1"], 100 * m["top1_se"], 2) + " %",
            fmt_num(m["bits_per_byte_delta"]),
        )  # fmt: skip
        k.add_row(
            v["name"], fmt_pm(m["kl_mean"], m["kl_se"]), fmt_num(m["kl_p50"], 3), fmt_num(m["kl_p90"], 3), fmt_num(m["kl_p99"], 3),
            fmt_num(m["kl_p999"], 3), fmt_num(m["kl_max"], 3), fmt_num(m["rkl_mean"], 3), fmt_num(m["tv_mean"], 3),
        )  # fmt: skip
    return [a, k]


def stdout_console() -> Console:
    """The data console; when stdout is not a terminal (a pipe, a CI log) tables get 120 columns, not 80."""
    console = Console()
    if not console.is_terminal:
        console = Console(width=120)
    return console


def compress_table(result: dict) -> Table:
    ref = result["reference"]
    t = Table(title=f"Bits for the same {ref['bytes']:,} bytes", title_justify="left")
    for c in ("method", "bits", "bits/byte", "vs model"):
        t.add_column(c, justify="left" if c == "method" else "right")
    t.add_row("model (Σ −log₂ q)", fmt_num(round(ref["total_bits"])), fmt_num(ref["bits_per_byte"]), "1.000")
    for r in result["compressors"]:
        t.add_row(r["method"], fmt_num(r["bits"]), fmt_num(r["bits_per_byte"]), fmt_num(r["bits"] / ref["total_bits"], 3))
    return t


def print_quantize_compare(console: Console, result: dict) -> None:
    console.print(run_header(result))
    console.print(reference_table(result["reference"]))
    for table in variants_tables(result):
        console.print(table)


def print_compress_bits(console: Console, result: dict) -> None:
    console.print(run_header(result))
    console.print(reference_table(result["reference"], "Model"))
    console.print(compress_table(result))
    console.print(f"model bits / xz bits = {fmt_num(result['model_over_xz'], 3)} (the model's own size is not counted)")

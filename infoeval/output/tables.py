"""Rich tables for the terminal and a progress bar on stderr; no torch import."""

from __future__ import annotations

import copy
import math
import os

from rich.console import Console, ConsoleOptions, RenderResult
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from infoeval import distributed
from infoeval.errors import counted


class ReportTable(Table):
    """A table with a short title and its long explanation in ``caption``, printed under the table at the
    console's full width (rich would wrap a title or caption wider than the table into the table's width)."""

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        bare = copy.copy(self)
        bare.caption = None
        yield from Table.__rich_console__(bare, console, options)
        if isinstance(self.caption, str):
            yield console.render_str(self.caption, style=self.caption_style or "table.caption", highlight=False)
        elif self.caption is not None:
            yield self.caption

    def add_row(self, *cells, **kwargs) -> None:
        """One row, a cell for every column: rich would pad a short row at its end and so shift every cell after a
        missing one under the wrong header."""
        if len(cells) != len(self.columns):
            raise ValueError(f"table {self.title!r}: a row of {len(cells)} cells for {len(self.columns)} columns")
        super().add_row(*cells, **kwargs)


def report_table(
    title: str, columns: list[str], caption: str | None = None, left: int = 1, no_wrap: bool = False
) -> ReportTable:
    """A left-justified table titled ``title`` (a few words) with ``caption`` under it; the first ``left`` columns
    are left-aligned, the others right-aligned."""
    t = ReportTable(title=title, caption=caption, title_justify="left", caption_justify="left")
    for i, c in enumerate(columns):
        t.add_column(c, justify="left" if i < left else "right", no_wrap=no_wrap)
    return t


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
        self.enabled = enabled and distributed.is_main()  # under a launcher only rank 0 draws
        self._progress: Progress | None = None
        self._task = None
        self._status = None

    def stage(self, text: str) -> None:
        if self.enabled:
            self._stop_status()
            self._status = self.console.status(text)
            self._status.start()

    def note(self, text: str) -> None:
        """One line that stays (a choice the run made), on stderr."""
        if self.enabled:
            self._stop_status()
            self.console.print(text, highlight=False)

    def _stop_status(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    def start(self, total: int, text: str) -> None:
        self._stop_status()
        if not self.enabled:
            return
        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=self.console,
            transient=False,
        )
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


class _Unclipped(Console):
    """A console for stdout outside a terminal (a pipe, a CI log): ``least`` columns, and as many more as a table
    printed needs to show every cell whole (its natural width): nothing is clipped or cut to "…"."""

    def __init__(self, least: int):
        super().__init__(width=least)
        self.least = least

    def print(self, *objects, **kwargs) -> None:
        wide = self.options.update_width(1 << 16)
        need = [self.measure(o, options=wide).maximum for o in objects if isinstance(o, Table)]
        self.width = max([self.least, *need])
        super().print(*objects, **kwargs)


def stdout_console() -> Console:
    """The data console: a terminal's width; outside a terminal ``COLUMNS`` where set, else 120 columns widened to
    fit each table (``_Unclipped``)."""
    console = Console()
    if not console.is_terminal and not os.environ.get("COLUMNS", "").strip().isdigit():
        console = _Unclipped(120)
    return console


def _text_size(result: dict) -> str:
    pv = result["provenance"]
    if pv["protocol"]["text_tokens"] is not None:
        return f"the text's {pv['protocol']['text_tokens']:,}"
    return f"the text's {pv['text']['bytes']:,} bytes (only the part needed was tokenized)"


def _scored(result: dict) -> str:
    """The windows and tokens scored: with --until-se, those used of the planned ones."""
    pr, until = result["provenance"]["protocol"], result.get("until_se")
    if until:
        used = f"{until['windows_used']} of {counted(pr['windows'], 'window')} used (--until-se)"
        return f"{used}, {until['tokens_used']:,} tokens scored"
    return f"{counted(pr['windows'], 'window')}, {counted(pr['scored_tokens'], 'token')} scored"


def run_header(result: dict) -> str:
    pv = result["provenance"]
    m, t, pr = pv["model"], pv["text"], pv["protocol"]
    src = t["path"] or t["source"]
    return (
        f"model [bold]{m['spec']}[/] ({m['architecture']}, {m['n_parameters'] / 1e6:.1f}M params, "
        f"{pv['dtype']} on {pv['device']})  "
        f"text [bold]{t['source']}[/] ({src}, sha256 {t['sha256'][:12]})\n"
        f"protocol {pr['name']} ctx {pr['ctx']} stride {pr['stride']}, prefix {pr['prefix_token']}; "
        f"{_scored(result)} of {_text_size(result)}"
        f"{' (--max-tokens ' + str(pr['max_tokens']) + '; all for the whole text)' if pr['max_tokens'] else ''}, "
        f"{pr['context_only_tokens']:,} context-only in the stream "
        f"(context per scored token {pr['min_context']}–{pr['max_context']}, mean {pr['mean_context']:.0f})"
    )

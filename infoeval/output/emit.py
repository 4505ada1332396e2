"""The epilogue every command shares: write the outputs, draw the plot, print the tables, say what was written."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from infoeval import distributed
from infoeval.errors import UsageError


def as_json(result) -> dict:
    """A result as its JSON-like dict (results with a ``to_json()`` method, or plain dicts)."""
    return result.to_json() if hasattr(result, "to_json") else result


def check_plot(plot: Path | None) -> None:
    """Fail before the long run when --plot cannot be drawn (no plotting module or matplotlib, bad file type)."""
    import importlib.util

    if plot is None:
        return
    if importlib.util.find_spec("infoeval.output.plots") is None:
        raise UsageError("--plot needs infoeval.output.plots, which this installation lacks")
    from infoeval.output.plots import require

    require(plot)


def emit(
    result,
    *,
    paths: dict[str, Path],
    tables: Callable[[Console, dict], None],
    summary: Callable[[], object] | None = None,
    positions: Callable[[], object] | None = None,
    plot: Path | None = None,
    draw: Callable[[Path], None] | None = None,
    extras: dict[Path, Callable[[], str | bytes]] | None = None,
    also_written: tuple[str, ...] = (),
) -> dict:
    """Write the result JSON and CSVs named in ``paths`` (``summary`` and ``positions`` build the frames, only when
    wanted; ``summary``: the command's own summary table, which the caller knows), then each extra file
    (path → its text), then the plot (``draw(plot)``); print the tables (``tables(console, data)``) on stdout and
    the files written on stderr. Returns the result's JSON dict."""
    from infoeval.output.results import atomic_write_bytes, write_outputs
    from infoeval.output.tables import stdout_console

    data = as_json(result)
    if not distributed.is_main():  # under a launcher rank 0 writes and prints; the others stay silent
        return data
    written = write_outputs(paths, data, summary, positions) if paths else []
    for path, make in (extras or {}).items():
        text = make()
        atomic_write_bytes(Path(path), text.encode("utf-8") if isinstance(text, str) else text)
        written.append(str(path))
    if plot is not None and draw is not None:
        draw(plot)
        written.append(str(plot))
    tables(stdout_console(), data)
    written += list(also_written)
    if written:
        Console(stderr=True).print("wrote " + ", ".join(written), style="dim")
    return data

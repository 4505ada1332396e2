"""A run's outputs written: the result, its tables and files where ``Outputs`` (``output/destinations.py``) says,
with the command's own summary table (``infoeval.api.summary_of``)."""

from __future__ import annotations

from collections.abc import Callable

from infoeval.output.destinations import RUN_OUTPUTS, Outputs  # noqa: F401  (re-exported for the commands)


def emit(
    outputs,
    result,
    *,
    model: str,
    tables,
    command: str | None = None,
    source: str | None = None,
    positions=None,
    draw=None,
    extras: dict | Callable[[dict], dict] | None = None,
    also_written: tuple[str, ...] = (),
) -> dict:
    """Write, draw and print a result (``output.emit``) into this command's paths; ``command``: the command in the
    run folder's name (default: the result's provenance); ``source``: the text's name there (default: the
    result's provenance); ``positions``: the positions frame (default: a typed result's ``positions``);
    ``extras``: more files, or a function of the paths that gives them. Returns the result's JSON dict."""
    from infoeval.api import summary_of
    from infoeval.output.emit import as_json
    from infoeval.output.emit import emit as write

    data = as_json(result)
    command = command or data["provenance"]["command"]
    paths = outputs.paths(command, model, source if source is not None else data["provenance"]["text"]["source"])
    if positions is None and not isinstance(result, dict) and hasattr(result, "positions"):
        positions = lambda: result.positions  # noqa: E731
    return write(
        data,
        paths=paths,
        tables=tables,
        positions=positions,
        plot=outputs.plot,
        draw=draw,
        summary=lambda: summary_of(data),
        extras=extras(paths) if callable(extras) else extras,
        also_written=also_written,
    )

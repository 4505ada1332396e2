"""The HTML page: one self-contained file (inline CSS, JS and data; a Content-Security-Policy that forbids every
network request), so it opens offline and as a CI artifact. The data of each run section is JSON in a
``<script type="application/json">``; the script draws the text a page of tokens at a time (``PAGE`` spans), so
the browser holds a bounded number of spans whatever the length of the text."""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from importlib import resources
from pathlib import Path

from infoeval import __version__

CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"
PAGE = 4096  # token spans drawn at a time


def _asset(name: str) -> str:
    return resources.files("infoeval.report").joinpath("assets", name).read_text(encoding="utf-8")


def _json_for_script(data) -> str:
    """JSON safe inside a <script> element: no '</' can end it early."""
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("</", "<\\/")


def render(sections: list[dict], title: str = "infoeval report", comparison: list[dict] | None = None) -> str:
    """The page for ``sections`` (each ``data.run_data``'s dict), with a comparison table above them when
    ``comparison`` (``table.comparison_rows``) is given, and each section's plots (inline SVG, ``plots``)."""
    from infoeval.report.plots import MISSING, available, section_plots

    sections = [{**sec, "plots": section_plots(sec, i)} for i, sec in enumerate(sections)]
    payload = {
        "sections": sections,
        "comparison": comparison,
        "page": PAGE,
        "version": __version__,
        "plots_missing": None if available() else MISSING,
    }
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en">',
            "<head>",
            '<meta charset="utf-8">',
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{html.escape(title)}</title>",
            f"<style>{_asset('page.css')}</style>",
            "</head>",
            "<body>",
            f"<h1>{html.escape(title)}</h1>",
            '<div id="comparison"></div>',
            '<div id="sections"></div>',
            '<div id="tip" role="tooltip" hidden></div>',
            f'<script type="application/json" id="data">{_json_for_script(payload)}</script>',
            f"<script>{_asset('page.js')}</script>",
            "</body>",
            "</html>",
        ]
    )


def page_extras(
    data: dict, positions: Callable[[], object], vocab: dict, paths: dict, html: Path | None, title: str
) -> dict:
    """The files beside the result: the tokens' text (``vocab``, id → text) next to the positions table (with
    --topk), and with --html the report page, drawn from the result and its positions frame."""
    import json

    from infoeval.report.runs import tokens_path

    extras = {}
    if vocab and "positions" in paths:
        extras[tokens_path(paths["positions"])] = lambda: json.dumps(
            {str(k): v for k, v in vocab.items()}, ensure_ascii=False
        )
    if html is not None:
        from infoeval.report.data import run_data
        from infoeval.report.page import render

        extras[html] = lambda: render([run_data(data, positions(), vocab, title)])
    return extras

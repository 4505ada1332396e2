"""Tables on stdout outside a terminal (a pipe, a CI log, ``| tee``): never clipped or cut to "…", whatever their
width; ``COLUMNS`` where the user sets it. Each command's own piped tables are checked against its JSON in
``test_cli_smoke.py``."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from infoeval.errors import counted
from infoeval.output import tables
from infoeval.output.tables import report_table, stdout_console

NAME = "model.layers.27.self_attn.o_proj" * 4  # 128 characters: wider than the 120 columns alone


def _printed(console: Console, table) -> str:
    console.file = io.StringIO()
    console.print(table)
    return console.file.getvalue()


def _wide():
    t = report_table("sensitivity", ["unit", "parameters", "KL ± SE"], caption="a caption " * 30)
    t.add_row(NAME, f"{58_720_256:,}", "2.605e-04 ± 2.9e-05")
    return t


def test_a_table_wider_than_120_columns_prints_whole_when_piped(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    console = stdout_console()  # pytest's stdout is not a terminal
    out = _printed(console, _wide())
    assert "…" not in out and NAME in out and "58,720,256" in out and "2.605e-04 ± 2.9e-05" in out
    box = [line for line in out.splitlines() if line.startswith(("┏", "┃", "│", "└"))]
    assert len({len(line) for line in box}) == 1 and len(box[0]) > 120  # one width, the table's own
    assert max(len(line) for line in out.splitlines() if line.startswith("a caption")) <= len(box[0])
    small = report_table("t", ["a"])
    small.add_row("1")
    assert console.width >= 120 and len(_printed(console, small).splitlines()[1]) < 120  # a narrow table stays so


def test_columns_set_by_the_user_is_the_width(monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")
    console = stdout_console()
    assert not isinstance(console, tables._Unclipped) and console.width == 60


def test_a_terminal_keeps_its_width(monkeypatch):
    monkeypatch.setattr(Console, "is_terminal", property(lambda self: True))
    assert not isinstance(stdout_console(), tables._Unclipped)


@pytest.mark.parametrize(
    "n,noun,expected", [(1, "window", "1 window"), (0, "window", "0 windows"), (2048, "token", "2,048 tokens")]
)
def test_counts_take_the_plural_they_need(n, noun, expected):
    assert counted(n, noun) == expected

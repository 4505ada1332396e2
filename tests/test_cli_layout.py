"""The command line's shared conventions, checked without loading a model: the model as a positional argument or as
--model (the same run; both with different values is a one-line usage error), every spelling of the temperature
option on each command that takes temperatures, and report tables whose titles fit the table."""

from __future__ import annotations

import copy
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console
from rich.table import Table
from rich.text import Text
from typer.testing import CliRunner

from infoeval import cli
from infoeval.output.tables import RichReporter

GOLDEN = Path(__file__).resolve().parent / "golden"


class _Stop(Exception):
    """Raised by a stand-in library entry point once it has seen its arguments."""


# command → (module of the library entry point the command calls, its name, arguments that make the command valid)
ENTRY = {
    "quantize-compare": ("infoeval.comparison.compare", "quantize_compare", []),
    "compress-bits": ("infoeval.comparison.compare", "compress_bits", []),
    "reference": ("infoeval.gating.gate", "build_reference", []),
    "gate": ("infoeval.gating.gate", "run_gate", []),
    "quantize": ("infoeval.gating.checkpoint", "quantize_checkpoint", []),
    "spec-accept": ("infoeval.speculative.accept", "spec_accept", ["--draft-layers", "1"]),
    "spec-decode": ("infoeval.speculative.generate", "spec_decode", ["--draft-layers", "1"]),
    "distill": ("infoeval.speculative.distill", "distill", ["--student-layers", "1"]),
    "mutual-info": ("infoeval.mutual_information.mutual_info", "run_mutual_info", []),
}


@pytest.fixture
def calls(monkeypatch, tmp_path):
    """Replace each command's library entry point by one that records its arguments and stops the command."""
    import importlib

    seen: list[tuple] = []

    def fake(*args, **kwargs):
        seen.append((tuple(a for a in args if not isinstance(a, RichReporter)), kwargs))
        raise _Stop

    for module, name, _ in ENTRY.values():
        monkeypatch.setattr(importlib.import_module(module), name, fake)
    monkeypatch.setattr(importlib.import_module("infoeval.speculative.temperature"), "temperature_table", fake)
    monkeypatch.chdir(tmp_path)
    return seen


def _invoke(args: list[str], calls: list) -> tuple:
    """Run ``infoeval *args`` in-process up to the library call; return what the library was given."""
    n = len(calls)
    result = CliRunner().invoke(cli.app, [str(a) for a in args])
    assert isinstance(result.exception, _Stop), (args, result.output, result.exception)
    assert len(calls) == n + 1
    return calls[-1]


def _model_of(call: tuple) -> str:
    """The model spec inside the recorded arguments (a ModelSettings, or GateSettings' candidate)."""
    from infoeval.input.settings import ModelSettings

    return next(a.model for a in call[0] if isinstance(a, ModelSettings))


@pytest.mark.parametrize("command", list(ENTRY))
def test_positional_and_option_give_the_same_run(command, calls):
    extra = ENTRY[command][2]
    positional = _invoke([command, "some/model", *extra], calls)
    for form in (["--model", "some/model"], ["-m", "some/model"], ["some/model", "--model", "some/model"]):
        assert _invoke([command, *form, *extra], calls) == positional, form
    assert _model_of(positional) == "some/model"


def test_positional_wins_over_a_config_model(calls, tmp_path):
    (tmp_path / "c.toml").write_text('[spec-accept]\nmodel = "from/config"\n', encoding="utf-8")
    call = _invoke(["spec-accept", "given/here", "--config", tmp_path / "c.toml", "--draft-layers", "1"], calls)
    assert _model_of(call) == "given/here"
    assert (
        _model_of(_invoke(["spec-accept", "--config", tmp_path / "c.toml", "--draft-layers", "1"], calls))
        == "from/config"
    )


def _main(monkeypatch, capsys, args) -> tuple[int, list[str]]:
    monkeypatch.delenv("INFOEVAL_DEBUG", raising=False)
    monkeypatch.setattr(sys, "argv", ["infoeval", *map(str, args)])
    code = cli.main()  # the exit code, returned (the console script exits with it)
    return code, [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]


@pytest.mark.parametrize("command", list(ENTRY))
def test_model_given_twice_is_one_line_exit_2(command, calls, monkeypatch, capsys):
    code, lines = _main(monkeypatch, capsys, [command, "model/a", "--model", "model/b", *ENTRY[command][2]])
    assert code == 2 and len(lines) == 1, lines
    assert (
        lines[0].startswith("infoeval: error:")
        and "given twice" in lines[0]
        and "model/a" in lines[0]
        and "model/b" in lines[0]
    )
    assert not calls  # refused before the library was called


def test_model_given_twice_through_the_entry_point(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "INFOEVAL_DEBUG"}
    proc = subprocess.run(
        [sys.executable, "-m", "infoeval", "reference", "model/a", "-m", "model/b"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0 and "given twice" in proc.stderr, proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_gate_takes_the_candidate_as_argument_or_model(calls):
    as_arg = _invoke(["gate", "cand/x", "-r", "ref.safetensors"], calls)
    as_opt = _invoke(["gate", "--model", "cand/x", "-r", "ref.safetensors"], calls)
    assert as_arg == as_opt and as_arg[0][0].candidate == "cand/x"
    assert _invoke(["gate", "-r", "ref.safetensors"], calls)[0][0].candidate is None  # the reference's own model


# ---- temperatures ----------------------------------------------------------------------------------------
TEMPERATURE_COMMANDS = {
    # command: (arguments before the temperature, where the temperatures are in the recorded call)
    "spec-accept": (["m", "--draft-layers", "1"], lambda call: call[0][4]),
    "distill": (["m", "--student-layers", "1"], lambda call: call[0][4]),
    "spec-decode": (["m", "--draft-layers", "1"], lambda call: call[0][5]),
    "temperature": (["--logits", "1,2"], lambda call: call[0][0]),
}


@pytest.mark.parametrize("flag", ["--temperature", "--T", "--temperatures"])
@pytest.mark.parametrize("command", list(TEMPERATURE_COMMANDS))
def test_every_temperature_spelling_is_accepted(command, flag, calls):
    before, where = TEMPERATURE_COMMANDS[command]
    value, expected = ("2", 2.0) if command == "spec-decode" else ("0.5,2", (0.5, 2.0))
    assert where(_invoke([command, *before, flag, value], calls)) == expected


@pytest.mark.parametrize("key", ["temperature", "temperatures", "T"])
@pytest.mark.parametrize("command", ["spec-accept", "distill"])
def test_every_temperature_spelling_is_a_config_key(command, key, calls, tmp_path):
    (tmp_path / "c.toml").write_text(f'[{command}]\n{key} = "0.5,3"\n', encoding="utf-8")
    before, where = TEMPERATURE_COMMANDS[command]
    assert where(_invoke([command, *before, "--config", tmp_path / "c.toml"], calls)) == (0.5, 3.0)


# ---- report tables: short titles, explanations in captions -----------------------------------------------
class _Recorder(Console):
    """A console that keeps every table it prints."""

    def __init__(self):
        super().__init__(file=io.StringIO(), width=120)
        self.tables: list[Table] = []

    def print(self, *objects, **kwargs):
        self.tables += [o for o in objects if isinstance(o, Table)]
        super().print(*objects, **kwargs)


def _golden(name: str) -> dict:
    path = GOLDEN / f"{name}.json"
    if not path.exists():
        pytest.skip(f"no golden record {path.name}")
    return json.loads(path.read_text(encoding="utf-8"))


def _print_reports(console: Console) -> None:
    from infoeval.comparison import tables as report
    from infoeval.gating import tables as gate_report
    from infoeval.klfit import tables as klfit_report
    from infoeval.mutual_information import tables as mi_report
    from infoeval.speculative import tables as spec_report

    report.print_quantize_compare(console, _golden("quantize-compare-llama"))
    report.print_compress_bits(console, _golden("compress-bits-qwen3"))
    spec_report.print_spec_accept(console, _golden("spec-accept-llama"))
    spec_report.print_spec_accept(console, _golden("spec-accept-layers"))
    spec_report.print_distill(console, _golden("distill-llama"))
    spec_report.print_spec_decode(console, _golden("spec-decode-llama"))
    spec_report.print_temperature(console, _golden("temperature-logits"))
    spec_report.print_temperature(console, _golden("temperature-model"))
    mi_report.print_mutual_info(console, _golden("mutual-info-llama"))
    klfit_report.print_kl_fit(console, _golden("kl-fit"))
    gate = _golden("gate-llama")
    console.print(gate_report.summary_table(gate))
    console.print(gate_report.gate_table(gate))
    cells = [{"tokens": [1, 2]}] * 3
    row = {"stat": 1.5, "df": 3, "p_value": 0.5}
    verify = {
        "samples": 1000,
        "seed": 0,
        "cells": cells,
        "rows": [{"sampler": "target", "vs_target": row, "vs_draft": row}],
    }
    console.print(spec_report.verify_table(verify))
    info = {
        "file": "/a/rather/long/path/to/the/reference/file/of/this/run/reference.safetensors",
        "top_k": 64,
        "tail_samples": 128,
        "bytes_per_position": 300.0,
        "llama_cpp_bytes_per_position": 196_000,
        "reference": {"tokens": 1000, "ppl": 12.5, "bits_per_byte": 1.1},
    }
    console.print(gate_report.reference_summary_table(info))


def _width(table: Table) -> int:
    """Columns the table itself takes (without its title and caption) on a 120-column console."""
    bare = copy.copy(table)
    bare.title = bare.caption = None
    out = Console(file=io.StringIO(), width=120)
    out.print(bare)
    return max(Text(line).cell_len for line in out.file.getvalue().splitlines())


def test_no_table_title_is_wider_than_its_table():
    console = _Recorder()
    _print_reports(console)
    assert len(console.tables) >= 20
    for t in console.tables:
        title = Text.from_markup(t.title).plain if isinstance(t.title, str) else str(t.title)
        assert len(title) <= _width(t), f"title {title!r} is wider than its table ({_width(t)} columns)"
        assert len(title.split()) <= 5, title


def test_captions_print_at_full_width():
    """The 'tokens per call' table is about 20 columns wide; its explanation is printed on one line below it."""
    console = _Recorder()
    from infoeval.speculative import tables as spec_report

    spec_report.print_spec_accept(console, _golden("spec-accept-layers"))
    out = console.file.getvalue()
    assert any(
        line.startswith("expected tokens per target call E(γ) = (1 − α^(γ+1))/(1 − α)") for line in out.splitlines()
    ), out


def test_report_modules_build_tables_through_report_table():
    import re

    root = Path(cli.__file__).resolve().parents[1]
    for rel in ("output/tables.py", "speculative/tables.py", "gating/tables.py", "mutual_information/tables.py"):
        assert not re.search(r"(?<![A-Za-z])Table\(title", (root / rel).read_text(encoding="utf-8")), rel


def test_a_report_tables_row_fills_every_column():
    from infoeval.output.tables import report_table

    t = report_table("T", ["a", "b", "c"])
    t.add_row("1", "2", "3")
    with pytest.raises(ValueError, match="a row of 2 cells for 3 columns"):
        t.add_row("1", "2")  # rich would pad it and shift "2" under "b" of a row meant otherwise
    assert [len(c._cells) for c in t.columns] == [1, 1, 1]


@pytest.mark.parametrize(
    ("argv", "words", "command"),
    [
        (["quantize-compare", "--ctx", "abc"], "Invalid value for '--ctx'", "quantize-compare"),
        (["quantize-compare", "--ctx"], "Option '--ctx' requires an argument.", "quantize-compare"),
        (["gate", "--max-kl-mean", "abc"], "Invalid value for '--max-kl-mean'", "gate"),
        (["compress-bits", "--bogus-opt", "3"], "No such option: --bogus-opt", "compress-bits"),
        (["temperature", "--top", "x"], "Invalid value for '--top'", "temperature"),
        (["bogus-command"], "No such command 'bogus-command'.", None),
    ],
)
def test_what_the_option_parser_refuses_is_one_line_exit_2(argv, words, command, capsys):
    """Typer's boxed usage block becomes the one `infoeval: error:` line, naming the --help that lists the options."""
    from infoeval.cli import main

    assert main(argv) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert out == "" and len(lines) == 1 and lines[0].startswith("infoeval: error: " + words), err
    assert lines[0].endswith(f"(`infoeval{' ' + command if command else ''} --help` lists what is allowed)")


def test_help_and_a_bare_infoeval_keep_their_codes(capsys):
    from infoeval.cli import main

    assert main(["--help"]) == 0 and "quantize-compare" in capsys.readouterr().out
    assert main(["gate", "--help"]) == 0 and "--reference" in capsys.readouterr().out
    assert main([]) == 2
    bare = capsys.readouterr()
    assert "Usage" in bare.out and bare.err == ""  # not a stray blank line on stderr


def test_a_bad_value_from_a_config_file_names_the_file_key(tmp_path, capsys):
    from infoeval.cli import main

    (tmp_path / "c.toml").write_text('ctx = "abc"\n', encoding="utf-8")
    assert main(["quantize-compare", "--config", str(tmp_path / "c.toml")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "Invalid value for '--ctx'" in line and "(from the --config file's key 'ctx')" in line
    assert main(["quantize-compare", "--ctx", "abc"]) == 2  # typed: no word of a config file
    assert "--config" not in capsys.readouterr().err


def test_missing_files_say_what_to_give(tmp_path):
    from infoeval.errors import DataError, UsageError
    from infoeval.gating.baseline import read_baseline
    from infoeval.input.settings import read_toml
    from infoeval.mixing.problem import load_sensitivity

    gone = tmp_path / "gone"
    with pytest.raises(UsageError, match=r"^limits file '.*gone' does not exist; give an existing \.toml file$"):
        read_toml(gone, "limits file")
    with pytest.raises(DataError, match=r"does not exist; give an earlier gate's result JSON \(json\) or its run"):
        read_baseline(gone)
    with pytest.raises(UsageError, match=r"does not exist; give the JSON `infoeval sensitivity --json` wrote$"):
        load_sensitivity([gone])


def test_limits_reach_the_gate_as_typed(tmp_path, monkeypatch):
    """--limits is taken as typed: ``strict`` names the built-in set, ``./strict`` a file (a Path would read both as
    ``strict``)."""
    from infoeval.cli import main
    from infoeval.gating import limits

    seen = []

    def spy(limits_file, overrides):
        seen.append(limits_file)
        raise KeyboardInterrupt

    monkeypatch.setattr(limits, "limits_from", spy)
    (tmp_path / "ref.safetensors").write_bytes(b"")
    for typed in ("strict", "./strict"):
        main(["gate", "--scheme", "int8-channel", "-r", str(tmp_path / "ref.safetensors"), "--limits", typed])
    assert seen == ["strict", "./strict"]

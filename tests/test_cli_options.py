"""Option handling that needs no model: --config TOML, --max-tokens, --prefix, --stride checks before loading,
and where outputs go (``results.output_paths``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cli_run import run_cli

from infoeval.comparison.frames import compress_frame
from infoeval.output.results import output_paths

ENV = {k: v for k, v in os.environ.items() if k != "INFOEVAL_DEBUG"}


def _run(args, cwd: Path):
    return run_cli(args, cwd=cwd, env=ENV)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--max-tokens", "lots"], "--max-tokens 'lots'"),
        # one subprocess each: the fast lane keeps the first and the last
        pytest.param(["--max-tokens", "0"], "--max-tokens 0", marks=pytest.mark.slow),
        pytest.param(["--prefix", "start"], "unknown prefix policy 'start'", marks=pytest.mark.slow),
        pytest.param(["--protocol", "llama"], "unknown protocol 'llama'", marks=pytest.mark.slow),
        pytest.param(
            ["--protocol", "llama.cpp", "--ctx", "64", "--stride", "32"],
            "--stride cannot be set",
            marks=pytest.mark.slow,
        ),
        pytest.param(["--ctx", "8", "--stride", "0"], "--stride 0", marks=pytest.mark.slow),
        (["--model", "no-such-model"], "neither an existing file or folder nor a hub id"),
    ],
)
def test_bad_options_fail_fast_with_one_line(tmp_path, args, message):
    proc = _run(
        ["quantize-compare", "--model", "/nonexistent-is-checked-later", *args]
        if "--model" not in args
        else ["quantize-compare", *args],
        tmp_path,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow  # three subprocesses; test_configs.py checks the loader's refusals in-process
def test_config_unknown_key_and_bad_toml(tmp_path):
    (tmp_path / "bad.toml").write_text("[quantize-compare]\nschemas = ['int8-channel']\n")
    proc = _run(["quantize-compare", "--config", tmp_path / "bad.toml"], tmp_path)
    assert proc.returncode == 2 and "unknown key 'schemas'" in proc.stderr
    (tmp_path / "broken.toml").write_text("ctx = \n")
    proc = _run(["quantize-compare", "--config", tmp_path / "broken.toml"], tmp_path)
    assert proc.returncode == 2 and "not valid TOML" in proc.stderr
    proc = _run(["quantize-compare", "--config", tmp_path / "missing.toml"], tmp_path)
    assert proc.returncode == 2 and "does not exist" in proc.stderr


def test_config_values_are_used_and_command_line_wins(tmp_path):
    """A scheme list from the config reaches the parser; an option on the command line overrides it."""
    (tmp_path / "c.toml").write_text("[quantize-compare]\nschemes = ['int8-channel', 'int4-chanel']\nctx = 16\n")
    proc = _run(["quantize-compare", "--config", tmp_path / "c.toml"], tmp_path)
    assert proc.returncode == 2 and "int4-chanel" in proc.stderr  # the config's schemes were parsed
    proc = _run(
        ["quantize-compare", "--config", tmp_path / "c.toml", "--schemes", "int8-channel", "--stride", "17"], tmp_path
    )
    assert proc.returncode == 2 and "--stride 17" in proc.stderr and "(16)" in proc.stderr  # config ctx, CLI schemes


def test_output_paths():
    d = Path("results/run")
    assert output_paths(None, None, None, None, d) == {
        "json": d / "result.json",
        "csv": d / "summary.csv",
        "positions": d / "positions.csv",
    }
    assert output_paths(Path("a.csv"), None, None, None, d) == {"csv": Path("a.csv")}
    assert output_paths(Path("a.csv"), None, None, Path("o"), d) == {
        "json": Path("o/result.json"),
        "csv": Path("a.csv"),
        "positions": Path("o/positions.csv"),
    }


def test_compress_frame_ratios():
    result = {
        "reference": {"total_bits": 100.0, "bits_per_byte": 0.5},
        "compressors": [{"method": "xz -9", "bytes": 50, "bits": 400, "bits_per_byte": 2.0}],
    }
    f = compress_frame(result)
    assert list(f["method"]) == ["model", "xz -9"]
    assert list(f["bits_vs_model"]) == [1.0, 4.0]


def test_option_types_of_api_keywords():
    from collections.abc import Sequence
    from typing import Optional

    from infoeval.cli.command import typer_type

    assert typer_type(int) is int and typer_type(str | Sequence[float]) is str
    assert typer_type(int | None) == Optional[int]  # noqa: UP045  (the typing form Typer reads)
    assert typer_type(str | Sequence[str] | None) == Optional[str]  # noqa: UP045


def test_the_gates_limits_and_sequential_options_keep_their_declarations_and_order():
    """The gate's limits and sequential options are the fields that declare them (Limits, SequentialSettings): the
    command line cannot drift from the API; each group stands together in the command's options."""
    import dataclasses
    import inspect

    import typer

    import infoeval
    from infoeval.cli import app
    from infoeval.gating.request import LIMITS, GateRequest
    from infoeval.gating.settings import SequentialSettings
    from infoeval.input.fields import entries

    sequential = ("alpha", "min_tokens", "max_tokens", "order", "order_seed", "undecided", "round_windows")
    names = list(entries(GateRequest))
    assert names[names.index("limits") + 1 : names.index("limits") + 1 + len(LIMITS)] == list(LIMITS)
    at = names.index("sequential") + 1
    assert names[at : at + len(sequential)] == list(sequential)
    params = {p.name: p for p in typer.main.get_command(app).commands["gate"].params}
    assert [params[n].default for n in sequential] == [f.default for f in dataclasses.fields(SequentialSettings)]
    assert inspect.signature(infoeval.gate).parameters["order_seed"].default == 0


def test_sequential_options_from_a_config_file_without_sequential_are_not_an_error(tmp_path):
    (tmp_path / "c.toml").write_text("[gate]\nalpha = 0.1\n", encoding="utf-8")
    r = _run(["gate", "-r", tmp_path / "missing.safetensors", "--config", tmp_path / "c.toml", "-q"], tmp_path)
    assert r.returncode == 2 and "needs --sequential" not in r.stderr and "missing.safetensors" in r.stderr, r.stderr
    r = _run(["gate", "-r", tmp_path / "missing.safetensors", "--alpha", "0.1", "-q"], tmp_path)
    assert r.returncode == 2 and r.stderr.strip() == "infoeval: error: --alpha needs --sequential", r.stderr

"""infoeval.compare / infoeval.compress_bits (issue 49, step 2): the functions the CLI's quantize-compare and
compress-bits now call. In-process results equal the CLI's JSON, every number (a tiny model here, the default
SmolLM2 run in the slow lane); keyword errors are one-line UsageErrors raised before anything loads."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli_run import run_cli
from tiny_models import requires_smollm2

import infoeval
from infoeval.errors import UsageError


def _numbers(data: dict) -> dict:
    """A result without what differs between two runs of the same settings: when and how it was launched, timings,
    the memory budget (a share of the memory available at the start: the plan's reason names it)."""
    data = json.loads(json.dumps(data))
    data.pop("timings", None)
    for k in ("budget_bytes", "reason"):
        data.get("memory_plan", {}).pop(k, None)
    for k in ("argv", "created"):
        data["provenance"].pop(k, None)
    return data


def _cli(args: list, out) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "infoeval", *map(str, args), "--json", str(out), "-q"],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(out.read_text(encoding="utf-8"))


def test_api_and_cli_give_the_same_json(tiny_llama_dir, tiny_text, tmp_path):
    text = tmp_path / "text.txt"
    text.write_text(tiny_text, encoding="utf-8")
    kw = dict(text=text, ctx=64, max_tokens=400, device="cpu")
    api = infoeval.compare(str(tiny_llama_dir), schemes=("int8-channel", "int4-g32"), **kw)
    cli = _cli(
        [
            "quantize-compare",
            tiny_llama_dir,
            "--schemes",
            "int8-channel,int4-g32",
            "--text",
            text,
            "--ctx",
            64,
            "--max-tokens",
            400,
            "--device",
            "cpu",
        ],
        tmp_path / "qc.json",
    )
    assert _numbers(api.to_json()) == _numbers(cli)
    assert (
        len(api.positions) == 2 * api.reference["tokens"] and api.columns is not None
    )  # a row per position and variant
    bits = infoeval.compress_bits(str(tiny_llama_dir), **kw)
    cli = _cli(
        ["compress-bits", tiny_llama_dir, "--text", text, "--ctx", 64, "--max-tokens", 400, "--device", "cpu"],
        tmp_path / "cb.json",
    )
    assert _numbers(bits.to_json()) == _numbers(cli)
    assert "xz -9" in bits.to_frame()["method"].tolist() and len(bits.positions) == bits.reference["tokens"]


@pytest.mark.parametrize(
    "kw,fragment",
    [
        ({"max_tokens": 0}, "max_tokens 0 is not allowed"),
        ({"max_tokens": 1.5}, "max_tokens 1.5 is not allowed"),
        ({"floor": "some"}, "floor 'some' is not allowed"),
        ({"schemes": ("int9-channel",)}, "9 bits"),
        ({"contxt": 64}, "unknown keyword 'contxt'"),
        ({"until_se": -1.0}, "until_se -1.0 is not allowed"),
        ({"ctx": "64"}, "ctx '64' is not allowed; give an integer or None"),
        ({"device": 3}, "device 3 is not allowed; give a string"),
        ({"schemes": 5}, "schemes 5 is not allowed; give a string or a sequence of strings or None"),
        ({"top_k": True}, "top_k True is not allowed; give an integer"),
        ({"variants": [1]}, "variants [1] is not allowed; give a dict or None"),
    ],
)
def test_bad_keywords_are_one_line_usage_errors_before_loading(kw, fragment):
    with pytest.raises(UsageError) as e:
        infoeval.compare("no/such-model-anywhere", **kw)
    assert fragment in str(e.value) and "\n" not in str(e.value) and "--" not in str(e.value)
    assert isinstance(e.value, ValueError)


def test_messages_name_keywords_in_python_and_flags_on_the_command_line():
    from infoeval.errors import flag_spelling

    with pytest.raises(UsageError, match="^max_tokens 0 is not allowed"):
        infoeval.compare("no/such-model-anywhere", max_tokens=0)
    with flag_spelling(), pytest.raises(UsageError, match="^--max-tokens 0 is not allowed"):
        infoeval.compare("no/such-model-anywhere", max_tokens=0)


@pytest.mark.slow
@requires_smollm2
def test_the_default_run_api_equals_cli(tmp_path, monkeypatch):
    """The default run (SmolLM2, 8,192 python-docs tokens, the three default schemes): the command line
    (in-process) hands the pipeline exactly the settings ``infoeval.compare()`` hands it, and writes the result the
    pipeline returned, every number; so the function and the command give the same JSON. The pass itself runs on
    the first 2,048 of those tokens (the settings are compared as handed over; the numbers as returned)."""
    from infoeval.comparison import compare as pipeline

    real, calls = pipeline.quantize_compare, []

    def spy(*args, **kwargs):
        calls.append((args, kwargs))
        if len(calls) > 1:  # the API's call: its settings are all this test needs
            raise KeyboardInterrupt
        out = real(args[0], dataclasses.replace(args[1], max_tokens=2048), *args[2:], **kwargs)
        calls.append(out)
        return out

    monkeypatch.setattr(pipeline, "quantize_compare", spy)
    proc = run_cli(["quantize-compare", "--json", tmp_path / "default.json", "-q"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    with pytest.raises(KeyboardInterrupt):
        infoeval.compare()
    (cli_args, cli_kwargs), (result, _), (api_args, api_kwargs) = calls
    drop = lambda args: args[:4] + args[5:]  # noqa: E731  (the progress reporter: two objects of one kind)
    assert drop(cli_args) == drop(api_args) and cli_kwargs == api_kwargs and type(cli_args[4]) is type(api_args[4])
    assert (
        cli_args[0].model == "smollm2-135m"
        and cli_args[1].max_tokens == 8192
        and [s.name for s in cli_args[3].schemes] == ["int8-channel", "int4-g128", "int4-channel"]
    )
    written = json.loads((tmp_path / "default.json").read_text(encoding="utf-8"))
    assert _numbers(written) == _numbers(json.loads(json.dumps(result.to_json())))
    page = (Path(__file__).resolve().parents[1] / "docs" / "getting-started.md").read_text(encoding="utf-8")
    assert _headers(page) == _headers(proc.stdout)  # the page shows the default run's tables, each column of each


def _headers(text: str) -> list[list[str]]:
    """The column names of each table header in ``text`` (rich's ┃-separated header lines, as printed or as a page
    quotes them without the outer border)."""
    return [[c.strip() for c in line.split("┃") if c.strip()] for line in text.splitlines() if "┃" in line]


@pytest.mark.skipif(importlib.util.find_spec("torchao") is None, reason="needs torchao (the test extra)")
def test_the_api_is_as_quiet_as_the_cli_with_torchao_installed(tiny_llama_dir, tiny_text, tmp_path):
    """transformers imports every quantization library installed; torchao then prints that its CUDA extensions are
    missing, and torch's pytree warns about its enums. The memory plan builds a meta model before anything loads,
    so that is where a Python caller first met them: a fresh interpreter's compare() prints none of it."""
    text = tmp_path / "text.txt"
    text.write_text(tiny_text, encoding="utf-8")
    code = (
        "import infoeval, sys; "
        f"infoeval.compare({str(tiny_llama_dir)!r}, schemes=('int8-channel', 'mxfp4'), text={str(text)!r}, "
        "ctx=64, max_tokens=128, device='cpu'); print('ok')"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().endswith("ok")
    for chatter in ("Failed to load", "_pytree", "register_constant", "Warning"):
        assert chatter not in proc.stderr, proc.stderr[-2000:]

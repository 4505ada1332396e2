"""The other command families as functions (issue 49, step 4): sensitivity, mix, spec_accept, distill,
spec_decode, temperature, mutual_info and kl_fit. The CLI's commands call them, so each function's result and the
command's JSON (run in-process, ``tests/cli_run.py``) are the same, every number; a draft held in memory gives the
numbers of its folder; bad keywords are one-line usage errors naming the keyword."""

from __future__ import annotations

import json

import pytest
import torch
from cli_run import run_cli

import infoeval
from infoeval.errors import UsageError

pytestmark = pytest.mark.usefixtures("one_thread")


def _numbers(data: dict) -> dict:
    """A result without what differs between two runs of the same settings: when and how it was launched, times."""

    def clean(x):
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items() if k not in ("timings", "seconds", "argv", "created")}
        return [clean(v) for v in x] if isinstance(x, list) else x

    return clean(json.loads(json.dumps(data)))


@pytest.fixture(scope="module")
def text(tiny_text, tmp_path_factory):
    path = tmp_path_factory.mktemp("families") / "text.txt"
    path.write_text(tiny_text, encoding="utf-8")
    return path


def _same(result, args: list, tmp_path) -> dict:
    """The command ``args`` (with --json) in-process: exit 0, and its JSON equal to ``result``'s."""
    out = tmp_path / f"{args[0]}.json"
    proc = run_cli([*args, "--json", out], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    cli = json.loads(out.read_text(encoding="utf-8"))
    assert _numbers(result.to_json()) == _numbers(cli)
    return cli


def test_sensitivity_and_mix(tiny_llama_dir, text, tmp_path):
    model, kw = str(tiny_llama_dir), dict(text=text, ctx=64, device="cpu")
    sens = infoeval.sensitivity(model, schemes=("int4-g32",), by="block", max_tokens=256, proxy=False, **kw)
    _same(
        sens,
        [
            "sensitivity",
            model,
            "--text",
            text,
            "--ctx",
            64,
            "--device",
            "cpu",
            "--scheme",
            "int4-g32",
            "--by",
            "block",
            "--max-tokens",
            256,
            "--no-proxy",
            "-q",
        ],
        tmp_path,
    )
    assert len(sens.units) == 2
    mixed = infoeval.mix(
        model, schemes=("int4-g32", "int8-channel"), budget_bits="int4-g32", max_tokens=128, sweep_tokens=128, **kw
    )
    _same(
        mixed,
        [
            "mix",
            model,
            "--text",
            text,
            "--ctx",
            64,
            "--device",
            "cpu",
            "--schemes",
            "int4-g32,int8-channel",
            "--budget-bits",
            "int4-g32",
            "--max-tokens",
            128,
            "--sweep-tokens",
            128,
            "-q",
        ],
        tmp_path,
    )
    assert (
        mixed.sweep["schema"].startswith("infoeval/sensitivity/")
        and "[" in mixed.exports["recipe"]
        and len(mixed.positions) > 0
    )


def test_drafts_students_and_temperature(tiny_llama_dir, text, tmp_path):
    model, kw = str(tiny_llama_dir), dict(text=text, ctx=64, max_tokens=256, device="cpu")
    accept = infoeval.spec_accept(model, draft_layers=1, temperature=(0.5, 1), **kw)
    _same(
        accept,
        [
            "spec-accept",
            model,
            "--text",
            text,
            "--ctx",
            64,
            "--max-tokens",
            256,
            "--device",
            "cpu",
            "--draft-layers",
            1,
            "--temperature",
            "0.5,1",
            "-q",
        ],
        tmp_path,
    )
    assert len(accept.positions) > 0
    taught = infoeval.distill(model, student_scheme="int4-g32", temperature=(1, 4), alpha=0.2, **kw)
    _same(
        taught,
        [
            "distill",
            model,
            "--text",
            text,
            "--ctx",
            64,
            "--max-tokens",
            256,
            "--device",
            "cpu",
            "--student-scheme",
            "int4-g32",
            "--T",
            "1,4",
            "--alpha",
            0.2,
            "-q",
        ],
        tmp_path,
    )
    decoded = infoeval.spec_decode(model, draft_layers=1, max_new_tokens=12, device="cpu")
    assert len(decoded.positions) > 0 and decoded.to_json()["speedup"] is not None
    table = infoeval.temperature([3.0, 1.0, 0.0], labels=("a", "b", "c"), temperature=(0.5, 1, 2))
    _same(table, ["temperature", "--logits", "3,1,0", "--labels", "a,b,c", "--T", "0.5,1,2"], tmp_path)


def test_a_draft_object_gives_the_numbers_of_its_folder(tiny_llama_dir, text, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    infoeval.quantize(str(tiny_llama_dir), out=tmp_path / "int8", device="cpu")
    kw = dict(text=text, ctx=64, max_tokens=256, device="cpu", temperature=1)
    by_folder = infoeval.spec_accept(str(tiny_llama_dir), draft=str(tmp_path / "int8"), **kw)
    draft = AutoModelForCausalLM.from_pretrained(tmp_path / "int8", dtype=torch.float32)
    by_object = infoeval.spec_accept(
        str(tiny_llama_dir), draft=draft, draft_tokenizer=AutoTokenizer.from_pretrained(tmp_path / "int8"), **kw
    )
    assert by_object.to_json()["temperatures"] == by_folder.to_json()["temperatures"]


def test_mutual_info_and_kl_fit(tiny_llama_dir, text, tmp_path):
    mi = infoeval.mutual_info(str(tiny_llama_dir), lengths=(16, 32), blocks=4, bootstrap=50, text=text, device="cpu")
    _same(
        mi,
        [
            "mutual-info",
            tiny_llama_dir,
            "--lengths",
            "16,32",
            "--blocks",
            4,
            "--bootstrap",
            50,
            "--text",
            text,
            "--device",
            "cpu",
            "-q",
        ],
        tmp_path,
    )
    fit = infoeval.kl_fit(starts=(30, 60), steps=200)
    _same(fit, ["kl-fit", "--starts", "30,60", "--steps", 200], tmp_path)


@pytest.mark.parametrize(
    "call,fragment",
    [
        (lambda: infoeval.sensitivity("m", by="row"), "by 'row' is not allowed"),
        (lambda: infoeval.mix("m", sweep_tokens=0), "sweep_tokens 0 is not allowed"),
        (lambda: infoeval.spec_accept("m", temperature=0), "temperature 0"),
        (lambda: infoeval.spec_accept("m"), "exactly one of draft"),
        (lambda: infoeval.distill("m", student_layers=1, alpha=2), "alpha 2"),
        (lambda: infoeval.spec_decode("m", draft_layers=1, gamma=0), "gamma 0"),
        (lambda: infoeval.temperature(), "give either logits"),
        (lambda: infoeval.mutual_info("m", ctx=64), "unknown keyword 'ctx'"),
        (lambda: infoeval.kl_fit(starts="a,b"), "starts 'a,b' is not a comma-separated list"),
    ],
)
def test_bad_keywords_are_one_line_usage_errors(call, fragment):
    with pytest.raises(UsageError) as e:
        call()
    assert fragment in str(e.value) and "--" not in str(e.value) and "\n" not in str(e.value)

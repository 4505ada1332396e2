"""infoeval.reference / gate / quantize (issue 49, step 4: the gate family): the CLI's commands call them, so a run
through the API and one through ``infoeval.cli.main`` (in-process) give the same JSON, every number; a candidate
held in memory gates as its folder does; bad keywords are one-line usage errors naming the keyword."""

from __future__ import annotations

import json

import pytest
import torch

import infoeval
from infoeval.cli import main
from infoeval.errors import UsageError

pytestmark = pytest.mark.usefixtures("one_thread")


def _numbers(data: dict) -> dict:
    data = json.loads(json.dumps(data))
    data.pop("timings", None)
    for k in ("argv", "created"):
        data["provenance"].pop(k, None)
    data.get("reference_file", {}).pop("path", None)
    return data


@pytest.fixture(scope="module")
def ref(tiny_llama_dir, tiny_text, tmp_path_factory):
    folder = tmp_path_factory.mktemp("api-gate")
    (folder / "text.txt").write_text(tiny_text, encoding="utf-8")
    out = folder / "ref.safetensors"
    info = infoeval.reference(
        str(tiny_llama_dir), out=out, text=folder / "text.txt", ctx=64, max_tokens=300, device="cpu", top_k=16
    )
    return folder, out, info


def _undated(data: bytes) -> bytes:
    """A reference file's bytes with the time in its provenance ('created') blanked; everything else stays."""
    import re

    dated = re.compile(rb'(created\\": \\")[0-9T:+-]+')
    assert len(dated.findall(data)) == 1
    return dated.sub(rb"\1-", data)


def test_reference_and_gate_through_the_api_equal_the_cli(tiny_llama_dir, ref, capsys):
    folder, out, info = ref
    assert out.is_file() and info.to_json()["file_bytes"] == out.stat().st_size
    cli_ref = folder / "cli-ref.safetensors"
    assert (
        main(
            [
                "reference",
                tiny_llama_dir,
                "-o",
                cli_ref,
                "--text",
                folder / "text.txt",
                "--ctx",
                64,
                "--max-tokens",
                300,
                "--device",
                "cpu",
                "--top-k",
                16,
                "-q",
            ]
        )
        == 0
    )
    assert _undated(cli_ref.read_bytes()) == _undated(
        out.read_bytes()
    )  # the same file but for the second it was made in
    api = infoeval.gate(reference=out, scheme="int4-g32", max_kl_mean=1e-6, device="cpu")
    assert (
        main(
            [
                "gate",
                "-r",
                out,
                "--scheme",
                "int4-g32",
                "--max-kl-mean",
                1e-6,
                "--device",
                "cpu",
                "--json",
                folder / "g.json",
                "-q",
            ]
        )
        == 1
    )
    assert _numbers(api.to_json()) == _numbers(json.loads((folder / "g.json").read_text(encoding="utf-8")))
    assert api.passed is False and len(api.positions) == api.metrics["tokens"]
    loose = dict(max_kl_mean=10.0, max_kl_p99=100.0, min_top1=0.0, max_ppl_ratio=100.0, max_bpb_increase=100.0)
    seq = infoeval.gate(
        reference=out, scheme="int4-g32", sequential=True, alpha=0.1, undecided="pass", device="cpu", **loose
    )
    assert seq.passed is True and seq.sequential["windows_total"] == 5 and seq.sequential["undecided"] == "pass"


def test_a_candidate_object_gates_as_its_folder(tiny_llama_dir, ref, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _, out, _ = ref
    written = infoeval.quantize(str(tiny_llama_dir), out=tmp_path / "int8", scheme="int8-channel", device="cpu")
    assert written["layers_quantized"] > 0
    by_folder = infoeval.gate(str(tmp_path / "int8"), reference=out, floor="off", device="cpu")
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "int8", dtype=torch.float32)
    by_object = infoeval.gate(
        model, tokenizer=AutoTokenizer.from_pretrained(tmp_path / "int8"), reference=out, floor="off"
    )
    assert by_object.metrics == by_folder.metrics and by_object.verdicts == by_folder.verdicts
    assert by_object.to_json()["candidate"]["spec"] == "LlamaForCausalLM"


@pytest.mark.parametrize(
    "call,fragment",
    [
        (lambda out: infoeval.gate(reference=out, alpha=0.1), "alpha needs sequential"),
        (lambda out: infoeval.gate(reference=out, max_kl_mea=1.0), "unknown keyword 'max_kl_mea'"),
        (lambda out: infoeval.gate(torch.nn.Linear(2, 2), reference=out), "candidate must be a model spec"),
        (
            lambda out: infoeval.quantize("x", scheme="int8-channel", recipe="r.toml"),
            "scheme and recipe both say how to quantize",
        ),
        (lambda out: infoeval.reference("x", out=out, top_k=0), "top_k 0 / tail_samples 128 not allowed"),
    ],
)
def test_bad_keywords_are_one_line_usage_errors(ref, call, fragment):
    with pytest.raises(UsageError) as e:
        call(ref[1])
    assert fragment in str(e.value) and "--" not in str(e.value) and "\n" not in str(e.value)

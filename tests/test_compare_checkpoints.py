"""quantize-compare --checkpoints: saved checkpoints beside the schemes in one lockstep, each with the numbers a
run of it alone gives, named by folder, with its stored bits in the tables, JSON and frontier, its tensors equal
to the reference's shared with it; a tokenizer that is not the reference's and a name taken twice are one line."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from cli_run import run_cli
from shipped_formats import SAVERS

import infoeval
from infoeval.errors import UsageError
from infoeval.models import load_model
from infoeval.models.checkpoints import share_equal
from infoeval.quant.variant_settings import checkpoint_name

pytest.importorskip("bitsandbytes")
pytest.importorskip("compressed_tensors")


@pytest.fixture(scope="module")
def folders(tmp_path_factory, tiny_llama_dir):
    root = tmp_path_factory.mktemp("compare-ckpt")
    return {name: SAVERS[name][0](tiny_llama_dir, root / name) for name in ("bnb-nf4", "compressed-int4-g64")}


@pytest.fixture(scope="module")
def kw(tmp_path_factory, tiny_text):
    text = tmp_path_factory.mktemp("compare-ckpt-text") / "text.txt"
    text.write_text(tiny_text, encoding="utf-8")
    return dict(text=text, ctx=64, max_tokens=256, device="cpu", floor="off")


@pytest.fixture(scope="module")
def both(tiny_llama_dir, folders, kw):
    return infoeval.compare(
        str(tiny_llama_dir), schemes=("int4-g64",), checkpoints=list(folders.values()), **kw
    ).to_json()


def _variant(result: dict, name: str) -> dict:
    return next(v for v in result["variants"] if v["name"] == name)


def test_each_checkpoint_has_the_numbers_of_a_run_of_it_alone(both, tiny_llama_dir, folders, kw):
    assert [v["name"] for v in both["variants"]] == ["int4-g64", "bnb-nf4", "compressed-int4-g64"]
    for name, folder in folders.items():
        alone = infoeval.compare(str(tiny_llama_dir), checkpoints=[folder], **kw).to_json()
        assert [v["name"] for v in alone["variants"]] == [name]
        assert _variant(alone, name)["metrics"] == _variant(both, name)["metrics"]


def test_the_checkpoints_loading_has_its_own_seconds(both, tiny_llama_dir, kw):
    """Loading the checkpoints is timed apart from quantizing the schemes (``checkpoints_load_s``)."""
    t = both["timings"]
    assert t["checkpoints_load_s"] > 0 and t["quantize_s"] > 0
    plain = infoeval.compare(str(tiny_llama_dir), schemes=("int4-g64",), **kw).to_json()["timings"]
    assert "checkpoints_load_s" not in plain and plain["quantize_s"] > 0


def test_a_checkpoint_records_its_format_and_stored_bits(both):
    q = _variant(both, "bnb-nf4")["quantization"]
    assert q["scheme"]["kind"] == "checkpoint" and q["scheme"]["format"] == "bitsandbytes" and q["scheme"]["bits"] == 4
    assert (
        4.5 < q["bits_per_weight"] < 5
        and q["layers_quantized"] == 14
        and q["checkpoint"]["quantization"]["library"] == "bitsandbytes"
    )
    assert q["shared_bytes"] > 0  # the embeddings and norms are the reference's own tensors
    assert (
        set(both["frontier"]["kl_mean"]) <= {"int4-g64", "bnb-nf4", "compressed-int4-g64"}
        and not both["frontier"]["without_bits"]
    )


def test_the_pack_quantized_checkpoint_computes_its_fake_quantization(both):
    """infoeval's own int4-g64 stored as compressed-tensors codes: the same per-position numbers as the scheme."""
    fake, packed = _variant(both, "int4-g64")["metrics"], _variant(both, "compressed-int4-g64")["metrics"]
    assert packed["kl_mean"] == pytest.approx(fake["kl_mean"], rel=1e-5) and packed["top1"] == fake["top1"]


def test_share_equal_replaces_only_equal_plain_tensors(tiny_llama_dir, folders):
    ref = load_model(str(tiny_llama_dir), torch.device("cpu"), torch.float32).model
    ckpt = load_model(str(folders["bnb-nf4"]), torch.device("cpu"), torch.float32).model
    freed = share_equal(ckpt, ref)
    emb = ref.get_input_embeddings().weight
    assert ckpt.get_input_embeddings().weight is emb and freed >= emb.numel() * 4
    assert (
        ckpt.model.layers[0].self_attn.q_proj.weight is not ref.model.layers[0].self_attn.q_proj.weight
    )  # its own 4-bit codes
    assert share_equal(ckpt, ref) == 0  # nothing left to share


def test_names_and_tokenizers_are_checked_before_the_run(tiny_llama_dir, folders, kw, tmp_path, tiny_qwen3_dir):
    assert checkpoint_name("/a/b/model-Q4_K_M.gguf") == "model-Q4_K_M" and checkpoint_name("org/name") == "org/name"
    (tmp_path / "int4-g64").mkdir()
    with pytest.raises(UsageError, match="would be named 'int4-g64', which is taken"):
        infoeval.compare(str(tiny_llama_dir), schemes=("int4-g64",), checkpoints=[tmp_path / "int4-g64"], **kw)
    other = tmp_path / "other-tokenizer"
    shutil.copytree(folders["bnb-nf4"], other)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny_qwen3_dir / f, other / f)
    with pytest.raises(UsageError, match="the tokenizer of '.*other-tokenizer' differs from the reference's"):
        infoeval.compare(str(tiny_llama_dir), checkpoints=[other], **kw)


def test_cli_checkpoints_alone_with_a_baseline(tiny_llama_dir, folders, kw, tmp_path):
    out = tmp_path / "qc.json"
    r = run_cli(
        [
            "quantize-compare",
            str(tiny_llama_dir),
            "--checkpoints",
            ",".join(map(str, folders.values())),
            "--baseline",
            "bnb-nf4",
            "--text",
            str(kw["text"]),
            "--ctx",
            "64",
            "--max-tokens",
            "256",
            "--device",
            "cpu",
            "--floor",
            "off",
            "--json",
            str(out),
        ]
    )
    assert r.returncode == 0, r.stderr
    data = json.loads(out.read_text())
    assert [v["name"] for v in data["variants"]] == ["bnb-nf4", "compressed-int4-g64"] and data["paired"][
        "baseline"
    ] == "bnb-nf4"
    assert "compressed-int4-g64" in r.stdout and "bits/w" in r.stdout

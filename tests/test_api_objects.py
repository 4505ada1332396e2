"""Models as objects (issue 49, step 3): ``infoeval.compare(model, tokenizer=tok, variants={"qat": module})``.

A model passed in memory gives the numbers of the same model loaded from its folder; a module variant that is the
reference's own copy is at KL 0, and one holding infoeval's int8-channel weights (a `quantize` checkpoint loaded back)
gives the int8-channel scheme's numbers in the same run. The caller's model comes back untouched (weights, hooks,
training mode); a variant with another vocabulary, a missing tokenizer, a dtype other than the model's own are
one-line usage errors before any forward pass."""

from __future__ import annotations

import copy
import json

import pytest
import torch

import infoeval
from infoeval.errors import UsageError

pytestmark = pytest.mark.usefixtures("one_thread")


def _load(folder):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32), AutoTokenizer.from_pretrained(folder)


@pytest.fixture(scope="module")
def run(tiny_llama_dir, tiny_text, tmp_path_factory):
    text = tmp_path_factory.mktemp("objects") / "text.txt"
    text.write_text(tiny_text, encoding="utf-8")
    return dict(text=text, ctx=64, max_tokens=300, floor="off")


def _numbers(result) -> dict:
    data = json.loads(json.dumps(result.to_json()))
    return {"reference": data["reference"], "variants": [(v["name"], v["metrics"]) for v in data["variants"]]}


def test_an_object_gives_the_numbers_of_its_folder(tiny_llama_dir, run):
    model, tok = _load(tiny_llama_dir)
    model.train()  # a model mid-training: measured in eval mode, given back in train mode
    before = {k: v.clone() for k, v in model.state_dict().items()}
    by_object = infoeval.compare(model, tokenizer=tok, schemes=("int8-channel", "int4-g32"), **run)
    by_folder = infoeval.compare(str(tiny_llama_dir), schemes=("int8-channel", "int4-g32"), device="cpu", **run)
    assert _numbers(by_object) == _numbers(by_folder)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(m.training for m in model.modules())
    assert not any(m._forward_pre_hooks or m._forward_hooks for m in model.modules())
    info = by_object.to_json()["provenance"]["model"]
    assert (
        info["kind"] == "object"
        and info["spec"] == "LlamaForCausalLM"
        and info["device"] == "cpu"
        and info["dtype"] == "float32"
    )
    assert info["n_parameters"] == sum(p.numel() for p in model.parameters()) and len(info["sha256"]) == 64
    assert (
        info["sha256"] != by_folder.to_json()["provenance"]["model"]["sha256"]
    )  # a digest of the tensors, not of the file
    assert "in-memory" in info["tokenizer"]["source"]


def test_module_variants_share_the_lockstep(tiny_llama_dir, run, tmp_path):
    from infoeval.gating.checkpoint import quantize_checkpoint
    from infoeval.input.settings import ModelSettings

    quantize_checkpoint(ModelSettings(model=str(tiny_llama_dir), device="cpu"), "int8-channel", tmp_path / "int8")
    int8, _ = _load(tmp_path / "int8")
    model, tok = _load(tiny_llama_dir)
    result = infoeval.compare(
        model,
        tokenizer=tok,
        schemes=("int8-channel",),
        variants={"copy": copy.deepcopy(model), "ckpt": (int8, tok)},
        **run,
    )
    m = {v.name: v.metrics for v in result.variants}
    assert list(m) == ["int8-channel", "copy", "ckpt"]
    assert m["copy"]["kl_mean"] == 0.0 and m["copy"]["top1"] == 1.0 and m["copy"]["kl_max"] == 0.0
    for key in ("kl_mean", "kl_p99", "top1", "ppl", "tv_mean"):  # the same weights through a module or a hook
        assert m["ckpt"][key] == pytest.approx(m["int8-channel"][key], rel=1e-5, abs=1e-9), key
    assert m["ckpt"]["kl_mean"] > 0
    q = next(v for v in result.variants if v.name == "ckpt").quantization
    assert q["scheme"]["kind"] == "in-memory object" and q["model"]["n_parameters"] == sum(
        p.numel() for p in int8.parameters()
    )
    frame = result.to_frame().set_index("variant")
    assert frame.loc["ckpt", "kl_mean"] == m["ckpt"]["kl_mean"] and frame["layers_quantized"].isna()["ckpt"]


def _counting(model):
    calls = []
    model.register_forward_pre_hook(lambda *a: calls.append(1))
    return calls


def test_a_variant_with_another_vocabulary_is_refused_before_any_forward(tiny_llama_dir, run):
    from transformers import LlamaForCausalLM

    model, tok = _load(tiny_llama_dir)
    config = copy.deepcopy(model.config)
    config.vocab_size += 1
    other = LlamaForCausalLM(config)
    calls = _counting(model)
    with pytest.raises(UsageError, match=r"variant 'other' has a vocabulary of \d+ tokens, the reference \d+"):
        infoeval.compare(model, tokenizer=tok, variants={"other": other}, **run)
    assert calls == []


@pytest.mark.parametrize(
    "kw,fragment",
    [
        ({"tokenizer": None}, "a model object needs its tokenizer"),
        ({"dtype": "bfloat16"}, "cast the model or leave dtype='auto'"),
        ({"device_map": "auto"}, "a model object is used where its weights are"),
        ({"schemes": ("int8-channel",), "variants": {"int8-channel": "x"}}, "the name 'int8-channel' is taken"),
        ({"variants": {"v": torch.nn.Linear(2, 2)}}, "variants['v'] must be a model spec"),
    ],
)
def test_bad_objects_are_one_line_usage_errors(tiny_llama_dir, run, kw, fragment):
    model, tok = _load(tiny_llama_dir)
    calls = _counting(model)
    with pytest.raises(UsageError) as e:
        infoeval.compare(model, **{"tokenizer": tok, **run, **kw})
    assert fragment in str(e.value) and "\n" not in str(e.value) and calls == []


def test_a_spec_string_takes_no_tokenizer(tiny_llama_dir):
    _, tok = _load(tiny_llama_dir)
    with pytest.raises(UsageError, match="tokenizer= goes with a model object"):
        infoeval.compare(str(tiny_llama_dir), tokenizer=tok)

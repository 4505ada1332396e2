"""sensitivity on tiny models: each unit's numbers against a brute-force run with only that unit quantized, the
forward from a captured block input against the model's own forward, unit enumeration, Spearman against
brute-force ranks, the proxy's additivity, and the command line."""

from __future__ import annotations

import json
import math
import sys

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from infoeval import engine
from infoeval.engine import blocks
from infoeval.errors import UsageError
from infoeval.input.prepare import Reporter, prepare
from infoeval.input.settings import ModelSettings, TextSettings, WindowSettings
from infoeval.input.windows import window_inputs, window_targets
from infoeval.quant.primitives import fake_quantize
from infoeval.quant.schemes import parse_scheme
from infoeval.quant.variant_settings import parse_schemes
from infoeval.sensitivities import sweep_prepared
from infoeval.sensitivities.ranking import average_ranks, spearman
from infoeval.sensitivities.units import enumerate_units, split_globs

pytestmark = pytest.mark.usefixtures("one_thread")
MAX_TOKENS, CTX = 300, 128


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    from tiny_models import tiny_text

    path = tmp_path_factory.mktemp("sens-text") / "text.txt"
    path.write_text(tiny_text(), encoding="utf-8")
    return path


def _prepared(folder, text_file, max_tokens=MAX_TOKENS):
    return prepare(
        ModelSettings(model=str(folder)),
        TextSettings(text=text_file, max_tokens=max_tokens),
        WindowSettings(ctx=CTX),
        Reporter(),
    )


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def prepared(request, text_file, tiny_llama_dir, tiny_qwen3_dir):
    return _prepared(tiny_llama_dir if request.param == "llama" else tiny_qwen3_dir, text_file)


# ---- brute force: a fresh copy, the unit's weights fake-quantized, full forwards, KL summed in float64 -------------
def _brute_force(p, layers, scheme) -> dict:
    model = AutoModelForCausalLM.from_pretrained(p.loaded.info.spec, dtype=torch.float32).eval()
    ref_model = AutoModelForCausalLM.from_pretrained(p.loaded.info.spec, dtype=torch.float32).eval()
    modules = dict(model.named_modules())
    with torch.no_grad():
        for name in layers:
            modules[name].weight.copy_(fake_quantize(modules[name].weight, scheme))
    kl, top1, dnll = [], [], []
    with torch.no_grad():
        for w in p.windows:
            ids = window_inputs(p.stream.ids, w, p.protocol.prefix_id)
            y = window_targets(p.stream.ids, w)
            lp = torch.log_softmax(ref_model(input_ids=ids).logits[0, w.logit_index].double(), -1)
            lq = torch.log_softmax(model(input_ids=ids).logits[0, w.logit_index].double(), -1)
            kl += (lp.exp() * (lp - lq)).sum(-1).tolist()
            top1 += (lq.gather(-1, lp.argmax(-1, keepdim=True))[:, 0] >= lq.max(-1).values).tolist()
            dnll += (lp.gather(-1, y[:, None]) - lq.gather(-1, y[:, None]))[:, 0].tolist()
    return {
        "kl_mean": float(np.mean(kl)),
        "kl_p99": float(np.quantile(kl, 0.99)),
        "top1": float(np.mean(top1)),
        "dln_ppl": float(np.mean(dnll)),
    }


@pytest.mark.parametrize(
    "by, pick", [("linear", "model.layers.1.mlp.down_proj"), ("block", "model.layers.1"), ("type", "self_attn.v_proj")]
)
def test_each_unit_equals_a_brute_force_run_with_only_that_unit_quantized(prepared, by, pick):
    scheme = parse_scheme("int3-g64")
    result = sweep_prepared(prepared, [scheme], by=by, units=[pick], proxy=False).to_json()
    (row,) = result["units"]
    assert row["unit"] == pick and row["kind"] == by and row["scheme"] == scheme.name
    modules = dict(prepared.loaded.model.named_modules())
    assert row["n_weights"] == sum(modules[n].weight.numel() for n in row["layers"])
    brute = _brute_force(prepared, row["layers"], scheme)
    assert brute["kl_mean"] > 1e-4  # the unit matters, so the comparison can fail
    for key in ("kl_mean", "kl_p99", "dln_ppl"):
        assert row[key] == pytest.approx(brute[key], rel=1e-4, abs=1e-6), key
    assert row["top1"] == pytest.approx(brute["top1"], abs=2.0 / result["reference"]["tokens"])
    assert row["kl_se"] > 0 and row["dln_ppl_se"] > 0


def test_the_block_cache_and_the_plain_path_give_the_same_numbers(prepared):
    cached = sweep_prepared(prepared, parse_schemes("int4-g64"), by="block", proxy=False).to_json()
    plain = sweep_prepared(prepared, parse_schemes("int4-g64"), by="block", proxy=False, block_cache=False).to_json()
    assert cached["block_cache"] and not plain["block_cache"]
    assert cached["layers_run_fraction"] == pytest.approx(0.75) and plain["layers_run_fraction"] == 1.0
    for a, b in zip(cached["units"], plain["units"]):
        assert a["unit"] == b["unit"]
        for key in ("kl_mean", "kl_p99", "top1", "dln_ppl"):
            assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-7)


@pytest.mark.parametrize("keep", ["tensor", 0, 7])
def test_the_forward_from_a_captured_block_input_equals_the_full_forward(prepared, keep):
    model = prepared.loaded.model
    w = prepared.windows[1]
    ids = window_inputs(prepared.stream.ids, w, prepared.protocol.prefix_id)
    kept = w.logit_index if keep == "tensor" else keep
    n_layers = len(blocks.decoder(model).layers)
    with torch.inference_mode():
        full = engine.forward_logits(model, ids, kept)
        logits, cached = blocks.capture(model, ids, kept, range(n_layers))
        assert torch.equal(logits, full)
        for start in range(n_layers):
            assert torch.allclose(blocks.forward_from(model, cached, start, kept), full, rtol=1e-5, atol=1e-5), start
    assert (
        set(cached.hidden) == set(range(n_layers))
        and cached.nbytes == n_layers * ids.numel() * model.config.hidden_size * 4
    )


def test_units_by_linear_block_and_type(tiny_llama_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    linear = enumerate_units(model, "linear")
    block = enumerate_units(model, "block")
    kinds = enumerate_units(model, "type")
    assert len(linear) == 14 and [u.name for u in block] == ["model.layers.0", "model.layers.1"]
    assert [u.name for u in kinds] == [
        "self_attn.q_proj",
        "self_attn.k_proj",
        "self_attn.v_proj",
        "self_attn.o_proj",
        "mlp.gate_proj",
        "mlp.up_proj",
        "mlp.down_proj",
    ]
    down = next(u for u in kinds if u.name == "mlp.down_proj")
    assert down.layers == ("model.layers.0.mlp.down_proj", "model.layers.1.mlp.down_proj") and down.start == 0
    assert (
        block[1].start == 1
        and len(block[1].layers) == 7
        and all(n.startswith("model.layers.1.") for n in block[1].layers)
    )
    assert (
        {n for u in linear for n in u.layers}
        == {n for u in block for n in u.layers}
        == {n for u in kinds for n in u.layers}
    )
    assert "lm_head" not in {n for u in linear for n in u.layers}
    assert [u.name for u in enumerate_units(model, "linear", ["*.1.mlp.*"])] == [
        "model.layers.1.mlp.gate_proj",
        "model.layers.1.mlp.up_proj",
        "model.layers.1.mlp.down_proj",
    ]
    assert split_globs(["a,b", " c "]) == ("a", "b", "c")
    with pytest.raises(UsageError, match="matches no unit"):
        enumerate_units(model, "type", ["mlp.nothing"])
    with pytest.raises(UsageError, match="by 'row'"):
        enumerate_units(model, "row")


def _brute_ranks(x):
    return [1 + sum(v < xi for v in x) + (sum(v == xi for v in x) - 1) / 2 for xi in x]


def _brute_spearman(x, y):
    rx, ry = _brute_ranks(x), _brute_ranks(y)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    return cov / math.sqrt(sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry))


def test_spearman_equals_brute_force_ranks_with_ties():
    rng = np.random.default_rng(0)
    for n in (2, 3, 7, 30):
        for _ in range(20):
            x, y = rng.integers(0, 4, n).astype(float), rng.integers(0, 5, n).astype(float)  # many ties
            assert average_ranks(x).tolist() == _brute_ranks(x.tolist())
            if len(set(x)) > 1 and len(set(y)) > 1:
                assert spearman(x, y)[0] == pytest.approx(_brute_spearman(x.tolist(), y.tolist()), abs=1e-12)
    assert spearman([1, 2, 3, 4], [10, 20, 30, 1000])[0] == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1])[0] == pytest.approx(-1.0)
    assert spearman([1.0, 2.0, float("nan"), 4.0], [1.0, 3.0, 2.0, 2.0]) == (
        pytest.approx(_brute_spearman([1, 2, 4], [1, 3, 2])),
        3,
    )
    assert math.isnan(spearman([1.0, 1.0], [1.0, 2.0])[0])


def test_the_proxy_adds_up_over_layers_and_predicts_the_kl(prepared):
    linear = sweep_prepared(prepared, parse_schemes("int4-g64"), by="linear", seed=3).to_json()
    kinds = sweep_prepared(prepared, parse_schemes("int4-g64"), by="type", seed=3).to_json()
    per_layer = {u["unit"]: u["proxy"] for u in linear["units"]}
    for u in kinds["units"]:
        assert u["proxy"] == pytest.approx(sum(per_layer[n] for n in u["layers"]), rel=1e-9)
    assert linear["proxy"]["n"] == len(linear["units"]) and linear["proxy"]["spearman"] > 0.7
    # second order in a small weight change: the proxy is the KL's scale (tiny models: within a factor of 2)
    ratios = [u["proxy"] / u["kl_mean"] for u in linear["units"]]
    assert 0.5 < float(np.median(ratios)) < 2.0
    again = sweep_prepared(prepared, parse_schemes("int4-g64"), by="type", seed=3).to_json()
    assert [u["proxy"] for u in again["units"]] == [u["proxy"] for u in kinds["units"]]  # seeded draws


def _cli(monkeypatch, capsys, *args, env=None):
    from infoeval.cli import main

    for k, v in (env or {}).items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(sys, "argv", ["infoeval", *map(str, args)])
    code = main()
    return code, capsys.readouterr()


def test_the_command_writes_json_and_csv(tiny_llama_dir, text_file, tmp_path, monkeypatch, capsys):
    code, out = _cli(
        monkeypatch,
        capsys,
        "sensitivity",
        tiny_llama_dir,
        "--text",
        text_file,
        "--ctx",
        CTX,
        "--by",
        "block",
        "--scheme",
        "int4-g64,int3-g64",
        "--out-dir",
        tmp_path,
        "-q",
    )
    assert code in (0, None), out.err
    data = json.loads((tmp_path / "result.json").read_text())
    assert data["schema"] == "infoeval/sensitivity/4" and data["by"] == "block" and len(data["units"]) == 4
    keys = {
        "unit",
        "kind",
        "layers",
        "scheme",
        "n_weights",
        "kl_mean",
        "kl_se",
        "kl_p99",
        "top1",
        "dln_ppl",
        "dln_ppl_se",
        "proxy",
    }
    assert all(keys <= set(u) for u in data["units"])
    assert data["provenance"]["command"] == "sensitivity" and data["reference"]["tokens"] > 0
    assert {"sweep_s", "proxy_s", "load_s"} <= set(data["timings"]) and data["proxy"]["spearman"] is not None
    csv = (tmp_path / "summary.csv").read_text().splitlines()
    assert len(csv) == 5 and csv[0].startswith("unit,kind,scheme")
    assert "Sensitivity by block" in out.out and "wrote" in out.err


@pytest.mark.parametrize(
    "args, message",
    [
        (["--by", "row"], "--by 'row'"),
        (["--units", "mlp.nothing"], "matches no unit"),
        (["--scheme", "int4-g2"], "group size"),
    ],
)
def test_bad_options_exit_2_with_one_line(tiny_llama_dir, text_file, tmp_path, monkeypatch, capsys, args, message):
    code, out = _cli(
        monkeypatch, capsys, "sensitivity", tiny_llama_dir, "--text", text_file, "--json", tmp_path / "r.json", *args
    )
    assert code == 2 and message in out.err and len(out.err.strip().splitlines()) == 1
    assert not (tmp_path / "r.json").exists()


def test_a_launcher_is_refused(tiny_llama_dir, monkeypatch, capsys):
    code, out = _cli(monkeypatch, capsys, "sensitivity", tiny_llama_dir, env={"WORLD_SIZE": "2"})
    assert code == 2 and "'sensitivity' runs as one process" in out.err

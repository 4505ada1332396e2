"""Quantizing ahead in a forked child (quant/ahead.py): the variants are bit for bit those made in-process.

Facts checked:
* every stored field (codes, scales, zero points, −0 positions), its dtype, every layer's SQNR and Σw² equal the
  in-process encoding, for symmetric/asymmetric, channel/grouped (partial last group), 2–8 bits, fp32 and a
  bfloat16 model loaded from the same float32 checkpoint;
* the child's layers are views of one shared buffer per scheme; the layers it did not reach, a layer whose
  weight no longer has the file's bits, an excluded layer and a child that fails are encoded in-process, with
  the same result;
* SQNR and Σw² do not depend on the number of threads (the child runs on one);
* quantize-compare's JSON is the same with and without the child (apart from timings).
"""

from __future__ import annotations

import json
import mmap
import os

import pytest
import torch

from infoeval.comparison.pipeline import quantize_compare
from infoeval.models import load_model
from infoeval.input.prepare import Reporter
from infoeval.quant import ahead as quant_ahead
from infoeval.quant.apply import build_variants
from infoeval.quant.primitives import signal_power, sqnr_db, fake_quantize
from infoeval.quant.schemes import parse_schemes
from infoeval.input.settings import ModelSettings, TextSettings, VariantSettings, WindowSettings
from variant_checks import FIELDS, same_variants

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or not os.sys.platform.startswith("linux"), reason="Linux fork only")

SCHEMES = parse_schemes("int8-channel,int4-g128,int4-channel,int8-g24-asym,int3-g20,int2-channel-asym,int5-g16,int6-channel")
def _model(folder, dtype=torch.float32):
    return load_model(str(folder), torch.device("cpu"), dtype).model


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_child_encodings_equal_in_process(tiny_llama_dir, dtype):
    model = _model(tiny_llama_dir, dtype)
    alone = build_variants(model, SCHEMES)
    ahead = quant_ahead.start(tiny_llama_dir, SCHEMES, dtype)
    assert ahead is not None
    try:
        ahead.collect(stop=False)
        both = build_variants(model, SCHEMES, ahead=ahead)
    finally:
        ahead.close()
    assert ahead.done and len(ahead.done) == len(ahead.tensors)  # the child finished every block weight
    same_variants(alone, both)
    for v in both:  # the child's layers lie in its scheme's one shared buffer
        storages = {pw.codes.untyped_storage().data_ptr() for pw in v.weights.values()}
        assert storages == {ahead.shared.buffers[v.name].untyped_storage().data_ptr()}
        # and dequantize to fake_quantize, as any stored weight does
        name, pw = next(iter(v.weights.items()))
        w = dict(model.named_modules())[name].weight
        from infoeval.quant.codes import dequantize

        assert torch.equal(dequantize(pw).view(torch.int16 if dtype == torch.bfloat16 else torch.int32),
                           fake_quantize(w, v.scheme).view(torch.int16 if dtype == torch.bfloat16 else torch.int32))  # fmt: skip


def test_changed_weight_and_exclude_encoded_here(tiny_llama_dir):
    model = _model(tiny_llama_dir)
    names = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and ".layers." in n]
    changed, excluded = next(n for n in names if "gate_proj" in n), names[1]  # a layer of 8 KiB of int8 codes
    with torch.no_grad():
        dict(model.named_modules())[changed].weight[0, 0] += 1.0  # no longer the file's bits
    alone = build_variants(model, SCHEMES[:3], exclude=[excluded])
    ahead = quant_ahead.start(tiny_llama_dir, SCHEMES[:3], torch.float32, exclude=[excluded])
    try:
        ahead.collect(stop=False)
        both = build_variants(model, SCHEMES[:3], exclude=[excluded], ahead=ahead)
    finally:
        ahead.close()
    assert f"{excluded}.weight" not in ahead.tensors and ahead.checked[f"{changed}.weight"] is False
    same_variants(alone, both)
    buffer = ahead.shared.buffers[SCHEMES[0].name]
    assert both[0].weights[changed].codes.untyped_storage().data_ptr() != buffer.untyped_storage().data_ptr()  # here
    assert both[0].weights[names[2]].codes.untyped_storage().data_ptr() == buffer.untyped_storage().data_ptr()  # child
    # release hands the whole pages of the regions no variant took back (they read as zeros again)
    fields = ahead.shared.layout[SCHEMES[0].name, f"{changed}.weight"]
    first, last = min(o for o, _ in fields.values()), max(o + n for o, n in fields.values())
    lo, hi = -(-first // mmap.PAGESIZE) * mmap.PAGESIZE, last // mmap.PAGESIZE * mmap.PAGESIZE
    assert buffer[first:last].any()  # the child wrote the changed layer's codes
    kept = both[0].weights[names[2]].codes.clone()
    ahead.release()
    assert hi > lo and not buffer[lo:hi].any()
    assert torch.equal(both[0].weights[names[2]].codes, kept) and ahead.shared.buffers == {}


@pytest.mark.parametrize("fault", ["fail", "slow"])
def test_failed_or_stopped_child(tiny_llama_dir, monkeypatch, fault):
    monkeypatch.setenv(quant_ahead.FAULT_ENV, fault)
    model = _model(tiny_llama_dir)
    alone = build_variants(model, SCHEMES[:3])
    ahead = quant_ahead.start(tiny_llama_dir, SCHEMES[:3], torch.float32)
    try:
        both = build_variants(model, SCHEMES[:3], ahead=ahead)  # asks a slow child to stop at once
    finally:
        ahead.close()
    assert len(ahead.done) < len(ahead.tensors)
    if fault == "fail":
        assert ahead.done == {}
    same_variants(alone, both)


def test_not_started_where_it_does_not_apply(tiny_llama_dir, tmp_path, monkeypatch):
    assert quant_ahead.start(None, SCHEMES, torch.float32) is None
    assert quant_ahead.start(tmp_path, SCHEMES, torch.float32) is None  # no safetensors
    assert quant_ahead.start(tiny_llama_dir, [], torch.float32) is None
    monkeypatch.setenv("INFOEVAL_OFF", "ahead")
    assert quant_ahead.start(tiny_llama_dir, SCHEMES, torch.float32) is None


@pytest.mark.parametrize("shape", [(1536, 576), (1, 40000), (1, 40001), (1, 4096), (3, 7), (40000, 2)])
def test_sqnr_does_not_depend_on_threads(shape):
    g = torch.Generator().manual_seed(0)
    w = torch.randn(shape, generator=g)
    w_hat = fake_quantize(w, SCHEMES[1])
    threads = torch.get_num_threads()
    try:
        values = []
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            values.append((signal_power(w), sqnr_db(w, w_hat)))
    finally:
        torch.set_num_threads(threads)
    assert values[0] == values[1] == values[2]
    # and within float32 rounding of a float64 sum
    exact = 10 * torch.log10(w.double().pow(2).sum() / (w.double() - w_hat.double()).pow(2).sum()).item()
    assert values[0][1] == pytest.approx(exact, abs=1e-4)


def test_quantize_compare_same_with_and_without_child(tiny_llama_dir, monkeypatch):
    args = (ModelSettings(model=str(tiny_llama_dir)), TextSettings(max_tokens=256), WindowSettings(ctx=64),
            VariantSettings(schemes="int8-channel,int4-g32,int4-channel-asym"), Reporter())  # fmt: skip
    with_child, _ = quantize_compare(*args)
    monkeypatch.setenv("INFOEVAL_OFF", "ahead")
    without, _ = quantize_compare(*args)
    assert with_child.timings["quantize_ahead_s"] > 0 and without.timings["quantize_ahead_s"] == 0
    a, b = with_child.to_json(), without.to_json()
    for d in (a, b):
        d.pop("timings")
        d["provenance"].pop("created", None)
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)

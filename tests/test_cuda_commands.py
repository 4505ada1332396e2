"""Every command family on the GPU against the same call on the CPU (float32, tiny models): the gate (fixed and
sequential, its reference written on either device), sensitivity and mix, spec-accept and spec-decode, and
``device_map="auto"``. Skipped without a GPU; ``INFOEVAL_TEST_GPU=cpu`` is their dry run (tests/cuda_device.py)."""

from __future__ import annotations

import pytest
from cuda_device import GPU, ON_GPU, close, numbers

import infoeval

pytestmark = [*ON_GPU, pytest.mark.usefixtures("one_thread")]
RTOL, ATOL = 1e-3, 1e-5  # float32 on two devices: the same sums in other orders
LOOSE = dict(max_kl_mean=10.0, max_kl_p99=100.0, min_top1=0.0, max_ppl_ratio=100.0, max_bpb_increase=100.0)


@pytest.fixture(scope="module")
def text(tiny_text, tmp_path_factory):
    path = tmp_path_factory.mktemp("cuda-commands") / "t.txt"
    path.write_text(tiny_text, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def references(tiny_llama_dir, text, tmp_path_factory):
    """The reference file written on the CPU and on the GPU."""
    folder = tmp_path_factory.mktemp("cuda-refs")
    for device in ("cpu", GPU):
        infoeval.reference(
            str(tiny_llama_dir),
            out=folder / f"{device}.safetensors",
            text=text,
            ctx=64,
            max_tokens=300,
            top_k=16,
            device=device,
            dtype="float32",
        )
    return {device: folder / f"{device}.safetensors" for device in ("cpu", GPU)}


def _gate(reference, device, **kw):
    return infoeval.gate(reference=reference, scheme="int4-g32", floor="off", device=device, dtype="float32", **kw)


def test_a_reference_written_on_either_device_gates_on_either(references):
    """Four pairings of where the reference was written and where the candidate runs: the same metrics and verdicts."""
    base = _gate(references["cpu"], "cpu", max_kl_mean=0.01)
    for written in ("cpu", GPU):
        for run in ("cpu", GPU):
            got = _gate(references[written], run, max_kl_mean=0.01)
            assert close(got.metrics, base.metrics, RTOL, ATOL) == [], (written, run)
            assert [v["passed"] for v in got.verdicts] == [v["passed"] for v in base.verdicts]
            assert got.passed == base.passed


def test_the_sequential_gate_on_the_gpu_decides_as_on_the_cpu(references):
    kw = dict(sequential=True, alpha=0.1, undecided="pass", **LOOSE)
    cpu, gpu = _gate(references["cpu"], "cpu", **kw), _gate(references["cpu"], GPU, **kw)
    assert gpu.passed == cpu.passed is True
    assert gpu.sequential["decision"] == cpu.sequential["decision"]
    assert abs(gpu.sequential["windows_used"] - cpu.sequential["windows_used"]) <= 1


def test_sensitivity_and_mix_on_the_gpu(tiny_llama_dir, text):
    kw = dict(text=text, ctx=64, dtype="float32")
    sens = {
        d: infoeval.sensitivity(
            str(tiny_llama_dir), schemes=("int4-g32",), by="block", max_tokens=256, proxy=False, device=d, **kw
        )
        for d in ("cpu", GPU)
    }
    assert close(numbers(sens[GPU].to_json()["units"]), numbers(sens["cpu"].to_json()["units"]), RTOL, ATOL) == []
    mix = {
        d: infoeval.mix(
            str(tiny_llama_dir),
            schemes=("int4-g32", "int8-channel"),
            budget_bits="int4-g32",
            max_tokens=128,
            sweep_tokens=128,
            device=d,
            **kw,
        )
        for d in ("cpu", GPU)
    }
    assert mix[GPU].exports["recipe"] == mix["cpu"].exports["recipe"]


def test_spec_accept_and_spec_decode_on_the_gpu(tiny_llama_dir, text):
    kw = dict(text=text, ctx=64, max_tokens=256, dtype="float32", draft_layers=1, temperature=(0.5, 1))
    cpu, gpu = (infoeval.spec_accept(str(tiny_llama_dir), device=d, **kw).to_json() for d in ("cpu", GPU))
    assert close(numbers(gpu), numbers(cpu), RTOL, ATOL) == []
    # a draft of every layer is the target itself: it proposes what the target would, so (almost) every token is
    # accepted
    decoded = infoeval.spec_decode(
        str(tiny_llama_dir), draft_layers=2, max_new_tokens=24, device=GPU, dtype="float32"
    ).to_json()
    assert decoded["speculative"]["new_tokens"] == decoded["plain"]["new_tokens"] == 24
    assert decoded["speculative"]["acceptance"] >= 0.95 and decoded["provenance"]["device"].startswith(GPU)


def test_device_map_auto_gives_the_numbers_of_one_device(tiny_llama_dir, text):
    kw = dict(schemes=("int4-g32",), text=text, ctx=64, max_tokens=300, dtype="float32", floor="off")
    one = infoeval.compare(str(tiny_llama_dir), device=GPU, **kw).to_json()
    mapped = infoeval.compare(str(tiny_llama_dir), device_map="auto", **kw).to_json()
    assert close(numbers(mapped["variants"]), numbers(one["variants"]), RTOL, ATOL) == []
    assert close(numbers(mapped["reference"]), numbers(one["reference"]), RTOL, ATOL) == []


def test_stream_layers_on_the_gpu_equals_the_cpu(tiny_llama_dir, text):
    """--stream layers with each layer placed on the GPU as it is read, the hidden states kept there."""
    run = dict(text=text, ctx=64, max_tokens=300, schemes=("int4-g32",), dtype="float32", stream="layers")
    cpu, gpu = (infoeval.compare(str(tiny_llama_dir), device=d, **run).to_json() for d in ("cpu", GPU))
    assert gpu.pop("memory_plan")["plan"] == cpu.pop("memory_plan")["plan"] == "streamed"  # budgets: each device's
    assert not close(numbers(gpu), numbers(cpu), RTOL, ATOL)


def test_stream_layers_parked_in_host_memory_equal_kept_on_the_gpu(tiny_llama_dir, text):
    """The hidden states parked in host memory between layers (a GPU that cannot hold them all): the same bits."""
    import numpy as np
    import torch

    from infoeval import engine
    from infoeval.engine.stream_layout import StreamLayout
    from infoeval.engine.streaming import StreamedModel, last_states
    from infoeval.input.prepare import Reporter, prepare
    from infoeval.input.settings import ModelSettings, TextSettings, WindowSettings

    p = prepare(
        ModelSettings(str(tiny_llama_dir), GPU, "float32"),
        TextSettings(text=text, max_tokens=300),
        WindowSettings(ctx=64),
        Reporter(),
        skeleton=True,
    )
    states = {}
    for layout in (StreamLayout(), StreamLayout(parked=True)):
        streamed = StreamedModel(tiny_llama_dir, torch.float32, torch.device(GPU), layout=layout)
        out = last_states(streamed, p.stream.ids, engine.plan(p.windows), p.protocol.prefix_id)
        states[layout.parked] = out["reference"][0]
    assert np.array_equal(states[True], states[False]) and np.abs(states[False]).sum() > 0

"""CUDA paths of quantize-compare: the same tiny model on the GPU and the CPU gives the same per-position numbers in
float32; bfloat16 (what ``auto`` picks on a GPU) stays finite and within a stated distance of float32. Skipped
without a GPU; ``INFOEVAL_TEST_GPU=cpu`` is their dry run (tests/cuda_device.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from cuda_device import DRY_RUN, GPU, on_gpu

import infoeval

SCHEMES = ("int8-channel", "int4-g32")


@pytest.fixture(scope="module")
def text(tiny_text, tmp_path_factory):
    path = tmp_path_factory.mktemp("cuda") / "t.txt"
    path.write_text(tiny_text, encoding="utf-8")
    return path


@on_gpu
@pytest.mark.parametrize("model", ["tiny_llama_dir", "tiny_qwen3_dir"])
@pytest.mark.usefixtures("one_thread")
def test_float32_on_the_gpu_matches_the_cpu(model, text, request):
    folder = str(request.getfixturevalue(model))
    kw = dict(schemes=SCHEMES, text=text, ctx=64, max_tokens=400, dtype="float32", floor="off")
    cpu, gpu = infoeval.compare(folder, device="cpu", **kw), infoeval.compare(folder, device=GPU, **kw)
    assert gpu.to_json()["provenance"]["device"].startswith(GPU)
    np.testing.assert_allclose(gpu.columns.reference["nll"], cpu.columns.reference["nll"], atol=1e-3)
    for name in SCHEMES:
        np.testing.assert_allclose(gpu.columns.variants[name]["kl"], cpu.columns.variants[name]["kl"], atol=1e-4)


@on_gpu
@pytest.mark.usefixtures("one_thread")
def test_bfloat16_is_finite_and_near_float32(tiny_llama_dir, text):
    """bfloat16 keeps 8 significant bits: the reference's perplexity moves by under 2 %, a variant's mean KL by under
    half its float32 value plus 0.01 nats (the bfloat16 noise floor of this model is about 1e-3; int4-g32's KL about
    0.03), and the run's own noise floor says how far bfloat16 itself moves the model."""
    kw = dict(schemes=SCHEMES, text=text, ctx=64, max_tokens=400, device=GPU, floor="full")
    f32, b16 = (
        infoeval.compare(str(tiny_llama_dir), dtype="float32", **kw).to_json(),
        infoeval.compare(str(tiny_llama_dir), dtype="bfloat16", **kw).to_json(),
    )
    assert b16["provenance"]["dtype"] == "bfloat16" and f32["provenance"]["dtype"] == "float32"
    assert abs(b16["reference"]["ppl"] / f32["reference"]["ppl"] - 1) < 0.02
    for a, b in zip(f32["variants"], b16["variants"]):
        assert (
            np.isfinite(b["metrics"]["kl_mean"])
            and abs(b["metrics"]["kl_mean"] - a["metrics"]["kl_mean"]) <= 0.5 * a["metrics"]["kl_mean"] + 0.01
        )
    assert np.isfinite(b16["floor"]["metrics"]["kl_mean"]) and b16["floor"]["metrics"]["kl_mean"] >= 0


@on_gpu
@pytest.mark.usefixtures("one_thread")
def test_auto_picks_bfloat16_on_a_gpu(tiny_llama_dir, text):
    res = infoeval.compare(
        str(tiny_llama_dir), schemes=("int8-channel",), text=text, ctx=64, max_tokens=200, device=GPU, floor="off"
    ).to_json()
    assert res["provenance"]["dtype"] == ("float32" if DRY_RUN else "bfloat16")
    assert np.isfinite(res["variants"][0]["metrics"]["kl_mean"])


def test_cuda_requested_without_gpu_is_a_usage_error():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    from infoeval.errors import DeviceError
    from infoeval.models import resolve_device

    with pytest.raises(DeviceError, match="no CUDA device"):
        resolve_device("cuda")

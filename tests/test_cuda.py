"""CUDA paths: the same tiny model on cuda and cpu gives the same per-position numbers (skipped without a GPU)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tiny_models import as_json, requires_cuda

from infoeval.input.settings import ModelSettings, TextSettings, VariantSettings, WindowSettings
from infoeval.comparison.pipeline import quantize_compare


@requires_cuda
def test_cuda_matches_cpu(tiny_llama_dir, tiny_text, tmp_path):
    path = tmp_path / "t.txt"
    path.write_text(tiny_text, encoding="utf-8")
    text_settings, window_settings, variant_settings = TextSettings(text=path), WindowSettings(ctx=64), VariantSettings(schemes="int8-channel,int4-g32")
    cpu, cpu_cols = as_json(quantize_compare(ModelSettings(str(tiny_llama_dir), "cpu", "float32"), text_settings, window_settings, variant_settings))
    gpu, gpu_cols = as_json(quantize_compare(ModelSettings(str(tiny_llama_dir), "cuda", "float32"), text_settings, window_settings, variant_settings))
    assert gpu["provenance"]["device"].startswith("cuda")
    np.testing.assert_allclose(gpu_cols.reference["nll"], cpu_cols.reference["nll"], atol=1e-3)
    for name in cpu_cols.variants:
        np.testing.assert_allclose(gpu_cols.variants[name]["kl"], cpu_cols.variants[name]["kl"], atol=1e-4)


@requires_cuda
def test_cuda_default_dtype_is_bf16(tiny_llama_dir, tiny_text, tmp_path):
    path = tmp_path / "t.txt"
    path.write_text(tiny_text, encoding="utf-8")
    res, _ = as_json(quantize_compare(
        ModelSettings(str(tiny_llama_dir), "auto", "auto"), TextSettings(text=path), WindowSettings(ctx=64),
        VariantSettings(schemes="int8-channel"),
    ))  # fmt: skip
    assert res["provenance"]["dtype"] == "bfloat16"
    assert np.isfinite(res["variants"][0]["metrics"]["kl_mean"])


def test_cuda_requested_without_gpu_is_a_usage_error():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    from infoeval.errors import DeviceError
    from infoeval.models import resolve_device

    with pytest.raises(DeviceError, match="no CUDA device"):
        resolve_device("cuda")

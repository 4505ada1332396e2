"""On the GPU: compress → decompress gives the very bytes back, an archive decoded on another device than it was
written on is refused (or, forced, comes back exact or not at all), and each quantization library's CUDA kernels
give its CPU result (the same stored bits, the same weights' SQNR, a KL of the same size). Skipped without a GPU;
``INFOEVAL_TEST_GPU=cpu`` is their dry run (tests/cuda_device.py)."""

from __future__ import annotations

import importlib.util

import pytest
from cuda_device import DRY_RUN, GPU, ON_GPU

import infoeval
from infoeval.codec import compress as pipeline
from infoeval.codec.environment import EnvironmentMismatch
from infoeval.errors import DataError
from infoeval.quant.variant_settings import CalibrationSettings

pytestmark = [*ON_GPU, pytest.mark.usefixtures("one_thread")]
METHODS = {
    "bnb:nf4": "bitsandbytes",
    "bnb:int8": "bitsandbytes",
    "torchao:int4-g32": "torchao",
    "hqq:int4-g64": "hqq",
    "quanto:int4": "optimum",
    "autoround:int4-g32-iters4": "auto_round",
}


@pytest.fixture(scope="module")
def text(tiny_text, tmp_path_factory):
    path = tmp_path_factory.mktemp("cuda-codec") / "t.txt"
    path.write_text(tiny_text, encoding="utf-8")
    return path


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_compress_decompress_on_the_gpu_is_exact(tiny_llama_dir, text, tmp_path, dtype):
    packed, out = tmp_path / "t.iez", tmp_path / "t.out"
    result = pipeline.compress(
        text, packed, pipeline.CodecSettings(str(tiny_llama_dir), ctx=48, group=3, device=GPU, dtype=dtype)
    )
    assert result.to_json()["provenance"]["device"].startswith(GPU)
    pipeline.decompress(packed, out)
    assert out.read_bytes() == text.read_bytes()


def test_an_archive_decoded_on_another_device_is_refused_or_exact(tiny_llama_dir, text, tmp_path, monkeypatch):
    """The archive says where it was written; decoding it on the other device is refused with one line naming the
    device; with force it gives the bytes back exactly or fails on its checksums, leaving no output file."""
    if DRY_RUN:
        pytest.skip("a dry run has one device")
    packed, out = tmp_path / "t.iez", tmp_path / "t.out"
    pipeline.compress(
        text, packed, pipeline.CodecSettings(str(tiny_llama_dir), ctx=48, group=3, device=GPU, dtype="float32")
    )
    monkeypatch.setattr(pipeline, "_device_of", lambda exactness: "cpu")
    with pytest.raises(EnvironmentMismatch, match="device") as err:
        pipeline.decompress(packed, out)
    assert "\n" not in str(err.value) and not out.exists()
    try:
        forced = pipeline.decompress(packed, out, force=True)
    except DataError:
        assert not out.exists()
    else:
        assert out.read_bytes() == text.read_bytes() and any("device" in f for f in forced.forced)


@pytest.mark.parametrize("scheme", list(METHODS))
def test_a_library_on_the_gpu_gives_its_cpu_result(tiny_llama_dir, text, scheme):
    if importlib.util.find_spec(METHODS[scheme]) is None:
        pytest.skip(f"{METHODS[scheme]} is not installed")
    kw = dict(
        schemes=(scheme,),
        text=text,
        ctx=64,
        max_tokens=300,
        dtype="float32",
        floor="off",
        calibration=CalibrationSettings(samples=8, seqlen=64),
    )
    cpu, gpu = (infoeval.compare(str(tiny_llama_dir), device=d, **kw).to_json()["variants"][0] for d in ("cpu", GPU))
    assert gpu["quantization"]["bits_per_weight"] == cpu["quantization"]["bits_per_weight"]
    assert abs(gpu["quantization"]["sqnr_db_mean"] - cpu["quantization"]["sqnr_db_mean"]) < 0.5
    kl_cpu, kl_gpu = cpu["metrics"]["kl_mean"], gpu["metrics"]["kl_mean"]
    assert kl_cpu / 2 - 1e-3 <= kl_gpu <= 2 * kl_cpu + 1e-3, (
        kl_cpu,
        kl_gpu,
    )  # a kernel that breaks the method is off by orders

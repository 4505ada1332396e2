"""The real SmolLM2-135M as a compressor: a round trip on a few KB of Python docs, byte for byte, within 0.1 % of
Σ −log₂ q (plus a byte of stream ending), and smaller than xz."""

from __future__ import annotations

import pytest
from tiny_models import requires_smollm2

from infoeval.codec.compress import CodecSettings, compress, decompress
from infoeval.input.text import load_text

pytestmark = [pytest.mark.slow, requires_smollm2, pytest.mark.usefixtures("one_thread")]


def test_smollm2_round_trip_on_a_few_kb(tmp_path):
    raw = load_text(None, "python-docs", None).text[20_000:22_000].encode("utf-8")
    (tmp_path / "docs.txt").write_bytes(raw)
    settings = CodecSettings(model="smollm2-135m", ctx=128, group=8, verify=False)  # 5 segments stepped together
    result = compress(tmp_path / "docs.txt", tmp_path / "docs.iez", settings).to_json()
    back = decompress(tmp_path / "docs.iez", tmp_path / "back.txt").to_json()
    assert (tmp_path / "back.txt").read_bytes() == raw and back["tokens"] == result["layout"]["tokens"]
    bits = result["bits"]
    assert bits["payload"] <= 1.001 * bits["ideal"] + 8
    assert result["overhead"]["quantisation_bits"] <= result["overhead"]["quantisation_bound_bits"]
    xz = next(r for r in result["compressors"] if r["method"] == "xz -9")
    assert result["output"]["bytes"] < xz["bytes"]
    assert 0.6 < result["bits_per_byte"]["ideal"] < 1.3

"""A run that uses no quantization library prints nothing from one: transformers imports every library installed
(torchao from its quantizers, hqq from its KV caches), so infoeval imports transformers' model code with their
notices and warnings kept quiet (``models.libraries.transformers_quietly``). And counts read right ("1 window")."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from infoeval.comparison import compare as compare_pipeline
from infoeval.input.prepare import Reporter
from infoeval.input.settings import ModelSettings, TextSettings, WindowSettings
from infoeval.quant.variant_settings import VariantSettings

ENV = {k: v for k, v in os.environ.items() if k != "INFOEVAL_DEBUG"} | {"HF_HUB_OFFLINE": "1"}


@pytest.mark.slow  # a fresh process: the libraries' import-time notices come once per process
def test_the_api_prints_nothing_on_stderr_with_deprecations_as_errors(tiny_llama_dir, tiny_text, tmp_path):
    (tmp_path / "t.txt").write_text(tiny_text, encoding="utf-8")
    script = (
        "import infoeval\n"
        f"r = infoeval.compare({str(tiny_llama_dir)!r}, schemes='int4-g32', text={str(tmp_path / 't.txt')!r}, "
        "max_tokens=64, ctx=32)\n"
        "print(r.variants[0].name)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning", "-c", script],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr[-3000:]
    assert proc.stdout.strip() == "int4-g32"


class Labels(Reporter):
    def __init__(self):
        self.labels = []

    def start(self, total: int, text: str) -> None:
        self.labels.append(text)


def test_one_window_is_one_window(tiny_llama_dir, tiny_text, tmp_path):
    (tmp_path / "t.txt").write_text(tiny_text, encoding="utf-8")
    labels = Labels()
    compare_pipeline.quantize_compare(
        ModelSettings(str(tiny_llama_dir), "cpu", "float32"),
        TextSettings(text=tmp_path / "t.txt", max_tokens=20),
        WindowSettings(ctx=32),
        VariantSettings(schemes="int4-g32"),
        labels,
    )
    assert labels.labels and labels.labels[0].startswith("1 window × 2 models"), labels.labels

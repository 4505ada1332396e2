"""Shared pytest fixtures: tiny offline models built once per session (see tiny_models.py).

The model folders are shared by every test of the session: treat them as read-only (copy a folder with
``shutil.copytree`` before changing anything in it).

INFOEVAL_CACHE is deliberately left alone: the real SmolLM2 model's dequantized cache in
~/.cache/infoeval saves about 30 s per run.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:  # `tests` is not a package; make `from tiny_models import ...` work in any import mode
    sys.path.insert(0, _TESTS)

from tiny_models import (  # noqa: E402
    build_not_causal,
    build_tiny_llama,
    build_tiny_qwen3,
    requires_cuda,
    requires_smollm2,
)
from tiny_models import tiny_text as _tiny_text  # noqa: E402

__all__ = ["requires_cuda", "requires_smollm2"]


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory) -> Path:
    """Folder with a tiny LlamaForCausalLM (hidden 64) and its BOS tokenizer (<bos>=0, <eos>=1, <pad>=2)."""
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), seed=0)


@pytest.fixture(scope="session")
def tiny_qwen3_dir(tmp_path_factory) -> Path:
    """Folder with a tiny Qwen3ForCausalLM (hidden 96, intermediate 160) and its no-BOS tokenizer
    (<|endoftext|>=0 is eos and pad)."""
    return build_tiny_qwen3(tmp_path_factory.mktemp("tiny-qwen3"), seed=0)


@pytest.fixture(scope="session")
def not_causal_dir(tmp_path_factory) -> Path:
    """Folder with a tiny DistilBERT encoder plus a tokenizer: AutoModelForCausalLM refuses it."""
    return build_not_causal(tmp_path_factory.mktemp("not-causal"))


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models are all per-call overhead: a second OpenMP thread only waits (30× slower on a busy machine).
    Use with ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="session")
def tiny_text() -> str:
    """About 4 000 characters of Python-docs prose, disjoint from the tokenizer/LM-head training slice."""
    return _tiny_text()


@pytest.fixture(scope="session")
def report_runs(tmp_path_factory, tiny_llama_dir, tiny_text) -> Path:
    """Run folders for the report page, all on one text (ctx 32, 300 positions): quantize-compare of int4-g32 and
    int8-channel with top-5 (``qc``), compress-bits (``cb``, with ``cb.html``), a reference file keeping the top 8
    tokens, a fixed gate of int4-g32 (``gate``, ``gate.html``) and a sequential one that fails early on a
    mean-KL limit far below its KL (``seq``, ``seq.html``). Read-only."""
    from cli_run import run_cli

    d = tmp_path_factory.mktemp("report-runs")
    (d / "text.txt").write_text(tiny_text, encoding="utf-8")
    text = ["--text", d / "text.txt", "--ctx", 32, "--max-tokens", 300]
    gate = ["gate", tiny_llama_dir, "--reference", d / "ref.safetensors", "--scheme", "int4-g32"]
    jobs = [
        [
            "quantize-compare",
            tiny_llama_dir,
            *text,
            "--schemes",
            "int4-g32,int8-channel",
            "--topk",
            5,
            "--out-dir",
            d / "qc",
        ],
        ["compress-bits", tiny_llama_dir, *text, "--out-dir", d / "cb", "--html", d / "cb.html"],
        ["reference", tiny_llama_dir, *text, "--top-k", 8, "-o", d / "ref.safetensors"],
        [*gate, "--out-dir", d / "gate", "--html", d / "gate.html"],
        [*gate, "--sequential", "--max-kl-mean", 0.001, "--out-dir", d / "seq", "--html", d / "seq.html"],
    ]
    for job in jobs:
        r = run_cli([*job, "-q"], cwd=d)  # in this process (tests/cli_run.py)
        assert r.returncode in (0, 1), r.stderr  # a gate may fail its limits (exit 1)
    return d


@pytest.fixture(autouse=True)
def _no_progress_bar_passes_its_total(monkeypatch):
    """Every progress bar any test draws stops at or before its total: a step past it (a bar reading 6/4) fails
    the test that drew it."""
    from infoeval.input.prepare import Bar

    real = Bar.step

    def step(self) -> None:
        real(self)
        assert self.steps <= self.total, f"a progress bar went past its total: {self.steps}/{self.total}"

    monkeypatch.setattr(Bar, "step", step)

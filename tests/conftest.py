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
    tiny_text as _tiny_text,
)

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

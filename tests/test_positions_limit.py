"""Windows no longer than the model's trained positions (``max_position_embeddings``): a longer --ctx is one usage
line (exit 2) on every command that scores windows, as mutual-info's --lengths and compress's --ctx already were."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from infoeval.errors import UsageError
from infoeval.input.prepare import check_positions


def _loaded(limit, rope_scaling=None):
    config = SimpleNamespace(max_position_embeddings=limit, rope_scaling=rope_scaling)
    return SimpleNamespace(model=SimpleNamespace(config=config))


def test_check_positions_at_and_past_the_limit():
    check_positions(_loaded(512), 512)  # exactly the trained positions
    check_positions(_loaded(None), 10**6)  # a model that does not say: nothing to check
    with pytest.raises(UsageError, match=r"^ctx 513 is longer than the model's 512 positions .*give ctx ≤ 512$"):
        check_positions(_loaded(512), 513)
    check_positions(SimpleNamespace(model=object()), 10**6)  # an in-memory model without a config
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512}
    check_positions(_loaded(512, yarn), 2048)  # RoPE scaling stretches the positions
    with pytest.raises(
        UsageError, match=r"2049 is longer than the model's 2048 positions \(max_position_embeddings × its"
    ):
        check_positions(_loaded(512, yarn), 2049)
    with pytest.raises(UsageError, match=r"^ctx 2048 \(protocol gptq's default\) is longer than the model's 512"):
        check_positions(_loaded(512), 2048, "protocol gptq's default")


@pytest.mark.parametrize("command", ["quantize-compare", "compress-bits", "reference"])
def test_commands_refuse_a_ctx_past_the_models_positions(command, tiny_llama_dir, tiny_text, tmp_path, capsys):
    from transformers import AutoConfig

    from infoeval.cli import main

    limit = AutoConfig.from_pretrained(tiny_llama_dir).max_position_embeddings
    (tmp_path / "t.txt").write_text(tiny_text * 8, encoding="utf-8")
    argv = [command, str(tiny_llama_dir), "--text", str(tmp_path / "t.txt"), "--ctx", str(limit + 8), "-q"]
    out = ["--out", str(tmp_path / "r.safetensors")] if command == "reference" else ["--out-dir", str(tmp_path / "o")]
    assert main(argv + out) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"infoeval: error: --ctx {limit + 8} is longer than the model's {limit} positions "
        f"(max_position_embeddings); give --ctx ≤ {limit}"
    ]
    assert not (tmp_path / "o").exists() and not (tmp_path / "r.safetensors").exists()

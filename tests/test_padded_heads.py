"""A target and a draft with one tokenizer whose heads are padded to different widths (Qwen2.5's 0.5B and 7B: 151,936
and 152,064 over a 151,665-token tokenizer): both are compared over the tokenizer's vocabulary, and every figure is
the one two heads of the tokenizer's width give. Here: heads of 512 and 640 over one 512-token tokenizer, the
padding rows random (compared, they would change every figure)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tiny_models import _save, as_json, build_tiny_llama

from infoeval.errors import UsageError
from infoeval.input.prepare import Reporter
from infoeval.input.settings import ModelSettings, TextSettings, WindowSettings
from infoeval.models import load_model
from infoeval.speculative import accept, distill
from infoeval.speculative.decode import speculative_sample
from infoeval.speculative.drafts import DraftSettings, build_draft

CPU = torch.device("cpu")


def _padded(folder, out, width: int):
    """The model of ``folder`` with its embeddings and head cut or padded to ``width`` rows (the first rows kept)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, tok = AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
    n = model.get_output_embeddings().weight.shape[0]
    model.resize_token_embeddings(width, mean_resizing=False)
    if width > n:
        with torch.no_grad():
            torch.manual_seed(7)
            model.get_output_embeddings().weight[n:] = 3 * torch.randn(width - n, model.config.hidden_size)
    return _save(model, tok, out)


@pytest.fixture(scope="module")
def folders(tmp_path_factory, tiny_llama_dir, tiny_text):
    root = tmp_path_factory.mktemp("padded")
    narrow = build_tiny_llama(root / "draft-512", seed=1)
    (root / "t.txt").write_text(tiny_text, encoding="utf-8")
    return {
        "target": tiny_llama_dir,
        "target-640": _padded(tiny_llama_dir, root / "target-640", 640),
        "draft": narrow,
        "draft-640": _padded(narrow, root / "draft-640", 640),
        "draft-500": _padded(narrow, root / "draft-500", 500),
        "text": root / "t.txt",
    }


class Notes(Reporter):
    def __init__(self, notes: list):
        self.notes = notes

    def note(self, text: str) -> None:
        self.notes.append(text)


def _accept(folders, target, draft, notes=None):
    settings = ModelSettings(str(folders[target]), "cpu", "float32")
    result, cols = accept.spec_accept(
        settings,
        TextSettings(folders["text"], max_tokens=96),
        WindowSettings(48),
        DraftSettings(model=str(folders[draft])),
        (0.5, 1.0),
        Notes([] if notes is None else notes),
    )
    return as_json(result), cols


def _figures(result):
    return {
        (c["temperature"], c["mode"], k): v for c in result["conditions"] for k, v in c.items() if isinstance(v, float)
    } | {("top1", k): v for k, v in result["top1"].items() if isinstance(v, float)}


@pytest.fixture(scope="module")
def equal_heads(folders):
    return _accept(folders, "target", "draft")


@pytest.mark.parametrize("target,draft", [("target", "draft-640"), ("target-640", "draft")])
def test_spec_accept_compares_the_tokenizers_logits_with_the_figures_of_equal_heads(
    folders, equal_heads, target, draft
):
    notes = []
    padded, padded_cols = _accept(folders, target, draft, notes)
    plain, plain_cols = equal_heads
    assert _figures(padded).keys() == _figures(plain).keys() and len(_figures(plain)) > 10
    for key, value in _figures(plain).items():
        assert _figures(padded)[key] == pytest.approx(value, rel=1e-5, abs=1e-7), key
    assert padded_cols.stats.keys() == plain_cols.stats.keys()
    for condition, stats in plain_cols.stats.items():
        for column, values in stats.items():
            assert np.allclose(padded_cols.stats[condition][column], values, rtol=1e-5, atol=1e-6), column
    wide = {"target": 640, "other": 512} if target == "target-640" else {"target": 512, "other": 640}
    assert padded["provenance"]["draft"]["logits_compared"] == {**wide, "compared": 512}
    assert "logits_compared" not in plain["provenance"]["draft"]
    assert len(notes) == 1 and "compared over the tokenizer's 512 tokens" in notes[0]


def test_distill_over_padded_heads_gives_the_terms_of_equal_heads(folders):
    def run(student):
        settings = ModelSettings(str(folders["target"]), "cpu", "float32")
        text, windows = TextSettings(folders["text"], max_tokens=100), WindowSettings(48)
        ds = DraftSettings(model=str(folders[student]), role="student")
        return distill.distill(settings, text, windows, ds, (2.0,), 0.5)[1]

    padded, plain = run("draft-640"), run("draft")
    assert padded.terms[2.0].keys() == plain.terms[2.0].keys() and "kl" in plain.terms[2.0]
    for column, values in plain.terms[2.0].items():
        assert np.allclose(padded.terms[2.0][column], values, rtol=1e-5, atol=1e-6), column


def test_speculative_sampling_over_padded_heads_draws_the_same_tokens(folders):
    target = load_model(str(folders["target"]), CPU, torch.float32)
    prompt = torch.tensor(target.tokenizer("def f(x):\n    return").input_ids)
    runs = []
    for draft in ("draft", "draft-640"):
        d = build_draft(target, DraftSettings(model=str(folders[draft])), CPU, torch.float32)
        runs.append(speculative_sample(target.model, d, prompt, 3, 24, 1.0, torch.Generator().manual_seed(0)))
    assert runs[0].tokens == runs[1].tokens and max(runs[1].tokens) < 512
    assert runs[0].accepted == runs[1].accepted


def test_a_head_narrower_than_the_tokenizer_is_refused(folders):
    target = load_model(str(folders["target"]), CPU, torch.float32)
    with pytest.raises(UsageError, match="fewer than the tokenizer's 512 tokens"):
        build_draft(target, DraftSettings(model=str(folders["draft-500"])), CPU, torch.float32)

"""A stored run's text read again by the protocol that scored it (``protocols.reread_text``): what a gate's
calibration holds its chunks out of. Every protocol gives back the very text it scored (same SHA-256), changed
as its ``load`` changes it (llama.cpp's stripped newline, GPTQ's joined rows, lm-eval's documents); a changed or
missing source gives None."""

from __future__ import annotations

import json

import pytest

from infoeval.errors import DataError
from infoeval.input.documents import documents_spec
from infoeval.input.protocols import REGISTRY, registered, reread_text
from infoeval.input.settings import TextSettings


def _has_wikitext() -> bool:
    """WikiText-2 where infoeval looks for it (--data-dir, INFOEVAL_DATA_DIR, ../shared/data)."""
    from infoeval.input.text import load_text

    try:
        load_text(dataset="wikitext-2")
    except DataError:
        return False
    return True


needs_wikitext = pytest.mark.skipif(not _has_wikitext(), reason="WikiText-2 not available")


@pytest.fixture
def text_file(tmp_path):
    p = tmp_path / "t.txt"
    p.write_text("One line.\n = Heading = \n\nAnother @-@ line.\n", encoding="utf-8")
    return p


def _loaded(protocol: str, settings: TextSettings):
    text, _ = registered(protocol).load(settings)
    return text


@pytest.mark.parametrize("protocol", list(REGISTRY))
def test_every_protocol_rereads_the_text_it_scored(protocol, text_file):
    text = _loaded(protocol, TextSettings(text=text_file))
    again = reread_text(text.provenance(), protocol)
    assert again is not None and again.text == text.text and again.transform == text.transform
    text_file.write_text("changed\n", encoding="utf-8")  # the source changed: not the text that was scored
    assert reread_text(text.provenance(), protocol) is None


def test_llamacpps_stripped_newline_is_redone_and_needed(text_file):
    text = _loaded("llama.cpp", TextSettings(text=text_file))
    assert text.transform and not text.text.endswith("\n")
    assert reread_text(text.provenance(), "llama.cpp").text == text.text
    assert reread_text(text.provenance(), "rolling") is None  # read as rolling reads it: not the scored text


def test_jsonl_documents_are_reread_with_their_field(tmp_path):
    p = tmp_path / "d.jsonl"
    p.write_text("\n".join(json.dumps({"body": b, "text": "x"}) for b in ("first doc", "second doc")), encoding="utf-8")
    text = _loaded("lm-eval", TextSettings(text=None, documents=str(p), document_field="body"))
    assert documents_spec(text.provenance()) == (str(p.resolve()), "body")
    again = reread_text(text.provenance(), "lm-eval")
    assert again is not None and again.text == "first docsecond doc" == text.text


@needs_wikitext
@pytest.mark.parametrize(
    ("protocol", "documents"), [("gptq", None), ("lm-eval", "articles"), ("lm-eval", None), ("rolling", None)]
)
def test_wikitext_is_reread_as_each_protocol_changed_it(protocol, documents):
    text = _loaded(protocol, TextSettings(dataset="wikitext-2", documents=documents))
    again = reread_text(text.provenance(), protocol)
    assert again is not None and again.sha256 == text.sha256 and again.transform == text.transform


def test_unknown_or_unreadable_gives_none_and_registered_says_what_it_knows(text_file):
    text = _loaded("rolling", TextSettings(text=text_file))
    assert reread_text(text.provenance(), "no-such-protocol") is None
    assert reread_text({**text.provenance(), "path": str(text_file) + ".gone"}, "rolling") is None
    assert reread_text({"source": "no-such-dataset", "sha256": "0"}, "gptq") is None
    with pytest.raises(DataError, match="unknown window protocol 'x'.*knows rolling, llama.cpp, lm-eval, gptq"):
        registered("x")


@pytest.mark.parametrize("protocol", ["rolling", "llama.cpp", "gptq"])
def test_the_gate_holds_out_every_byte_the_references_windows_read(protocol, tiny_llama_dir, tiny_text, tmp_path):
    """The gate's calibration starts after the bytes the reference's windows read, context included: what
    quantize-compare holds out on the same text (its stream's bytes), not only the scored tokens' bytes (short by
    llama.cpp's first halves and GPTQ's first tokens)."""
    import torch

    from infoeval.gating.candidate import bytes_read
    from infoeval.gating.gate import build_reference
    from infoeval.gating.reference_file import read_reference
    from infoeval.input.prepare import Reporter, prepare
    from infoeval.input.settings import ModelSettings, WindowSettings

    (tmp_path / "t.txt").write_text(tiny_text * 4, encoding="utf-8")
    settings = (
        ModelSettings(str(tiny_llama_dir), "cpu", "float32"),
        TextSettings(text=tmp_path / "t.txt", max_tokens=300),
        WindowSettings(ctx=32, protocol=protocol),
    )
    build_reference(*settings, tmp_path / "r.safetensors", top_k=4, tail_samples=4, seed=0)
    ref = read_reference(tmp_path / "r.safetensors")
    p = prepare(*settings, Reporter())
    text = reread_text(ref.meta["provenance"]["text"], protocol)
    assert torch.equal(ref.stream_ids, p.stream.ids.to(ref.stream_ids.dtype))
    held = bytes_read(ref, text, p.loaded.tokenizer)
    assert held == int(p.stream.nbytes.sum()) >= int(ref.nbytes.sum())
    if protocol != "rolling":  # context that is read but not scored
        assert held > int(ref.nbytes.sum())

"""infoeval.input.tokens and infoeval.input.text.

tokens.encode is checked with small offline tokenizers trained here (no download):
* byte-level BPE without offset trimming — each token's bytes are known exactly (GPT-2 byte↔unicode map), so the
  byte count before token i must be the true byte offset of token i rounded down to a character boundary
  (a token that starts inside a multibyte character cannot own part of it);
* byte-level BPE with GPT-2-style trimmed offsets and a Llama-style Metaspace + byte-fallback BPE — there the
  per-token attribution differs, but the bytes must still partition the text: Σ nbytes = len(text.encode()).
"""

from __future__ import annotations

import hashlib
import random

import numpy as np
import pytest
import torch

from infoeval.errors import DataError, UsageError
from infoeval.input.text import (
    DATA_DIR_ENV,
    Text,
    load_text,
    python_docs,
    read_text_file,
    strip_one_trailing_newline,
)
from infoeval.input.tokens import TokenStream, encode, truncate

tokenizers = pytest.importorskip("tokenizers")
transformers = pytest.importorskip("transformers")
from tokenizers import decoders, models, normalizers, pre_tokenizers, processors, trainers  # noqa: E402

CORPUS = [
    "The quick brown fox jumps over the lazy dog.  " * 20,
    "café naïve résumé 日本語のテキスト 😀👍🏽 Ünïcödé " * 5,
    "def f(x):\n    return x  # comment\n\n" * 10,
]

TEXTS = [
    "hello world",
    "The quick brown fox jumps over the lazy dog.",
    "  leading and trailing  ",
    "a  b\n\n\nc\t\td",
    "café 日本語 😀👍🏽!",
    "\n",
    " ",
    "   ",
    "😀",
    "x😀y",
    "日本語のテキスト",
    "e\u0301 combining",
    "line\r\nwindows\r\n",
    "\u00a0nbsp\u3000ideographic space",
    "def f(x):\n    return x  # comment\n\n",
    "\n\n  \t mixed \n whitespace \n\n",
    "family: 👨\u200d👩\u200d👧 flag: 🇫🇷",
]


def _random_texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    alphabet = list("abcxyz ABC.,") + [" ", "  ", "\n", "\t", "é", "ß", "日", "本", "😀", "👍🏽", "\u200d", "ℝ", "\r\n"]
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 80))) for _ in range(n)]


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte → printable character map used by ByteLevel pre-tokenizers."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


BYTE_DECODER = {c: b for b, c in _bytes_to_unicode().items()}


def _byte_level(trim_post: bool):
    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False)
    if trim_post:
        tok.post_processor = processors.ByteLevel(trim_offsets=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=350,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<bos>"],
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer)
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>")


def _metaspace_byte_fallback():
    tok = tokenizers.Tokenizer(models.BPE(byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<s>"] + [f"<0x{i:02X}>" for i in range(256)],
        initial_alphabet=["▁"] + list("abcdefghijklmnopqrstuvwxyz"),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer)
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>")


@pytest.fixture(scope="module")
def byte_level():
    return _byte_level(trim_post=False)


@pytest.fixture(scope="module", params=["byte-level", "byte-level-trimmed", "metaspace-byte-fallback"])
def any_tokenizer(request, byte_level):
    if request.param == "byte-level":
        return byte_level
    if request.param == "byte-level-trimmed":
        return _byte_level(trim_post=True)
    return _metaspace_byte_fallback()


def _char_boundaries(text: str) -> list[int]:
    out, pos = [0], 0
    for ch in text:
        pos += len(ch.encode("utf-8"))
        out.append(pos)
    return out


# ------------------------------------------------------------------------------------------------ encode


@pytest.mark.parametrize("text", TEXTS + _random_texts(25, seed=0))
def test_nbytes_sum_to_utf8_length(text, any_tokenizer):
    """Σ nbytes = len(text.encode('utf-8')) exactly, every nbytes ≥ 0, ids equal the tokenizer's own."""
    s = encode(text, any_tokenizer)
    assert int(s.nbytes.sum()) == len(text.encode("utf-8"))
    assert (s.nbytes >= 0).all()
    assert s.ids.dtype == torch.int64 and s.nbytes.dtype == np.int64
    assert s.ids.tolist() == any_tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(s) == s.ids.shape[0] == s.nbytes.shape[0]
    assert s.prefix_id is None


@pytest.mark.parametrize("text", TEXTS + _random_texts(25, seed=1))
def test_nbytes_match_token_bytes_rounded_to_characters(text, byte_level):
    """Byte-level BPE, untrimmed offsets: bytes before token i = true byte offset of token i (from the tokens'
    own bytes) rounded down to the start of the character it falls in."""
    s = encode(text, byte_level)
    pieces = [bytes(BYTE_DECODER[c] for c in t) for t in byte_level.convert_ids_to_tokens(s.ids.tolist())]
    assert b"".join(pieces) == text.encode("utf-8")  # the tokenizer is lossless
    boundaries = _char_boundaries(text)
    true_start = np.concatenate([[0], np.cumsum([len(p) for p in pieces])])[:-1]
    expected = [max(b for b in boundaries if b <= t) for t in true_start]
    got = np.concatenate([[0], np.cumsum(s.nbytes)])[:-1]
    assert got.tolist() == expected
    if text.isascii():  # no multibyte characters: every token owns exactly its own bytes
        assert s.nbytes.tolist() == [len(p) for p in pieces]


def test_trimmed_offsets_still_partition(any_tokenizer):
    """Whitespace-only tokens whose trimmed offsets are empty or go backwards still leave Σ nbytes exact."""
    text = "  The quick   brown fox  \n\n    return x  \n"
    s = encode(text, any_tokenizer)
    assert int(s.nbytes.sum()) == len(text.encode())
    assert (s.nbytes >= 0).all()


class _FakeFast:
    """A 'fast' tokenizer returning hand-written offsets (character offsets, as HF fast tokenizers do)."""

    is_fast = True

    def __init__(self, offsets):
        self.offsets = offsets

    def __call__(self, text, **kwargs):
        return {"input_ids": list(range(len(self.offsets))), "offset_mapping": self.offsets}


def test_offsets_going_backwards_and_trimmed_first_token():
    """Trimmed offsets may start after 0 and go backwards; starts are made monotone and the first is 0:
    text 'ab  cdé' (é = 2 bytes, 8 bytes), offsets (2,3) (5,5) (4,6) (6,7) → starts 0, 5, 5, 6 → 5, 0, 1, 2."""
    text = "ab  cdé"
    s = encode(text, _FakeFast([(2, 3), (5, 5), (4, 6), (6, 7)]))
    assert s.nbytes.tolist() == [5, 0, 1, 2]
    assert int(s.nbytes.sum()) == len(text.encode()) == 8


def test_offsets_inside_multibyte_characters():
    """Three byte tokens of one 4-byte emoji all report the character's span: the last one owns its 4 bytes."""
    text = "x😀y"
    s = encode(text, _FakeFast([(0, 1), (1, 2), (1, 2), (1, 2), (2, 3)]))
    assert s.nbytes.tolist() == [1, 0, 0, 4, 1]


def test_prefix_token_has_zero_bytes(byte_level):
    """prefix_id goes first with 0 bytes; the rest is the unprefixed stream unchanged."""
    text = "café 日本語 😀 fox"
    plain = encode(text, byte_level)
    bos = byte_level.bos_token_id
    s = encode(text, byte_level, prefix_id=bos)
    assert s.prefix_id == bos
    assert s.ids[0].item() == bos and s.nbytes[0] == 0
    assert torch.equal(s.ids[1:], plain.ids)
    assert np.array_equal(s.nbytes[1:], plain.nbytes)
    assert int(s.nbytes.sum()) == len(text.encode())


def test_truncate(byte_level):
    """truncate keeps the first n ids and their nbytes, and the prefix id; n ≥ len keeps everything."""
    s = encode("The quick brown fox jumps over the lazy dog.", byte_level, prefix_id=byte_level.bos_token_id)
    t = truncate(s, 5)
    assert len(t) == 5
    assert torch.equal(t.ids, s.ids[:5]) and np.array_equal(t.nbytes, s.nbytes[:5])
    assert t.prefix_id == s.prefix_id
    full = truncate(s, 10**6)
    assert torch.equal(full.ids, s.ids) and np.array_equal(full.nbytes, s.nbytes)


def _long_text(seed: int, n_chars: int) -> str:
    rng = random.Random(seed)
    words = ["the", "quick", "brown", "fox", "  ", "\n\n", "日本", "😀", "über", "a" * 40, "    indented", "\t", "x.y"]
    out, size = [], 0
    while size < n_chars:
        w = rng.choice(words)
        out.append(w + rng.choice([" ", "", "\n"]))
        size += len(out[-1])
    return "".join(out)


@pytest.mark.parametrize("n", [1, 2, 17, 300, 1000, 4000])
@pytest.mark.parametrize("prefix", [None, "bos"])
def test_prefix_only_tokenization_equals_whole(n, prefix, any_tokenizer):
    """encode(..., max_tokens=n) tokenizes only a prefix of the text yet gives exactly the first n ids and byte
    counts of the whole-text tokenization (the last one included, whose bytes end where token n + 1 starts)."""
    text = _long_text(n, 60_000)
    pid = any_tokenizer.bos_token_id if prefix else None
    whole = encode(text, any_tokenizer, pid)
    k = n + (pid is not None)
    part = encode(text, any_tokenizer, pid, max_tokens=n)
    assert part.prefix_id == pid and len(part) == k
    assert torch.equal(part.ids, whole.ids[:k])
    assert np.array_equal(part.nbytes, whole.nbytes[:k])


def test_prefix_only_tokenization_short_text(byte_level):
    """More tokens asked for than the text has: the whole text, nothing invented."""
    text = "a short text of a few tokens"
    whole = encode(text, byte_level)
    part = encode(text, byte_level, max_tokens=10_000)
    assert torch.equal(part.ids, whole.ids) and np.array_equal(part.nbytes, whole.nbytes)


def test_prefix_only_tokenization_falls_back_when_cut_changes_ids(byte_level, monkeypatch):
    """When cutting at two points disagrees on the kept ids, the whole text is tokenized instead."""
    import infoeval.input.tokens as tokens_mod

    text = _long_text(3, 20_000)
    whole = encode(text, byte_level)
    real = tokens_mod._tokenize
    calls = []

    def flaky(t, tok):
        ids, starts = real(t, tok)
        calls.append(len(t))
        if len(t) < len(text) and len(calls) % 2 == 0:  # the second, longer cut disagrees
            ids = ids.copy()
            ids[0] = (ids[0] + 1) % 50
        return ids, starts

    monkeypatch.setattr(tokens_mod, "_tokenize", flaky)
    part = encode(text, byte_level, max_tokens=100)
    assert calls[-1] == len(text)  # fell back to the whole text
    assert torch.equal(part.ids, whole.ids[:100]) and np.array_equal(part.nbytes, whole.nbytes[:100])


def test_empty_text_is_data_error(byte_level):
    """An empty text has no tokens: DataError, one line."""
    with pytest.raises(DataError) as e:
        encode("", byte_level)
    assert "\n" not in str(e.value)


def test_slow_tokenizer_rejected():
    """A tokenizer without offsets (is_fast false or missing) is a DataError, not a wrong byte count."""

    class Slow:
        is_fast = False

    with pytest.raises(DataError, match="fast"):
        encode("hello", Slow())
    with pytest.raises(DataError, match="fast"):
        encode("hello", object())


def test_tokenstream_len():
    """len() is the number of ids."""
    s = TokenStream(torch.arange(4), np.ones(4, dtype=np.int64), None)
    assert len(s) == 4


# -------------------------------------------------------------------------------------------------- text


def test_python_docs_is_sorted_join_of_pydoc_topics():
    """python-docs = the pydoc_data topics in sorted key order joined by one blank line."""
    from pydoc_data import topics

    expected = "\n\n".join(topics.topics[k] for k in sorted(topics.topics))
    assert python_docs() == expected
    t = load_text()
    assert t.text == expected and t.source == "python-docs" and t.path is None
    assert load_text(dataset="PYTHON-DOCS").text == expected


def test_read_text_file_roundtrip(tmp_path):
    """UTF-8 bytes are decoded as-is: CRLF and trailing newlines kept, multibyte characters intact."""
    raw = "héllo\r\nwörld 日本 😀\n\n".encode()
    p = tmp_path / "a.txt"
    p.write_bytes(raw)
    assert read_text_file(p).encode("utf-8") == raw
    t = load_text(text_path=p)
    assert t.source == "file" and t.path == str(p.resolve())
    assert t.n_bytes == len(raw)
    assert t.sha256 == hashlib.sha256(raw).hexdigest()
    assert t.provenance() == {
        "source": "file",
        "path": str(p.resolve()),
        "sha256": t.sha256,
        "bytes": len(raw),
        "source_sha256": t.sha256,
        "transform": None,
    }
    stripped = strip_one_trailing_newline(t)
    assert stripped.provenance()["source_sha256"] == hashlib.sha256(raw).hexdigest() != stripped.sha256
    assert "newline" in stripped.provenance()["transform"]


def test_read_text_file_errors(tmp_path):
    """Missing file, a folder, and non-UTF-8 bytes are DataErrors with one-line messages."""
    bad = tmp_path / "latin1.txt"
    bad.write_bytes(b"abc\xe9def")
    cases = [(tmp_path / "missing.txt", "does not exist"), (tmp_path, "folder"), (bad, "offset 3")]
    for path, fragment in cases:
        with pytest.raises(DataError) as e:
            load_text(text_path=path)
        assert fragment in str(e.value)
        assert "\n" not in str(e.value)


def test_text_and_dataset_together_is_usage_error(tmp_path):
    """--text and --dataset are mutually exclusive."""
    p = tmp_path / "a.txt"
    p.write_text("x")
    with pytest.raises(UsageError):
        load_text(text_path=p, dataset="wikitext-2")


def test_unknown_dataset_is_usage_error():
    """An unknown dataset name lists the allowed ones."""
    with pytest.raises(UsageError) as e:
        load_text(dataset="wikitext-103")
    assert "wikitext-2" in str(e.value) and "python-docs" in str(e.value)
    assert "\n" not in str(e.value)


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """No env var and a working directory with no ../shared/data or shared/data next to it."""
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    work = tmp_path / "cwd" / "inner"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    return tmp_path


def _fake_wiki(folder, content: str, nested: bool = True):
    d = folder / "wikitext-2-raw" if nested else folder
    d.mkdir(parents=True, exist_ok=True)
    (d / "wiki.test.raw").write_text(content, encoding="utf-8")
    return d / "wiki.test.raw"


def test_dataset_via_data_dir(isolated):
    """--data-dir DIR finds DIR/wikitext-2-raw/wiki.test.raw, and also DIR/wiki.test.raw directly."""
    p = _fake_wiki(isolated / "data", " = Fake = \n")
    t = load_text(dataset="wikitext-2", data_dir=isolated / "data")
    assert (t.text, t.source, t.path) == (" = Fake = \n", "wikitext-2", str(p.resolve()))
    flat = _fake_wiki(isolated / "flat", "flat\n", nested=False)
    t = load_text(dataset="WikiText-2", data_dir=isolated / "flat")
    assert (t.text, t.source, t.path) == ("flat\n", "wikitext-2", str(flat.resolve()))


def test_dataset_via_env_var(isolated, monkeypatch):
    """INFOEVAL_DATA_DIR is searched; an explicit data_dir takes precedence over it."""
    _fake_wiki(isolated / "env", "from env\n")
    _fake_wiki(isolated / "arg", "from arg\n")
    monkeypatch.setenv(DATA_DIR_ENV, str(isolated / "env"))
    assert load_text(dataset="wikitext-2").text == "from env\n"
    assert load_text(dataset="wikitext-2", data_dir=isolated / "arg").text == "from arg\n"
    # a data_dir without the file falls through to the env var
    assert load_text(dataset="wikitext-2", data_dir=isolated / "empty").text == "from env\n"


def test_dataset_not_found_is_data_error(isolated):
    """Nowhere to be found → DataError naming the file and how to point at it."""
    with pytest.raises(DataError) as e:
        load_text(dataset="wikitext-2", data_dir=isolated / "nothing")
    msg = str(e.value)
    assert "wikitext-2-raw/wiki.test.raw" in msg and DATA_DIR_ENV in msg and "\n" not in msg


def test_dataset_found_next_to_checkout(isolated):
    """The development layout: <cwd>/../shared/data is searched."""
    _fake_wiki(isolated / "cwd" / "shared" / "data", "sibling\n")
    assert load_text(dataset="wikitext-2").text == "sibling\n"


# the shared corpora (see shared/data/README.md): bytes and sha256 of the files as published
REAL_DATASETS = {
    "wikitext-2": (1_290_590, "173c87a53759e0201f33e0ccf978e510c2042d7f2cb78229d9a50d79b9e7dd08"),
    "wikitext-2-valid": (1_146_846, "4cd0f6876d07a413aa911261ff6d363c72d757d47f0fdd6015702014c89cb9c7"),
    "tinyshakespeare": (1_115_394, "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"),
}


@pytest.mark.parametrize("dataset", list(REAL_DATASETS))
def test_real_dataset_read_byte_for_byte(dataset, monkeypatch):
    """The shared corpus, found the way a user running infoeval from the checkout finds it ($INFOEVAL_DATA_DIR,
    else ../shared/data beside the checkout), loads byte for byte; skipped where it is not present."""
    from pathlib import Path

    monkeypatch.chdir(Path(__file__).resolve().parents[1])  # the repository root, where users run infoeval
    try:
        t = load_text(dataset=dataset)
    except DataError:
        pytest.skip(f"{dataset} is not present (set {DATA_DIR_ENV} or put shared/data beside the checkout)")
    raw = Path(t.path).read_bytes()
    assert t.source == dataset and Path(t.path).is_absolute()
    assert t.text.encode("utf-8") == raw
    assert (t.n_bytes, t.sha256) == REAL_DATASETS[dataset] == (len(raw), hashlib.sha256(raw).hexdigest())


@pytest.mark.parametrize(
    "before,after",
    [("a\n\n", "a\n"), ("a\n", "a"), ("a", "a"), ("", ""), ("\n", ""), ("a\r\n", "a\r"), ("a\n ", "a\n ")],
)
def test_strip_one_trailing_newline(before, after):
    """Exactly one trailing '\\n' is dropped (as llama.cpp does with a prompt file); source and path kept."""
    t = Text(before, "file", "/x")
    out = strip_one_trailing_newline(t)
    assert out.text == after
    assert (out.source, out.path) == ("file", "/x")
    if before == after:
        assert out is t


def _same_tokenizer(a, b, text: str) -> None:
    assert type(a) is type(b) and len(a) == len(b)
    assert a(text).input_ids == b(text).input_ids
    assert {k: str(v) for k, v in a.added_tokens_decoder.items()} == {
        k: str(v) for k, v in b.added_tokens_decoder.items()
    }
    assert [
        (t.content, t.special, t.normalized, t.lstrip, t.rstrip, t.single_word) for t in a.added_tokens_decoder.values()
    ] == [
        (t.content, t.special, t.normalized, t.lstrip, t.rstrip, t.single_word) for t in b.added_tokens_decoder.values()
    ]
    assert (a.bos_token_id, a.eos_token_id, a.pad_token_id, a.all_special_tokens) == (
        b.bos_token_id,
        b.eos_token_id,
        b.pad_token_id,
        b.all_special_tokens,
    )


@pytest.mark.parametrize("bos", [True, False])
def test_listed_added_tokens_give_the_same_tokenizer(tmp_path, bos):
    """model_files.list_added_tokens (GGUF conversion caches): the same tokenizer, loaded without transformers
    parsing tokenizer.json in Python."""
    import json
    import shutil

    from tiny_models import build_tokenizer, tiny_text
    from transformers import AutoTokenizer

    from infoeval.models.files import list_added_tokens

    build_tokenizer(tmp_path / "plain", bos=bos)
    shutil.copytree(tmp_path / "plain", tmp_path / "listed")
    list_added_tokens(tmp_path / "listed")
    config = json.loads((tmp_path / "listed" / "tokenizer_config.json").read_text())
    added = json.loads((tmp_path / "listed" / "tokenizer.json").read_text())["added_tokens"]
    assert sorted(map(int, config["added_tokens_decoder"])) == sorted(t["id"] for t in added) and added
    before = (tmp_path / "listed" / "tokenizer_config.json").read_text()
    list_added_tokens(tmp_path / "listed")  # a second call leaves the file as it is
    assert (tmp_path / "listed" / "tokenizer_config.json").read_text() == before
    text = tiny_text() + " <bos> <eos> <|endoftext|> <pad>"
    _same_tokenizer(
        AutoTokenizer.from_pretrained(tmp_path / "plain"), AutoTokenizer.from_pretrained(tmp_path / "listed"), text
    )


@pytest.mark.slow
def test_listed_added_tokens_smollm2(tmp_path):
    """The same on the built-in SmolLM2's converted tokenizer (49,152 tokens, 17 added)."""
    import json
    import shutil

    from transformers import AutoTokenizer

    from infoeval.input.text import python_docs
    from infoeval.models.files import list_added_tokens, local_checkpoint

    folder = local_checkpoint("smollm2-135m")
    if folder is None:
        pytest.skip("the built-in SmolLM2 is not installed or not converted yet")
    for name in ("plain", "listed"):
        (tmp_path / name).mkdir()
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(folder / f, tmp_path / name / f)
    config = json.loads((tmp_path / "plain" / "tokenizer_config.json").read_text())
    config.pop("added_tokens_decoder", None)
    (tmp_path / "plain" / "tokenizer_config.json").write_text(json.dumps(config))
    list_added_tokens(tmp_path / "listed")
    text = python_docs()[:100_000] + " <|im_start|>user hi<|im_end|> <|endoftext|>"
    _same_tokenizer(
        AutoTokenizer.from_pretrained(tmp_path / "plain"), AutoTokenizer.from_pretrained(tmp_path / "listed"), text
    )

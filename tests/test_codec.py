"""compress / decompress on the tiny offline models: byte-identical round trips, sizes near Σ −log₂ q, and the
refusals (exit 2) and failures (exit 3) that leave nothing written."""

from __future__ import annotations

import json
import shutil
import sys

import pytest

from infoeval import cli
from infoeval.codec import container, environment
from infoeval.codec.compress import CodecSettings, compress, decompress, small_file_note

pytestmark = pytest.mark.usefixtures("one_thread")

SAMPLES = {
    "ascii": None,  # the tiny text
    "utf8": "naïve café — Grüße, 日本語のテキスト, Ελληνικά, emoji 😀🎉 and math ∑∫√ ≤ ≥.\n" * 6,
    "whitespace": "def f():\n" + " " * 700 + "x\n" + "\n" * 300 + "\t" * 120 + "end  \r\n  \n",
    "one-token": "a",
    "empty": "",
}


def _settings(model, **kw) -> CodecSettings:
    return CodecSettings(**{"model": str(model), "ctx": 48, "group": 3, **kw})


def _round_trip(tmp_path, model, raw: bytes, **kw):
    src, packed, out = tmp_path / "in.txt", tmp_path / "in.iez", tmp_path / "out.txt"
    src.write_bytes(raw)
    result = compress(src, packed, _settings(model, **kw)).to_json()
    decompress(packed, out)
    assert out.read_bytes() == raw
    return result, packed


@pytest.mark.parametrize("name", list(SAMPLES))
def test_round_trip_is_byte_identical(name, tiny_llama_dir, tiny_text, tmp_path):
    raw = (SAMPLES[name] if SAMPLES[name] is not None else tiny_text).encode("utf-8")
    result, packed = _round_trip(tmp_path, tiny_llama_dir, raw)
    assert result["mode"] == "model" and result["output"]["bytes"] == packed.stat().st_size
    if name == "one-token":
        assert result["layout"]["tokens"] == 1
    if raw:
        o = result["overhead"]
        assert o["quantisation_bits"] <= o["quantisation_bound_bits"]  # (it can be negative: counts of 1 round up)
        assert o["coder_bits"] < 10 * result["layout"]["groups"]  # at most about a byte of ending per stream


def test_sizes_match_the_ideal_and_the_streams(tiny_llama_dir, tiny_text, tmp_path):
    result, packed = _round_trip(tmp_path, tiny_llama_dir, tiny_text.encode(), verify=False)
    bits = result["bits"]
    archive, _ = container.unpack(packed.read_bytes())
    assert bits["payload"] == 8 * sum(map(len, archive.streams)) and bits["file"] == 8 * packed.stat().st_size
    groups = result["layout"]["groups"]
    assert bits["payload"] < bits["code"] + 10 * groups < 1.001 * bits["ideal"] + 10 * groups  # ≲ a byte per stream
    assert result["throughput"]["decompress"] is None and result["throughput"]["compress"]["tokens_per_s"] > 0
    assert {r["method"] for r in result["compressors"]} == {"xz -9", "zstd -19"}
    assert set(environment.CHECKED) <= set(archive.header["exactness"])
    assert len(archive.streams) == -(-len(archive.lengths()) // 3)


def test_qwen3_round_trip(tiny_qwen3_dir, tiny_text, tmp_path):
    """No BOS token: the segments start after EOS."""
    result, _ = _round_trip(tmp_path, tiny_qwen3_dir, tiny_text[:1500].encode(), group=4)
    assert result["layout"]["start_id"] == 0


def test_a_file_the_tokenizer_cannot_give_back_is_stored_with_xz(tiny_llama_dir, tmp_path):
    raw = b"valid text, then bytes that are not UTF-8: " + bytes([0xFF, 0xFE, 0x80, 0x00, 0xC3]) + b" end"
    result, _ = _round_trip(tmp_path, tiny_llama_dir, raw)
    assert result["mode"] == "xz" and "not UTF-8" in result["reason"]


# ---- through the command line: exit codes, one line, nothing written ----------------------------------------
def _main(monkeypatch, capsys, *args) -> tuple[int, list[str]]:
    monkeypatch.delenv("INFOEVAL_DEBUG", raising=False)
    monkeypatch.setattr(sys, "argv", ["infoeval", *map(str, args)])
    code = cli.main()
    return code, [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("infoeval:")]


def _cli(monkeypatch, capsys, *args) -> list[str]:
    monkeypatch.setattr(sys, "argv", ["infoeval", *map(str, args)])
    code = cli.main()
    assert code == 0, capsys.readouterr().err
    return capsys.readouterr().out.splitlines()


@pytest.fixture
def packed(tiny_llama_dir, tiny_text, tmp_path, monkeypatch, capsys):
    (tmp_path / "in.txt").write_text(tiny_text[:1200], encoding="utf-8")
    _cli(
        monkeypatch,
        capsys,
        "compress",
        tmp_path / "in.txt",
        "-o",
        tmp_path / "in.iez",
        "-m",
        tiny_llama_dir,
        "--ctx",
        "40",
        "--group",
        "2",
        "-q",
        "--json",
        tmp_path / "c.json",
    )
    return tmp_path / "in.iez"


def test_cli_round_trip_prints_the_report(packed, tmp_path, monkeypatch, capsys):
    data = json.loads((tmp_path / "c.json").read_text())
    assert data["schema"] == "infoeval/compress/4" and data["provenance"]["model"]["kind"] == "folder"
    out = _cli(monkeypatch, capsys, "decompress", packed, "-o", tmp_path / "back.txt", "-q")
    assert (tmp_path / "back.txt").read_bytes() == (tmp_path / "in.txt").read_bytes()
    assert any("sha256" in line and "checked" in line for line in out)


def test_flipped_payload_byte_exits_3_and_writes_nothing(packed, tmp_path, monkeypatch, capsys):
    blob = bytearray(packed.read_bytes())
    blob[-3] ^= 0x10
    packed.write_bytes(bytes(blob))
    code, lines = _main(monkeypatch, capsys, "decompress", packed, "-o", tmp_path / "back.txt", "-q")
    assert code == 3 and len(lines) == 1 and "damaged" in lines[0] and "segment" in lines[0], lines
    assert not (tmp_path / "back.txt").exists() and not list(tmp_path.glob(".back.txt*"))


@pytest.mark.parametrize("cut", [5, 20, -40, -1])
def test_truncated_file_exits_2(packed, tmp_path, monkeypatch, capsys, cut):
    packed.write_bytes(packed.read_bytes()[:cut])
    code, lines = _main(monkeypatch, capsys, "decompress", packed, "-o", tmp_path / "back.txt", "-q")
    assert code == 2 and len(lines) == 1 and "truncated" in lines[0], lines
    assert not (tmp_path / "back.txt").exists()


def test_another_model_exits_2_unless_forced(packed, tiny_qwen3_dir, tmp_path, monkeypatch, capsys):
    code, lines = _main(
        monkeypatch, capsys, "decompress", packed, "-o", tmp_path / "back.txt", "-m", tiny_qwen3_dir, "-q"
    )
    assert code == 2 and len(lines) == 1 and "model_sha256" in lines[0] and "tokenizer" in lines[0], lines
    code, lines = _main(
        monkeypatch, capsys, "decompress", packed, "-o", tmp_path / "back.txt", "-m", tiny_qwen3_dir, "-q", "--force"
    )
    assert code == 3 and len(lines) == 1, lines  # forced: the checksums catch the wrong tokens
    assert not (tmp_path / "back.txt").exists()


def test_another_tokenizer_exits_2_and_forced_is_caught(packed, tiny_llama_dir, tmp_path, monkeypatch, capsys):
    other = shutil.copytree(tiny_llama_dir, tmp_path / "other-tokenizer")
    spec = json.loads((other / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = spec["model"]["vocab"]
    a, b = sorted(vocab, key=vocab.get)[300:302]  # two ordinary tokens swap ids: same weights, other text
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (other / "tokenizer.json").write_text(json.dumps(spec), encoding="utf-8")
    code, lines = _main(monkeypatch, capsys, "decompress", packed, "-o", tmp_path / "back.txt", "-m", other, "-q")
    assert code == 2 and "tokenizer" in lines[0] and "model_sha256" not in lines[0], lines
    code, lines = _main(
        monkeypatch, capsys, "decompress", packed, "-o", tmp_path / "back.txt", "-m", other, "-q", "--force"
    )
    assert code == 3 and "sha256" in lines[0], lines
    assert not (tmp_path / "back.txt").exists()


def test_existing_output_needs_force(packed, tiny_llama_dir, tmp_path, monkeypatch, capsys):
    (tmp_path / "back.txt").write_text("keep me")
    code, lines = _main(monkeypatch, capsys, "decompress", packed, "-o", tmp_path / "back.txt", "-q")
    assert code == 2 and "--force" in lines[0] and (tmp_path / "back.txt").read_text() == "keep me"
    code, lines = _main(monkeypatch, capsys, "compress", tmp_path / "in.txt", "-o", packed, "-m", tiny_llama_dir, "-q")
    assert code == 2 and "exists" in lines[0]
    _cli(monkeypatch, capsys, "decompress", packed, "-o", tmp_path / "back.txt", "-q", "--force")
    assert (tmp_path / "back.txt").read_bytes() == (tmp_path / "in.txt").read_bytes()


def test_refused_fallback_and_bad_input_exit_2(tiny_llama_dir, tmp_path, monkeypatch, capsys):
    (tmp_path / "bin").write_bytes(b"\xff\xfe\xfd")
    out = _cli(monkeypatch, capsys, "compress", tmp_path / "bin", "-o", tmp_path / "xz.iez", "-m", tiny_llama_dir, "-q")
    assert any("stored with xz" in line for line in out) and (tmp_path / "xz.iez").exists()
    code, lines = _main(
        monkeypatch,
        capsys,
        "compress",
        tmp_path / "bin",
        "-o",
        tmp_path / "b.iez",
        "-m",
        tiny_llama_dir,
        "--fallback",
        "refuse",
        "-q",
    )
    assert code == 2 and "not UTF-8" in lines[0] and not (tmp_path / "b.iez").exists()
    code, lines = _main(monkeypatch, capsys, "decompress", tmp_path / "bin", "-o", tmp_path / "x", "-q")
    assert code == 2 and "not an infoeval compressed file" in lines[0]
    code, lines = _main(monkeypatch, capsys, "compress", tmp_path / "missing", "-o", tmp_path / "m.iez", "-q")
    assert code == 2 and "does not exist" in lines[0]


def test_compress_bits_verify_coding_adds_a_measured_row(tiny_llama_dir):
    from infoeval.comparison.compare import compress_bits
    from infoeval.input.settings import ModelSettings, TextSettings, WindowSettings

    model_settings, text_settings, window_settings = (
        ModelSettings(model=str(tiny_llama_dir)),
        TextSettings(max_tokens=300),
        WindowSettings(ctx=64),
    )
    result, _ = compress_bits(model_settings, text_settings, window_settings, verify_coding=True)
    row = next(r for r in result.compressors if r["method"] == "arithmetic-coded")
    assert row["round_trip"] and row["payload_bits"] <= 1.001 * row["ideal_bits"] + 16
    assert row["bits"] == 8 * row["bytes"] and row["tokens"] > 250
    plain, _ = compress_bits(model_settings, text_settings, window_settings)
    assert "arithmetic-coded" not in {r["method"] for r in plain.compressors}


def test_compress_bits_passes_verify_coding(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from infoeval.comparison import compare as pipeline

    seen = []
    monkeypatch.setattr(
        pipeline, "compress_bits", lambda *a, **kw: seen.append(kw) or (_ for _ in ()).throw(KeyboardInterrupt)
    )
    monkeypatch.chdir(tmp_path)
    for args, expected in ((["--verify-coding"], True), ([], False)):
        CliRunner().invoke(cli.app, ["compress-bits", "m", *args])
        assert seen[-1]["verify_coding"] is expected


def test_the_step_cache_gives_the_plain_caches_logits(tiny_llama_dir):
    import torch

    from infoeval import engine
    from infoeval.codec.cache import step_cache
    from infoeval.models import load_model

    model = load_model(str(tiny_llama_dir), torch.device("cpu"), torch.float32).model
    plain, buffered = engine.new_cache(model), step_cache(model, 6)
    ids = torch.randint(3, 500, (3, 6), generator=torch.Generator().manual_seed(0))
    for t in range(6):
        assert torch.equal(engine.step_logits(model, plain, ids[:, t]), engine.step_logits(model, buffered, ids[:, t]))
    assert buffered.get_seq_length() == 6
    with pytest.raises(ValueError, match="holds 6 positions"):
        engine.step_logits(model, buffered, ids[:, 0])


def test_a_file_under_16_kb_is_told_why_it_codes_poorly(tiny_llama_dir, tiny_text, tmp_path, monkeypatch):
    from infoeval.codec import compress as codec_compress
    from infoeval.input.prepare import Reporter

    assert codec_compress.SMALL == 16 << 10

    class Notes(Reporter):
        def __init__(self):
            self.lines = []

        def note(self, text: str) -> None:
            self.lines.append(text)

    raw = (tiny_text * 20).encode("utf-8")
    notes = {}
    monkeypatch.setattr(codec_compress, "SMALL", 2500)  # 16 KB in use: a bound that a tiny test reaches fast
    for n in (2000, 2500):
        (tmp_path / f"{n}.txt").write_bytes(raw[:n])
        notes[n] = Notes()
        compress(tmp_path / f"{n}.txt", tmp_path / f"{n}.iez", _settings(tiny_llama_dir, verify=False), False, notes[n])
    blob = (tmp_path / "2000.iez").read_bytes()
    archive, _ = container.unpack(blob)
    header, segments = len(blob) - sum(map(len, archive.streams)), len(archive.lengths())
    assert notes[2000].lines == [small_file_note(2000, header, segments)] and notes[2500].lines == []
    line = notes[2000].lines[0]
    assert line.startswith(f"a 2,000-byte file codes poorly: its {header:,}-byte header weighs on the ratio")
    assert f" {segments} segment" in line and "--ctx" in line


@pytest.mark.parametrize("native", [True, False])
def test_auto_dtype_is_bfloat16_where_native_and_decompress_uses_the_files(
    native, tiny_llama_dir, tiny_text, tmp_path, monkeypatch
):
    """--dtype auto codes in bfloat16 where the device computes it natively, else in float32; the file records the
    dtype it was coded in and decompress loads the model in that dtype (whatever auto would pick there)."""
    import torch

    from infoeval.codec import compress as codec_compress

    monkeypatch.setattr(codec_compress, "native_bfloat16", lambda device: native)
    want = "bfloat16" if native else "float32"
    assert codec_compress.codec_dtype("auto", torch.device("cpu")) == getattr(torch, want)
    assert codec_compress.codec_dtype("float16", torch.device("cpu")) == torch.float16  # a named dtype as given
    assert CodecSettings().dtype == "auto"
    result, packed = _round_trip(tmp_path, tiny_llama_dir, tiny_text[:900].encode(), verify=False)
    archive, _ = container.unpack(packed.read_bytes())
    assert archive.header["exactness"]["dtype"] == want
    monkeypatch.setattr(codec_compress, "native_bfloat16", lambda device: not native)  # decompress does not ask
    out = tmp_path / "again.txt"
    assert json.loads(json.dumps(decompress(packed, out).to_json()))["output"]["bytes"] == 900
    assert out.read_bytes() == tiny_text[:900].encode()

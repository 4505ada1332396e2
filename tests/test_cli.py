"""The command line through its entry point, ``infoeval.cli.main`` (the error boundary that turns errors into one
line and an exit code), run in this process (``cli_run.py``: what a subprocess would give, without importing torch
again for each run; tests/test_cli_smoke.py runs each command in a subprocess). Each run starts when a test first
asks for it."""

from __future__ import annotations

import bz2
import gzip
import hashlib
import json
import lzma
import math
import os
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
import zstandard
from cli_jobs import JobPool, declared_jobs
from cli_run import run_cli
from safetensors.torch import load_file

from infoeval import __version__
from infoeval.comparison.frames import CSV_COLUMNS
from infoeval.quant.primitives import fake_quantize
from infoeval.quant.schemes import parse_scheme

SCHEMES = ["int8-channel", "int4-g32"]
CTX = 64
# No HF_HUB_OFFLINE here: a path that looks like a hub id ("models/x") must fail fast with one line on a machine
# that cannot reach the hub (infoeval checks the cache, then whether the hub answers, before huggingface_hub's
# retries could start).
ENV = {k: v for k, v in os.environ.items() if k not in ("INFOEVAL_DEBUG", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
TIMEOUT = 300


def _infoeval(args, cwd: Path, env=None):
    return run_cli(args, cwd=cwd, env=env or ENV)


def _strict_json(path: Path):
    """Parse JSON refusing NaN/Infinity, which strict parsers reject."""

    def refuse(token):
        raise ValueError(f"{path.name} holds {token}")

    return json.loads(path.read_text(encoding="utf-8"), parse_constant=refuse)


def _listing(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


# ------------------------------------------------------------------------------------------ the runs
ERROR_CASES = {
    # name: (extra args (placeholders filled in below), substring of the one-line message)
    "missing-text": (["--text", "{cwd}/no-such-file.txt"], "does not exist"),
    "non-utf8": (["--text", "{cwd}/latin1.txt"], "not UTF-8"),
    "unknown-scheme": (["--schemes", "int8-channel,int4-chanel"], "did you mean 'int4-channel'"),
    "int9": (["--schemes", "int9-channel"], "9 bits"),
    "group-2": (["--schemes", "int4-g2"], "group size 2"),
    "bf16-group": (["--schemes", "int8-channel,bf16-g128"], "allowed: bf16, fp16 alone"),
    "floor-value": (["--floor", "some"], "--floor 'some' is not allowed; give one of sampled, full, off"),
    "ctx-1": (["--ctx", "1"], "--ctx 1"),
    "stride-gt-ctx": (["--ctx", "16", "--stride", "17"], "--stride 17"),
    "llamacpp-too-short": (["--protocol", "llama.cpp", "--ctx", "64", "--text", "{cwd}/short.txt"], "llama.cpp"),
    "not-causal": (["--model", "{not_causal}"], "not a causal language model"),
    "no-such-model-dir": (["--model", "{cwd}/no-such-model"], "no-such-model"),
    "no-such-hub-like-path": (["--model", "models/no-such-model"], "no-such-model"),
    "cuda-absent": (["--device", "cuda"], "CUDA"),
    "include-nothing": (["--include", "nosuchlayer*"], "nosuchlayer*"),
}
# the case that fails last (after loading, tokenizing and windowing: while quantizing), also with explicit outputs
LATE_CASES = ["include-nothing"]


@pytest.fixture(scope="module")
def cli_runs(request, tmp_path_factory, tiny_llama_dir, not_causal_dir, tiny_text):
    """The subprocess runs of this module, 3 at a time: those the selected tests mark with ``cli_jobs`` start at
    once, any other when a test first waits for it (see cli_jobs.py)."""
    root = tmp_path_factory.mktemp("cli")
    text = root / "tiny.txt"
    text.write_bytes(tiny_text.encode("utf-8"))
    base = ["--model", tiny_llama_dir, "--text", text, "--ctx", CTX, "--schemes", ",".join(SCHEMES)]
    jobs: dict[str, tuple[list, Path, dict | None]] = {}

    def job(name, args, env=None):
        cwd = root / name
        cwd.mkdir(exist_ok=True)
        jobs[name] = (list(args), cwd, env)

    out = root / "explicit" / "out"
    job(
        "explicit",
        ["quantize-compare", *base, "--csv", out / "s.csv", "--json", out / "r.json", "--positions", out / "p.csv"],
    )
    job("default-folder", ["quantize-compare", *base, "--max-tokens", "100", "-q"])
    job("run-name", ["quantize-compare", *base, "--max-tokens", "100", "--run-name", "my-run", "-q"])
    job(
        "compress-bits",
        [
            "compress-bits",
            "--model",
            tiny_llama_dir,
            "--text",
            text,
            "--ctx",
            CTX,
            "--json",
            root / "compress-bits" / "cb.json",
        ],
    )
    job("help", ["--help"])
    job("help-quantize-compare", ["quantize-compare", "--help"])
    job("debug", ["quantize-compare", *base, "--schemes", "int4-chanel"], ENV | {"INFOEVAL_DEBUG": "1"})
    for name, (extra, _) in ERROR_CASES.items():
        if name == "cuda-absent" and torch.cuda.is_available():
            continue  # the test is skipped; do not run a whole job on the GPU for nothing
        for explicit in [False, True] if name in LATE_CASES else [False]:
            case = f"error-{name}" + ("-explicit" if explicit else "")
            cwd = root / case
            args = ["quantize-compare", *base, *[a.format(cwd=cwd, not_causal=not_causal_dir) for a in extra]]
            if explicit:
                args += ["--csv", cwd / "s.csv", "--json", cwd / "r.json", "--positions", cwd / "p.csv"]
            job(case, args)
            (cwd / "latin1.txt").write_bytes("café au lait\n".encode("latin-1"))
            (cwd / "short.txt").write_text("Only a few words here.\n", encoding="utf-8")
    before = {name: _listing(cwd) for name, (_, cwd, _) in jobs.items()}
    declared = declared_jobs(request) & jobs.keys()  # error-cuda-absent has no job where CUDA is present (skipped)
    pool = JobPool(lambda name: _infoeval(*jobs[name]), jobs, declared, workers=0)
    yield {"text": text, "jobs": jobs, "before": before, "pool": pool}
    pool.shutdown()


def _get(cli_runs, name):
    return cli_runs["pool"].result(name), cli_runs["jobs"][name][1], cli_runs["before"][name]


# ------------------------------------------------------------------------------------- successful runs
@pytest.fixture(scope="module")
def explicit(cli_runs):
    proc, cwd, _ = _get(cli_runs, "explicit")
    assert proc.returncode == 0, proc.stderr
    out = cwd / "out"
    return {
        "proc": proc,
        "cwd": cwd,
        "csv": pd.read_csv(out / "s.csv"),
        "json": _strict_json(out / "r.json"),
        "positions": pd.read_csv(out / "p.csv"),
        "text": cli_runs["text"],
    }


@pytest.mark.cli_jobs("explicit")
def test_explicit_outputs_written_and_nothing_else(explicit):
    cwd = explicit["cwd"]
    assert _listing(cwd) == {"out", "out/s.csv", "out/r.json", "out/p.csv"}  # no results/ folder, no temp files
    umask = os.umask(0o022)
    os.umask(umask)
    modes = {oct((cwd / f).stat().st_mode & 0o777) for f in ("out/s.csv", "out/r.json", "out/p.csv")}
    assert modes == {oct(0o666 & ~umask)}  # what a plain open() gives, not the temporary file's 0o600
    assert "Reference" in explicit["proc"].stdout
    assert all(s in explicit["proc"].stdout for s in SCHEMES)
    assert "Traceback" not in explicit["proc"].stderr


@pytest.mark.cli_jobs("explicit")
def test_summary_csv_columns_and_rows(explicit):
    csv, res = explicit["csv"], explicit["json"]
    assert list(csv.columns) == CSV_COLUMNS
    assert csv["variant"].tolist() == ["reference", *SCHEMES, "floor"]
    floor, m = csv.iloc[-1], res["floor"]["metrics"]  # the noise floor's row: its KL and top-1 on its positions
    assert floor["tokens"] == m["positions"] and floor["kl_mean"] == pytest.approx(m["kl_mean"], rel=1e-12)
    assert floor["top1"] == pytest.approx(1 - m["top1_disagree"], rel=1e-12) and pd.isna(floor["ppl"])
    for i, v in enumerate(res["variants"], start=1):  # each variant against the floor
        assert csv["x_floor"].iloc[i] == pytest.approx(res["floor"]["variants"][v["name"]]["x_floor"], rel=1e-12)
        assert bool(csv["at_floor"].iloc[i]) == res["floor"]["variants"][v["name"]]["at_floor"]
    csv = csv.iloc[:-1]
    n = res["reference"]["tokens"]
    assert csv["tokens"].tolist() == [n] * 3
    assert csv["bytes"].tolist() == [len(explicit["text"].read_bytes())] * 3
    assert csv["bits"].isna().tolist() == [True, False, False] and csv["bits"].tolist()[1:] == [8, 4]
    assert csv["group_size"].isna().tolist() == [True, True, False] and csv["group_size"].iloc[2] == 32
    for i, v in enumerate(res["variants"], start=1):  # 14 decoder Linears; the head (and the embeddings) skipped
        layers = v["quantization"]["layers"]
        assert csv["layers_quantized"].iloc[i] == 14 == sum(r["action"] == "quantized" for r in layers)
        assert csv["layers_skipped"].iloc[i] == len(layers) - 14 >= 1
    assert csv["ppl"].iloc[0] == pytest.approx(res["reference"]["ppl"], rel=1e-12)
    for i, v in enumerate(res["variants"], start=1):
        for col in ("ppl", "kl_mean", "kl_p99", "top1", "top1_se", "ln_ppl_ratio", "bits_per_byte_delta", "tv_mean"):
            assert csv[col].iloc[i] == pytest.approx(v["metrics"][col], rel=1e-12), col
        assert csv["sqnr_db_min"].iloc[i] == pytest.approx(v["quantization"]["sqnr_db_min"], rel=1e-12)
    assert csv["kl_mean"].iloc[1] < csv["kl_mean"].iloc[2]  # int8 < int4


def _weights_digest(folder: Path) -> str:
    """sha256 over the folder's weight files: each file's name, then its content's sha256 (hex)."""
    h = hashlib.sha256()
    for f in sorted(p for p in folder.iterdir() if p.suffix in (".safetensors", ".bin")):
        h.update(f.name.encode())
        h.update(hashlib.sha256(f.read_bytes()).hexdigest().encode())
    return h.hexdigest()


@pytest.mark.cli_jobs("explicit")
def test_json_provenance(explicit, tiny_llama_dir):
    pv = explicit["json"]["provenance"]
    data = explicit["text"].read_bytes()
    assert pv["command"] == "quantize-compare"
    assert pv["model"]["kind"] == "folder"
    assert pv["model"]["path"] == str(Path(tiny_llama_dir).resolve())
    assert pv["model"]["sha256"] == _weights_digest(Path(tiny_llama_dir))
    assert pv["model"]["architecture"] == "LlamaForCausalLM"
    assert pv["text"]["sha256"] == hashlib.sha256(data).hexdigest()
    assert pv["text"]["bytes"] == len(data) and pv["text"]["source"] == "file"
    assert pv["text"]["path"] == str(explicit["text"].resolve())
    pr = pv["protocol"]
    assert (pr["name"], pr["ctx"], pr["stride"], pr["prefix"]) == ("rolling", CTX, CTX, "auto")
    assert pr["scored_tokens"] == explicit["json"]["reference"]["tokens"] == pr["stream_tokens"] - 1
    assert pv["dtype"] == "float32" and pv["device"] == "cpu"
    assert pv["versions"]["torch"] == torch.__version__ and pv["versions"]["infoeval"] == __version__
    assert pv["versions"]["python"] == ".".join(map(str, sys.version_info[:3]))
    assert all(pv["versions"][k] for k in ("transformers", "numpy", "pandas", "safetensors"))


@pytest.mark.cli_jobs("explicit")
def test_json_per_layer_report_with_sqnr(explicit, tiny_llama_dir):
    """Every Linear layer listed once; decoder layers quantized with SQNR = 10 log10(Σw²/Σ(w−ŵ)²); lm_head and
    anything else listed (the embeddings) skipped."""
    weights = load_file(str(Path(tiny_llama_dir) / "model.safetensors"))
    linears = {k[: -len(".weight")] for k, w in weights.items() if w.dim() == 2 and "embed_tokens" not in k}
    if "lm_head" not in linears:  # a checkpoint may store a tied head only once
        linears.add("lm_head")
    assert len(linears) == 15
    for v in explicit["json"]["variants"]:
        layers = {r["name"]: r for r in v["quantization"]["layers"]}
        assert len(layers) == len(v["quantization"]["layers"])  # each layer once
        assert linears <= set(layers) <= linears | {"model.embed_tokens"}
        for name in set(layers) - (linears - {"lm_head"}):
            assert layers[name]["action"] == "skipped" and layers[name]["sqnr_db"] is None, name
        scheme = parse_scheme(v["name"])
        for name in sorted(linears - {"lm_head"}):
            r = layers[name]
            w = weights[name + ".weight"]
            err = (w.double() - fake_quantize(w, scheme).double()).pow(2).sum()
            expected = 10 * math.log10(float(w.double().pow(2).sum() / err))
            assert r["action"] == "quantized" and r["shape"] == list(w.shape)
            assert r["sqnr_db"] == pytest.approx(expected, rel=1e-6), name
        sq = [layers[n]["sqnr_db"] for n in linears - {"lm_head"}]
        assert v["quantization"]["sqnr_db_min"] == pytest.approx(min(sq))
        assert min(sq) > (40 if scheme.bits == 8 else 18)  # about 6 dB per bit


@pytest.mark.cli_jobs("explicit")
def test_positions_csv(explicit):
    pos, res = explicit["positions"], explicit["json"]
    n = res["reference"]["tokens"]
    assert len(pos) == n * len(SCHEMES)
    expected_cols = {
        "window",
        "position",
        "token_id",
        "context",
        "bytes",
        "variant",
        "nll_ref",
        "entropy_ref",
        "p_top1_ref",
        "nll",
        "entropy",
        "kl",
        "rkl",
        "tv",
        "top1_match",
        "dp",
    }
    assert set(pos.columns) == expected_cols
    for v in res["variants"]:
        f = pos[pos["variant"] == v["name"]]
        assert f["position"].tolist() == list(range(1, n + 1))
        assert math.exp(f["nll_ref"].mean()) == pytest.approx(res["reference"]["ppl"], rel=1e-6)
        assert f["kl"].mean() == pytest.approx(v["metrics"]["kl_mean"], rel=1e-5)
        assert f["top1_match"].mean() == pytest.approx(v["metrics"]["top1"], rel=1e-12)
        assert int(f["bytes"].sum()) == res["reference"]["bytes"]


@pytest.mark.slow
@pytest.mark.cli_jobs("default-folder")
def test_default_output_folder(cli_runs):
    proc, cwd, _ = _get(cli_runs, "default-folder")
    assert proc.returncode == 0, proc.stderr
    folders = list((cwd / "results").iterdir())
    assert len(folders) == 1 and folders[0].name.startswith("quantize-compare-")
    assert _listing(folders[0]) == {"result.json", "summary.csv", "positions.csv"}
    res = _strict_json(folders[0] / "result.json")
    assert res["reference"]["tokens"] == 100
    assert len(pd.read_csv(folders[0] / "summary.csv")) == 1 + len(SCHEMES) + 1  # the reference, the schemes, the floor
    assert len(pd.read_csv(folders[0] / "positions.csv")) == 100 * len(SCHEMES)


@pytest.mark.slow
@pytest.mark.cli_jobs("run-name")
def test_run_name(cli_runs):
    proc, cwd, _ = _get(cli_runs, "run-name")
    assert proc.returncode == 0, proc.stderr
    assert [p.name for p in (cwd / "results").iterdir()] == ["my-run"]
    assert _listing(cwd / "results" / "my-run") == {"result.json", "summary.csv", "positions.csv"}


@pytest.mark.slow
@pytest.mark.cli_jobs("compress-bits")
def test_compress_bits_prints_compressor_table(cli_runs):
    proc, cwd, _ = _get(cli_runs, "compress-bits")
    assert proc.returncode == 0, proc.stderr
    data = cli_runs["text"].read_bytes()
    sizes = {
        "gzip -9": len(gzip.compress(data, compresslevel=9, mtime=0)),
        "bz2 -9": len(bz2.compress(data, compresslevel=9)),
        "xz -9": len(lzma.compress(data, format=lzma.FORMAT_XZ, preset=9)),
        "zstd -19": len(zstandard.ZstdCompressor(level=19).compress(data)),
    }
    lines = proc.stdout.splitlines()
    for method, size in sizes.items():
        row = next(line for line in lines if method in line)
        assert f"{8 * size:,}" in row, (method, row)
    assert any("utf-8" in line and f"{8 * len(data):,}" in line for line in lines)
    assert "model bits / xz bits" in proc.stdout
    res = _strict_json(cwd / "cb.json")
    assert {r["method"]: r["bytes"] for r in res["compressors"]} == {"utf-8": len(data), **sizes}
    assert res["reference"]["bytes"] == len(data)
    assert res["model_over_xz"] == pytest.approx(res["reference"]["total_bits"] / (8 * sizes["xz -9"]))
    assert _listing(cwd) == {"cb.json"}  # no summary CSV, no results/ folder


@pytest.mark.cli_jobs("help", "help-quantize-compare")
def test_help(cli_runs):
    proc, _, _ = _get(cli_runs, "help")
    assert proc.returncode == 0, proc.stderr
    assert "quantize-compare" in proc.stdout and "compress-bits" in proc.stdout
    proc, _, _ = _get(cli_runs, "help-quantize-compare")
    assert proc.returncode == 0, proc.stderr
    assert "--schemes" in proc.stdout and "--protocol" in proc.stdout


# ------------------------------------------------------------------------------------------- errors
ERROR_IDS = [f"error-{n}" for n in ERROR_CASES] + [f"error-{n}-explicit" for n in LATE_CASES]
FAST_ERROR_IDS = {
    "error-missing-text",
    "error-unknown-scheme",
    "error-bf16-group",
    "error-floor-value",
}  # refused before the model loads; the rest are slow
ERROR_PARAMS = [
    pytest.param(c, marks=[pytest.mark.cli_jobs(c), *([] if c in FAST_ERROR_IDS else [pytest.mark.slow])])
    for c in ERROR_IDS
]


@pytest.mark.parametrize("case", ERROR_PARAMS)
def test_bad_input_exits_2_with_one_line(cli_runs, case):
    if "cuda-absent" in case and torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    proc, cwd, before = _get(cli_runs, case)
    name = case.removeprefix("error-").removesuffix("-explicit")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("infoeval: error: ")
    assert ERROR_CASES[name][1] in lines[0]
    assert "Traceback" not in proc.stderr
    assert proc.stdout.strip() == ""
    assert _listing(cwd) == before  # no output file, no results/ folder, no temporary file


@pytest.mark.slow
@pytest.mark.cli_jobs("debug")
def test_debug_shows_traceback(cli_runs):
    proc, cwd, before = _get(cli_runs, "debug")
    assert proc.returncode != 0
    assert "Traceback (most recent call last)" in proc.stderr
    assert "SchemeError" in proc.stderr and "int4-chanel" in proc.stderr
    assert _listing(cwd) == before


@pytest.mark.cli_jobs("explicit")
def test_numbers_are_json_numbers(explicit):
    """The JSON parsed without NaN/Infinity (see _strict_json); standard errors are finite with n > 1."""
    res = explicit["json"]
    assert math.isfinite(res["reference"]["ppl_se"])
    assert all(math.isfinite(v["metrics"][k]) for v in res["variants"] for k in ("kl_se", "ln_ppl_ratio_se", "top1_se"))

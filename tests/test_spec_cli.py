"""spec-accept, spec-decode, distill and temperature run the way a user runs them (``python -m infoeval`` in a
subprocess), on the tiny Llama: outputs, exit codes and one-line errors. Runs start together in a small pool."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pandas as pd
import pytest
from cli_jobs import JobPool, declared_jobs
from cli_run import run_cli

from infoeval.speculative.accept import POSITION_COLUMNS
from infoeval.speculative.results import ACCEPT_COLUMNS, DECODE_COLUMNS

# one thread per run: three runs share the cores, and tiny models gain nothing from a second thread (OpenMP
# threads that wait on a busy core made a tiny-model run 30× slower here)
ENV = {k: v for k, v in os.environ.items() if k not in ("INFOEVAL_DEBUG",)} | {
    "HF_HUB_OFFLINE": "1",
    "OMP_NUM_THREADS": "1",
}


def _infoeval(args, cwd: Path):
    return run_cli(args, cwd=cwd, env=ENV, threads=1)


def _strict_json(path: Path):
    def refuse(token):
        raise ValueError(f"{path.name} holds {token}")

    return json.loads(path.read_text(encoding="utf-8"), parse_constant=refuse)


PLOT_AVAILABLE = (
    importlib.util.find_spec("infoeval.output.plots") is not None and importlib.util.find_spec("matplotlib") is not None
)

# errors found after the model is loaded: run in a subprocess like everything above
ERRORS = {
    # name: (args, substring of the one-line message)
    "layers-too-many": (["spec-accept", "{m}", "--text", "{t}", "--draft-layers", "5"], "--draft-layers 5"),
    "other-tokenizer": (["spec-accept", "{m}", "--text", "{t}", "--draft", "{q}"], "tokenizer"),
    "student-layers": (["distill", "{m}", "--text", "{t}", "--student-layers", "9"], "--student-layers 9"),
}
# option errors found before anything is loaded: through the same entry point (infoeval.cli.main), in-process
EARLY_ERRORS = {
    "no-draft": (["spec-accept", "{m}", "--text", "{t}"], "exactly one of --draft"),
    "two-drafts": (["spec-accept", "{m}", "--draft-layers", "1", "--draft-scheme", "int4-g32"], "exactly one"),
    "layers-zero": (["spec-accept", "{m}", "--draft-layers", "0"], "--draft-layers 0"),
    "bad-temperature": (["spec-accept", "{m}", "--draft-layers", "1", "--temperature", "0"], "--temperature 0"),
    "bad-scheme": (["spec-accept", "{m}", "--draft-scheme", "int4-chanel"], "int4-channel"),
    "target-twice": (["spec-accept", "{m}", "--model", "{q}", "--draft-layers", "1"], "given twice"),
    "alpha": (["distill", "{m}", "--student-layers", "1", "--alpha", "2"], "--alpha 2"),
    "no-student": (["distill", "{m}"], "--student"),
    "gamma": (["spec-decode", "{m}", "--draft-layers", "1", "--gamma", "0"], "--gamma 0"),
    "verify-few": (["spec-decode", "{m}", "--draft-layers", "1", "--verify", "5"], "--verify 5"),
    "temperature-nothing": (["temperature"], "either --logits"),
    "temperature-both": (["temperature", "--logits", "1,2", "--model", "{m}"], "either --logits"),
    "temperature-one-logit": (["temperature", "--logits", "3"], "--logits"),
    "temperature-labels": (["temperature", "--logits", "1,2", "--labels", "a"], "--labels"),
    "temperature-no-prompt": (["temperature", "--model", "{m}"], "--prompt"),
    "temperature-bad-T": (["temperature", "--logits", "1,2", "--T", "1,-2"], "--temperature -2"),
}
EARLY_ERRORS["plot-type"] = (["spec-accept", "{m}", "--draft-layers", "1", "--plot", "a.txt"], "--plot 'a.txt'")
if not PLOT_AVAILABLE:
    EARLY_ERRORS["plot-unavailable"] = (["spec-accept", "{m}", "--draft-layers", "1", "--plot", "a.png"], "matplotlib")


@pytest.fixture(scope="module")
def runs(request, tmp_path_factory, tiny_llama_dir, tiny_qwen3_dir, tiny_text):
    """name → (job, cwd); the jobs of the selected tests (``cli_jobs`` marks) start at once, 3 at a time, any other
    when a test first waits for it (see cli_jobs.py)."""
    root = tmp_path_factory.mktemp("spec-cli")
    text = root / "tiny.txt"
    text.write_text(tiny_text, encoding="utf-8")
    m, base = tiny_llama_dir, ["--text", text, "--ctx", 32, "--max-tokens", 96]
    jobs: dict[str, list] = {
        "accept": [
            "spec-accept",
            m,
            "--draft-layers",
            1,
            *base,
            "--temperature",
            "1,2",
            "--csv",
            "o/s.csv",
            "--json",
            "o/r.json",
            "--positions",
            "o/p.csv",
            *(["--plot", "o/a.png"] if PLOT_AVAILABLE else []),
        ],
        "accept-config": ["spec-accept", "--config", "cfg.toml", *base, "--run-name", "mine", "-q"],
        "decode": [
            "spec-decode",
            m,
            "--draft-scheme",
            "int4-g32",
            "--prompt",
            "The dictionary",
            "--max-new-tokens",
            12,
            "--gamma",
            3,
            "--verify",
            300,
            "--out-dir",
            "o",
            "-q",
        ],
        "distill": [
            "distill",
            m,
            "--student-scheme",
            "int3-g32",
            *base,
            "--T",
            "1,4",
            "--alpha",
            0.25,
            "--json",
            "o/r.json",
            "--csv",
            "o/s.csv",
        ],
        "temperature": [
            "temperature",
            "--logits",
            "9.1,6.2,4.6,3.3",
            "--labels",
            "cat,lion,lynx,dog",
            "--T",
            "1,4",
            "--json",
            "o/r.json",
            "--csv",
            "o/s.csv",
        ],
        "temperature-model": [
            "temperature",
            "--model",
            m,
            "--prompt",
            "The dictionary",
            "--top",
            3,
            "--json",
            "o/r.json",
        ],
        "help": ["--help"],
    }
    for name, (args, _) in ERRORS.items():
        jobs[f"error-{name}"] = [a.format(m=m, t=text, q=tiny_qwen3_dir) if isinstance(a, str) else a for a in args]
    for name in jobs:
        (root / name).mkdir()
    (root / "accept-config" / "cfg.toml").write_text(
        f'[spec-accept]\nmodel = "{m}"\ndraft-scheme = "int8-channel"\ntemperature = "0.5,1"\n', encoding="utf-8"
    )
    pool = JobPool(lambda name: _infoeval(jobs[name], root / name), jobs, declared_jobs(request), workers=0)
    yield {name: (pool.lazy(name), root / name) for name in jobs}
    pool.shutdown()


def _ok(runs, name):
    future, cwd = runs[name]
    proc = future.result()
    assert proc.returncode == 0, proc.stderr
    return proc, cwd


@pytest.mark.slow
@pytest.mark.cli_jobs("accept")
def test_spec_accept_outputs(runs):
    proc, cwd = _ok(runs, "accept")
    result = _strict_json(cwd / "o" / "r.json")
    assert result["schema"] == "infoeval/spec-accept/4" and result["provenance"]["draft"]["layers"] == 1
    assert {"model", "text", "protocol", "dtype", "device", "versions", "argv"} <= set(result["provenance"])
    summary = pd.read_csv(cwd / "o" / "s.csv")
    assert list(summary.columns) == ACCEPT_COLUMNS and summary["mode"].tolist() == ["both", "both", "target"]
    positions = pd.read_csv(cwd / "o" / "p.csv")
    assert list(positions.columns) == POSITION_COLUMNS and len(positions) == 96 * 3
    assert (positions["beta"] - (1 - positions["tv"])).abs().max() < 1e-5
    assert "Pinsker" in proc.stdout and "quartile" in proc.stdout and "E(γ)" in proc.stdout
    assert not (cwd / "results").exists()  # explicit outputs only
    if PLOT_AVAILABLE:
        assert (cwd / "o" / "a.png").stat().st_size > 0


@pytest.mark.slow
@pytest.mark.cli_jobs("accept-config")
def test_spec_accept_config_and_default_folder(runs):
    _, cwd = _ok(runs, "accept-config")
    folder = cwd / "results" / "mine"
    assert sorted(p.name for p in folder.iterdir()) == ["positions.csv", "result.json", "summary.csv"]
    result = _strict_json(folder / "result.json")
    assert result["provenance"]["draft"]["scheme"] == "int8-channel" and result["temperatures"] == [0.5, 1.0]


@pytest.mark.slow
@pytest.mark.cli_jobs("decode")
def test_spec_decode_outputs(runs):
    proc, cwd = _ok(runs, "decode")
    result = _strict_json(cwd / "o" / "result.json")
    assert result["speculative"]["new_tokens"] == result["plain"]["new_tokens"] == 12
    assert [r["sampler"] for r in result["verify"]["rows"]] == ["target", "speculative γ=1", "speculative γ=3", "draft"]
    for row in result["verify"]["rows"]:  # 300 samples fill several cells: every test has a p-value
        for vs in ("vs_target", "vs_draft"):
            t = row[vs]
            assert isinstance(t["p_value"], float) and 0 < t["p_value"] <= 1, (row["sampler"], vs, t)
            assert t["df"] == t["cells"] - 1 >= 1 and t["stat"] >= 0, (row["sampler"], vs, t)
    assert list(pd.read_csv(cwd / "o" / "summary.csv").columns) == DECODE_COLUMNS
    rounds = pd.read_csv(cwd / "o" / "positions.csv")
    assert list(rounds.columns) == ["round", "proposed", "accepted", "emitted"] and rounds["emitted"].sum() >= 12
    assert "speed-up" in proc.stdout and "Theorem 1" in proc.stdout


@pytest.mark.slow
@pytest.mark.cli_jobs("distill")
def test_distill_outputs(runs):
    proc, cwd = _ok(runs, "distill")
    result = _strict_json(cwd / "o" / "r.json")
    assert [r["temperature"] for r in result["rows"]] == [1.0, 4.0] and result["alpha"] == 0.25
    s = pd.read_csv(cwd / "o" / "s.csv")
    assert (s["loss"] - (0.25 * s["hard_ce"] + 0.75 * s["t2_kl"])).abs().max() < 1e-6
    assert "T²" in proc.stdout


@pytest.mark.cli_jobs("temperature", "temperature-model")
def test_temperature_outputs(runs):
    proc, cwd = _ok(runs, "temperature")
    result = _strict_json(cwd / "o" / "r.json")
    assert round(result["rows"][0]["probs"][0], 4) == 0.9353
    assert list(pd.read_csv(cwd / "o" / "s.csv").columns)[:3] == ["temperature", "p(cat)", "p(lion)"]
    assert "cat" in proc.stdout and "entropy" in proc.stdout
    _, cwd = _ok(runs, "temperature-model")
    assert len(_strict_json(cwd / "o" / "r.json")["labels"]) == 3


@pytest.mark.cli_jobs("help")
def test_help_lists_the_commands(runs):
    proc, _ = _ok(runs, "help")
    for cmd in ("spec-accept", "spec-decode", "distill", "temperature"):
        assert cmd in proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.cli_jobs(f"error-{n}")) for n in ERRORS])
def test_errors_exit_2_with_one_line(runs, name):
    future, cwd = runs[f"error-{name}"]
    proc = future.result()
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("infoeval: error:"), proc.stderr
    assert ERRORS[name][1] in lines[0], lines[0]
    assert "Traceback" not in proc.stderr
    assert not (cwd / "results").exists()


@pytest.mark.parametrize("name", list(EARLY_ERRORS))
def test_option_errors_exit_2_with_one_line(
    name, monkeypatch, capsys, tmp_path, tiny_llama_dir, tiny_qwen3_dir, tiny_text
):
    from infoeval import cli

    text = tmp_path / "t.txt"
    text.write_text(tiny_text, encoding="utf-8")
    args, message = EARLY_ERRORS[name]
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("INFOEVAL_DEBUG", raising=False)
    monkeypatch.setattr(
        sys, "argv", ["infoeval", *[a.format(m=tiny_llama_dir, t=text, q=tiny_qwen3_dir) for a in args]]
    )
    code = cli.main()
    err = capsys.readouterr().err
    assert code == 2, err
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("infoeval: error:") and message in lines[0], err
    assert not (tmp_path / "results").exists()

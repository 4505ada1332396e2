"""Plots: every --plot command writes a non-empty PNG of the expected size; a clear message without matplotlib."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from cli_run import run_cli

from infoeval.errors import UsageError
from infoeval.output import plots

ENV = {k: v for k, v in os.environ.items() if k != "INFOEVAL_DEBUG"}


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from the PNG signature and IHDR chunk."""
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


def assert_plot(path: Path) -> None:
    assert path.is_file() and path.stat().st_size > 20_000, path  # a drawn figure, not an empty canvas
    assert png_size(path) == plots.PNG_SIZE == (1200, 500)


@pytest.fixture(scope="module")
def plot_runs(tmp_path_factory, tiny_llama_dir, tiny_text):
    root = tmp_path_factory.mktemp("plots")
    text = root / "tiny.txt"
    text.write_text(tiny_text, encoding="utf-8")
    fake = root / "no-matplotlib" / "matplotlib"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('matplotlib is hidden by this test')\n")
    model = ["--model", tiny_llama_dir, "--text", text, "-q"]
    jobs = {
        "quantize-compare": (
            [
                "quantize-compare",
                *model,
                "--ctx",
                64,
                "--max-tokens",
                256,
                "--schemes",
                "int8-channel,int4-g32",
                "--json",
                root / "qc.json",
                "--plot",
                root / "qc.png",
            ],
            ENV,
        ),
        "compress-bits": (
            [
                "compress-bits",
                *model,
                "--ctx",
                64,
                "--max-tokens",
                256,
                "--json",
                root / "cb.json",
                "--plot",
                root / "cb.png",
            ],
            ENV,
        ),
        "mutual-info": (
            [
                "mutual-info",
                *model,
                "--lengths",
                "8,16,32",
                "--blocks",
                4,
                "--bootstrap",
                100,
                "--json",
                root / "mi.json",
                "--plot",
                root / "mi.png",
            ],
            ENV,
        ),
        "kl-fit": (["kl-fit", "--steps", 200, "--plot", root / "kl.png"], ENV),
        "missing": (
            ["quantize-compare", *model, "--json", root / "never.json", "--plot", root / "never.png"],
            ENV | {"PYTHONPATH": str(fake.parent)},
        ),
        "bad-suffix": (["kl-fit", "--plot", root / "kl.jpg"], ENV),
    }

    def hidden(args, env):  # a fresh process, where the fake matplotlib on PYTHONPATH hides the real one
        return subprocess.run(
            [sys.executable, "-m", "infoeval", *map(str, args)], capture_output=True, text=True, env=env, timeout=300
        )

    with ThreadPoolExecutor(max_workers=1) as pool:
        missing = pool.submit(hidden, *jobs.pop("missing"))
        done = {
            name: run_cli(args, env=env) for name, (args, env) in jobs.items()
        }  # the others in this process, meanwhile
        yield root, done | {"missing": missing.result()}


@pytest.mark.slow  # the plot_runs fixture: six command-line subprocesses
@pytest.mark.parametrize(
    "name, png",
    [("quantize-compare", "qc.png"), ("compress-bits", "cb.png"), ("mutual-info", "mi.png"), ("kl-fit", "kl.png")],
)
def test_each_plot_command_writes_a_png(plot_runs, name, png):
    root, procs = plot_runs
    assert procs[name].returncode == 0, procs[name].stderr
    assert_plot(root / png)
    assert str(root / png) in procs[name].stderr  # listed with the files written


@pytest.mark.slow
def test_missing_matplotlib_fails_early_in_one_line(plot_runs):
    root, procs = plot_runs
    proc = procs["missing"]
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"infoeval: error: {plots.MISSING}"
    assert not (root / "never.json").exists() and not (root / "never.png").exists()  # checked before the run


@pytest.mark.slow
def test_unsupported_plot_type_is_a_usage_error(plot_runs):
    proc = plot_runs[1]["bad-suffix"]
    assert proc.returncode == 2 and ".png" in proc.stderr and proc.stderr.strip().count("\n") == 0


def test_acceptance_by_entropy(tmp_path):
    rng = np.random.default_rng(0)
    h = rng.gamma(2.0, 1.5, 4000)
    beta = np.clip(1 - 0.08 * h + rng.normal(0, 0.05, h.size), 0, 1)
    plots.plot_acceptance_by_entropy(h, beta, "spec-accept: a test", tmp_path / "acc.png")
    assert_plot(tmp_path / "acc.png")
    plots.plot_acceptance_by_entropy(np.full(3, 2.0), np.array([0.5, 0.6, 0.7]), "all in one bin", tmp_path / "one.svg")
    assert (tmp_path / "one.svg").read_text().lstrip().startswith("<?xml")
    with pytest.raises(UsageError):
        plots.plot_acceptance_by_entropy(h, beta[:-1], "mismatch", tmp_path / "x.png")


def test_missing_matplotlib_message(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(UsageError, match=r"^matplotlib is not installed; pip install 'infoeval\[plot\]'$"):
        plots.require(tmp_path / "x.png")
    with pytest.raises(UsageError, match="matplotlib is not installed"):
        plots.plot_acceptance_by_entropy(np.ones(3), np.ones(3), "t", tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


def test_pure_helpers():
    x, f = plots.ecdf(np.array([3.0, 1.0, 2.0]))
    assert x.tolist() == [1.0, 2.0, 3.0] and f.tolist() == pytest.approx([1 / 3, 2 / 3, 1.0])
    values = np.random.default_rng(1).normal(size=50)
    brute = [values[max(0, i - 7) : i + 1].mean() for i in range(50)]
    np.testing.assert_allclose(plots.rolling_mean(values, 8), brute, rtol=1e-12)

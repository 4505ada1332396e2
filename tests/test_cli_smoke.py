"""One run of each command the way a user starts it: ``python -m infoeval COMMAND`` in a fresh process, so that the
installed entry point (imports, the Typer app, the exit code) is what runs. Every other test of a command's options,
messages and exit codes calls ``infoeval.cli.main`` in-process (``cli_run.py``). Commands whose subprocess run lives
in another module: quantize-compare and compress-bits (test_api_compare.py), mutual-info (test_mutual_info.py) and
kl-fit (test_klfit.py); torchrun runs the data-parallel ones in subprocesses too (test_distributed.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ENV = {k: v for k, v in os.environ.items() if k != "INFOEVAL_DEBUG"} | {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


def _jobs(model: Path, runs: Path, d: Path) -> dict[str, tuple[list, int]]:
    """Each command's arguments and the exit code it must give; gate reads the reference, decompress the .iez."""
    text = ["--text", d / "text.txt", "--ctx", 32, "--max-tokens", 128, "--device", "cpu"]
    return {
        "reference": (["reference", model, *text, "--top-k", 8, "-o", d / "ref.safetensors", "-q"], 0),
        "quantize": (["quantize", model, "--scheme", "int4-g32", "--out", d / "ckpt", "--device", "cpu"], 0),
        "sensitivity": (
            [
                "sensitivity",
                model,
                *text,
                "--by",
                "block",
                "--scheme",
                "int4-g32",
                "--no-proxy",
                "--json",
                d / "sens.json",
                "-q",
            ],
            0,
        ),
        "mix": (
            [
                "mix",
                model,
                *text,
                "--schemes",
                "int4-g32,int8-channel",
                "--budget-bits",
                "int4-g32",
                "--sweep-tokens",
                64,
                "--out-dir",
                d / "mix",
                "-q",
            ],
            0,
        ),
        "spec-accept": (["spec-accept", model, *text, "--draft-layers", 1, "--json", d / "sa.json", "-q"], 0),
        "spec-decode": (
            [
                "spec-decode",
                model,
                "--draft-layers",
                1,
                "--max-new-tokens",
                8,
                "--device",
                "cpu",
                "--json",
                d / "sd.json",
                "-q",
            ],
            0,
        ),
        "distill": (["distill", model, *text, "--student-layers", 1, "--json", d / "distill.json", "-q"], 0),
        "temperature": (["temperature", "--logits", "3,1,0", "--json", d / "temp.json"], 0),
        "compress": (
            [
                "compress",
                d / "text.txt",
                "-o",
                d / "text.iez",
                "--model",
                model,
                "--ctx",
                64,
                "--json",
                d / "compress.json",
                "-q",
            ],
            0,
        ),
        "report": (["report", runs / "qc", runs / "gate", "-o", d / "report.html"], 0),
        "gate": (
            [
                "gate",
                model,
                "--reference",
                d / "ref.safetensors",
                "--scheme",
                "int4-g32",
                "--max-kl-mean",
                1e-9,
                "--json",
                d / "gate.json",
                "-q",
            ],
            1,
        ),  # a failed limit: exit 1
        "decompress": (["decompress", d / "text.iez", "-o", d / "back.txt", "--json", d / "decompress.json", "-q"], 0),
    }


def _run(args: list, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "infoeval", *map(str, args)],
        cwd=cwd,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def smoke(tiny_llama_dir, tiny_text, report_runs, tmp_path_factory):
    d = tmp_path_factory.mktemp("smoke")
    (d / "text.txt").write_text(tiny_text[:3000], encoding="utf-8")
    jobs = _jobs(tiny_llama_dir, report_runs, d)
    later = ("gate", "decompress")  # they read what reference and compress write
    with ThreadPoolExecutor(max_workers=2) as pool:
        first = {name: pool.submit(_run, args, d) for name, (args, _) in jobs.items() if name not in later}
        done = {name: f.result() for name, f in first.items()}
        done |= dict(zip(later, pool.map(lambda name: _run(jobs[name][0], d), later)))
    return d, jobs, done


@pytest.mark.slow  # twelve fresh processes
@pytest.mark.parametrize("command", list(_jobs(Path("m"), Path("r"), Path("d"))))
def test_each_command_runs_from_its_entry_point(smoke, command):
    d, jobs, done = smoke
    proc, expected = done[command], jobs[command][1]
    assert proc.returncode == expected, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    if command == "decompress":
        assert (d / "back.txt").read_bytes() == (d / "text.txt").read_bytes()
    if command == "gate":
        assert json.loads((d / "gate.json").read_text(encoding="utf-8"))["passed"] is False


@pytest.mark.slow  # the same twelve processes
@pytest.mark.parametrize("command", list(_jobs(Path("m"), Path("r"), Path("d"))))
def test_each_commands_piped_tables_are_whole_and_hold_its_json(smoke, command):
    """stdout is a pipe here, as in a CI log: no cell is clipped or cut to "…", and the cells hold the JSON's values
    (the wide-table case itself: ``test_piped_tables.py``)."""
    d, _, done = smoke
    out = done[command].stdout
    cells = _cells(out)
    assert not any(c.endswith("…") for c in cells)
    if command == "sensitivity":
        units = json.loads((d / "sens.json").read_text(encoding="utf-8"))["units"]
        prefix = "model.layers."
        for u in units:
            assert u["unit"].removeprefix(prefix) in cells and f"{u['n_weights']:,}" in cells
    if command == "gate":
        verdicts = json.loads((d / "gate.json").read_text(encoding="utf-8"))["verdicts"]
        for v in verdicts:
            assert v["metric"] in cells and ("PASS" if v["passed"] else "FAIL") in cells


def _cells(stdout: str) -> list[str]:
    """Every cell of every table (boxed or not) in ``stdout``: the stripped pieces of its rows."""
    out = []
    for line in stdout.splitlines():
        if line.startswith(("│", "┃")):
            out += [c.strip() for c in line.strip("│┃ ").replace("┃", "│").split("│")]
        elif line.startswith(" ") and "  " in line.strip():
            out += [c.strip() for c in line.split("  ") if c.strip()]
    return out

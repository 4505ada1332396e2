"""Benchmark results as data: the one helper behind every ``benchmarks/*.py --save``.

    from _record import add_save, emit
    add_save(parser)                      # the --save flag
    emit(__file__, out, args.save)        # prints the JSON as before; with --save also writes the record

With ``--save`` the record goes to ``benchmarks/results/<name>.json`` (``name`` = the script's stem), written
atomically (a temporary file in the same folder, then ``os.replace``). The record holds the figures the script
prints (``figures``) and what they depend on: the command line, the parsed settings, the machine (CPU model,
core count, GPU if any), torch's thread count, package versions, the UTC date and the script's wall seconds.
``scripts/performance_page.py`` turns these files into ``docs/performance.md``.

Only the standard library is imported at module level (torch and infoeval are imported when a record is made), so
importing this module does not disturb what a script measures (``load_time.py`` times its own imports).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
REQUIRED = ("benchmark", "command", "settings", "machine", "torch_threads", "versions", "date", "wall_s", "figures")
MACHINE_KEYS = ("cpu", "cores", "usable_cores", "memory_gib", "gpu", "os")
_STARTED = time.perf_counter()  # about when the script started (it imports this module first)
_HIDDEN = ("save", "child", "work")  # settings that are not settings of the measurement (work: a scratch folder)


def run_child(cmd: list[str], cwd: Path = ROOT, env: dict | None = None) -> tuple[int, float, float, str]:
    """Run ``cmd`` as a fresh process (``env``: its environment, default this one's): its exit code, wall seconds,
    peak RSS in MiB (read from the kernel's accounting of that child, ``os.wait4``, so nothing in the measured
    process is instrumented; the largest of its waited-for children where it has any) and stderr."""
    import subprocess

    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = proc.stderr.read().decode()
    _, status, usage = os.wait4(proc.pid, 0)
    return os.waitstatus_to_exitcode(status), time.perf_counter() - t0, usage.ru_maxrss / 1024, err


VOLATILE = ("timings", "provenance", "memory", "memory_plan", "block_cache", "layers_run_fraction")


def _stable(x):
    if isinstance(x, dict):
        return {k: _stable(v) for k, v in x.items() if not k.endswith("_s") and k not in VOLATILE}
    return [_stable(v) for v in x] if isinstance(x, list) else x


def result_numbers(path: Path) -> str:
    """A result JSON's numbers as one comparable string: without what differs between runs of the same settings
    (timings and every ``*_s``, provenance, memory, the block cache's bookkeeping)."""
    return json.dumps(_stable(json.loads(Path(path).read_text())), sort_keys=True)


def measure_child(cmd: list[str], cwd: Path = ROOT) -> tuple[float, float]:
    """``run_child``'s wall seconds and peak RSS; a failing command ends the benchmark with its stderr."""
    code, wall, rss, err = run_child(cmd, cwd)
    if code != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {err[-2000:]}")
    return wall, rss


def add_save(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument(
        "--save",
        action="store_true",
        help="also write the JSON, with the command line, machine, versions and date, to "
        "benchmarks/results/<script>.json",
    )
    return parser


def _relative(value):
    """Paths inside the repository's parent folder written relative to the repository (no absolute paths)."""
    text = str(value) if isinstance(value, Path) else value
    if isinstance(text, str) and os.path.isabs(text) and text.startswith(str(ROOT.parent)):
        return os.path.relpath(text, ROOT)
    return text


def command_line(script: str | Path, argv: list[str] | None = None) -> str:
    """The command as run from the repository root: ``python benchmarks/<script>.py ARGS``."""
    args = sys.argv[1:] if argv is None else argv
    return shlex.join(["python", f"benchmarks/{Path(script).name}", *(str(_relative(a)) for a in args)])


def settings(args: argparse.Namespace | dict | None) -> dict:
    """The parsed options (defaults included), JSON-ready."""
    if args is None:
        return {}
    items = vars(args) if isinstance(args, argparse.Namespace) else dict(args)
    out = {}
    for key, value in items.items():
        if key in _HIDDEN:
            continue
        value = _relative(value)
        out[key] = value if isinstance(value, (str, int, float, bool, type(None), list)) else str(value)
    return out


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except (OSError, ValueError, IndexError):
        pass
    return None


def machine() -> dict:
    """CPU model, logical cores (all, and usable by this process), memory, GPU name (None without CUDA), OS."""
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    gpu = None
    try:
        import torch

        if torch.cuda.is_available():
            gpu = torch.cuda.get_device_name(0)
    except Exception:  # noqa: BLE001 - a broken CUDA setup is "no GPU" for the record
        gpu = None
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "memory_gib": _memory_gib(),
        "gpu": gpu,
        "os": f"{platform.system()} {platform.machine()}",
    }


def record(
    name: str,
    figures: dict,
    *,
    script: str | Path | None = None,
    args=None,
    argv: list[str] | None = None,
    wall_s: float | None = None,
) -> dict:
    """The record of one benchmark run: the figures and what they were measured with."""
    import torch

    from infoeval.input.provenance import now_iso, versions

    return {
        "benchmark": name,
        "command": command_line(script or f"{name}.py", argv),
        "settings": settings(args),
        "machine": machine(),
        "torch_threads": torch.get_num_threads(),
        "versions": versions(),
        "date": now_iso(),
        "wall_s": round(time.perf_counter() - _STARTED if wall_s is None else wall_s, 1),
        "figures": figures,
    }


def write_atomic(path: Path, data: dict) -> Path:
    """``data`` as JSON at ``path``, written by the package's atomic writer (never half a file)."""
    from infoeval.output.results import atomic_write_bytes

    atomic_write_bytes(Path(path), (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))
    return path


def save(
    script: str | Path, figures: dict, *, args=None, results_dir: Path | None = None, argv: list[str] | None = None
) -> Path:
    """Write ``<results_dir>/<script stem>.json`` (default ``benchmarks/results``); returns its path."""
    name = Path(script).stem
    rec = record(name, figures, script=script, args=args, argv=argv)
    return write_atomic(Path(results_dir or RESULTS) / f"{name}.json", rec)


def emit(script: str | Path, figures: dict, save_it: bool, *, args=None, indent: int | None = 2) -> None:
    """Print the figures as JSON (what every script did before ``--save``); with ``save_it`` also write the record."""
    print(json.dumps(figures, indent=indent), flush=True)
    if save_it:
        path = save(script, figures, args=args)
        print(f"saved {os.path.relpath(path, ROOT)}", file=sys.stderr)

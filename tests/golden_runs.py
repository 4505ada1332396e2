"""Every command run on fixed small settings, and the numbers it reports, for the golden comparison.

``run_all(folder)`` builds the tiny models and a text inside ``folder``, runs each command through the command
line (``infoeval.cli.main``, in this process: ``cli_run.py``; the CLI calls the Python API) and returns ``{run name:
JSON-like record}``. A record is the command's result JSON, plus digests of the files a command writes instead
(reference file tensors, checkpoints) and the per-position CSV of one run. ``tests/golden/*.json`` holds the records
saved before a refactor; ``test_golden.py`` compares a fresh run with them number by number (see ``compare``).

Regenerate (only when a number is meant to change, and say why in the commit):
    python tests/golden_runs.py tests/golden            # tiny models
    python tests/golden_runs.py tests/golden --real     # + the built-in SmolLM2 (slow)
    python tests/golden_runs.py tests/golden --real --machine
        # the records of this machine's arithmetic (tests/machine.py), into tests/golden/machines/<fingerprint>/:
        # only from code whose numbers match the records above within another CPU's rounding
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from cli_run import run_cli  # noqa: E402
from machine import ORDER_STATISTIC, SHA256, fingerprint, within_rounding  # noqa: E402
from tiny_models import build_tiny_llama, build_tiny_qwen3, tiny_text  # noqa: E402

ENV = {k: v for k, v in os.environ.items() if k not in ("INFOEVAL_DEBUG",)} | {"HF_HUB_OFFLINE": "1"}
ENV.setdefault("INFOEVAL_DATA_DIR", str(HERE.parent.parent / "shared" / "data"))  # the product's own lookup
# Keys whose values depend on the machine, the clock, the run's folder or the software versions, not on the
# arithmetic: they are not compared.
VOLATILE = {
    "timings",
    "created",
    "argv",
    "versions",
    "path",
    "file",
    "out",
    "reference_file",
    "seconds",
    "wall_s",
    "tokens_per_s",
    "speedup",
    "model_of_speedup",
    "torch_threads",
    "cache",
    "sha256_file",
    "load_s",
    "eval_s",
    "memory_plan",  # the plan taken against the memory available on the machine, and its estimates
}
# Renames of the result schema (old key path → new key path), applied to a golden record before comparing.
# Schema 2: metric definitions moved to `metric_definitions` (from `metrics`, and `metrics_meta` in gate results,
# whose `metrics` held values and still do); a checkpoint's report names its source model inside `provenance`.
_DEFINITIONS = [("metrics", "metric_definitions")]
RENAMES: dict[str, list[tuple[str, str]]] = {
    **{
        name: _DEFINITIONS
        for name in (
            "quantize-compare-llama",
            "quantize-compare-qwen3-llamacpp",
            "compress-bits-qwen3",
            "spec-accept-llama",
            "spec-accept-layers",
            "spec-decode-llama",
            "distill-llama",
            "temperature-logits",
            "temperature-model",
            "mutual-info-llama",
            "kl-fit",
            "quantize-compare-smollm2",
            "compress-bits-smollm2",
        )
    },
    "gate-llama": [("metrics_meta", "metric_definitions")],
    "quantize-llama": [("report/source_model", "report/provenance/model")],
}
# Schema 3: standard errors of means over positions are batch means (stats.se) instead of sd/√n, on purpose
# (issue 36); the means do not move. In a record of an earlier schema, every leaf under a key ending in ``_se``
# (values and their metric definitions) and a gate verdict's ``se`` and ``bound`` are not compared; llama.cpp's
# sd/√n SEs moved to ``llamacpp_*`` keys, which such records lack. Schema 4: the batches are whole windows and the
# bounds use t on their degrees of freedom (issue 51): in a record before it, ``se_block``/``se_blocks`` and "at
# floor" are not compared either.
SE_SCHEMA = 4
# Texts reworded since a record was written (old → new, inside any string of a golden record), applied before
# comparing, whatever the record's schema. Issue 54: llama.cpp's statistics module is named for its table format.
TEXT_RENAMES = [("see llamacpp_stats)", "see llamacpp_table_stats)")]


def se_moved(path: str) -> bool:
    """Whether a leaf of a record written before schema 4 is a standard error (or made from one: a bound, the
    batches, "at floor")."""
    parts = path.split("/")
    return (
        any(p.endswith("_se") for p in parts)
        or parts[-1] in ("se_block", "se_blocks", "at_floor")
        or ("verdicts" in parts and parts[-1] in ("se", "bound", "judged"))
    )


def _sha(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _run(args: list, cwd: Path) -> None:
    quiet = ["-q"] if args[0] not in ("kl-fit", "temperature", "quantize") else []
    proc = run_cli([*args, *quiet], cwd=cwd, env=ENV)
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"infoeval {' '.join(map(str, args))} exited {proc.returncode}: {proc.stderr[-2000:]}")


def _reference_record(path: Path) -> dict:
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        meta = json.loads(f.metadata()["infoeval"])
        tensors = {
            k: hashlib.sha256(
                f.get_tensor(k).contiguous().view(-1).view(__import__("torch").uint8).numpy().tobytes()
            ).hexdigest()
            for k in sorted(f.keys())
        }
    return {
        "reference": meta.get("reference"),
        "top_k": meta.get("top_k"),
        "tail_samples": meta.get("tail_samples"),
        "tensors": tensors,
    }


def _checkpoint_record(folder: Path) -> dict:
    report = json.loads((folder / "infoeval-quantization.json").read_text())
    report.pop("created", None)
    report.pop("versions", None)
    return {"weights": _sha(folder / "model.safetensors"), "report": report}


def plan(folder: Path, real: bool) -> dict[str, list]:
    """Each run's arguments (every output under ``folder``)."""
    llama, qwen, text = folder / "llama", folder / "qwen3", folder / "text.txt"
    common = ["--text", text, "--device", "cpu"]
    runs = {
        "quantize-compare-llama": [
            "quantize-compare",
            "--model",
            llama,
            "--schemes",
            "int8-channel,int4-g32,int3-g64-asym",
            "--ctx",
            64,
            "--stride",
            48,
            "--max-tokens",
            300,
            *common,
            "--json",
            folder / "qc-llama.json",
            "--positions",
            folder / "qc-llama-positions.csv",
        ],
        "quantize-compare-qwen3-llamacpp": [
            "quantize-compare",
            "--model",
            qwen,
            "--schemes",
            "int4-g64,int8-channel-asym",
            "--protocol",
            "llama.cpp",
            "--ctx",
            64,
            "--max-tokens",
            300,
            *common,
            "--json",
            folder / "qc-qwen3.json",
        ],
        "compress-bits-qwen3": [
            "compress-bits",
            "--model",
            qwen,
            "--ctx",
            96,
            "--max-tokens",
            400,
            *common,
            "--json",
            folder / "cb-qwen3.json",
        ],
        "reference-llama": [
            "reference",
            llama,
            "--out",
            folder / "ref.safetensors",
            "--top-k",
            16,
            "--tail-samples",
            8,
            "--ctx",
            64,
            "--max-tokens",
            300,
            *common,
        ],
        "spec-accept-llama": [
            "spec-accept",
            llama,
            "--draft-scheme",
            "int4-g32",
            "--temperature",
            "0.5,1,2",
            "--ctx",
            64,
            "--max-tokens",
            300,
            *common,
            "--json",
            folder / "sa.json",
        ],
        "spec-accept-layers": [
            "spec-accept",
            llama,
            "--draft-layers",
            1,
            "--ctx",
            64,
            "--max-tokens",
            200,
            *common,
            "--json",
            folder / "sa-layers.json",
        ],
        "spec-decode-llama": [
            "spec-decode",
            llama,
            "--draft-scheme",
            "int4-g32",
            "--prompt",
            "The function returns",
            "--gamma",
            3,
            "--max-new-tokens",
            24,
            "--temperature",
            0.8,
            "--seed",
            3,
            "--device",
            "cpu",
            "--json",
            folder / "sd.json",
        ],
        "distill-llama": [
            "distill",
            llama,
            "--student-layers",
            1,
            "--T",
            "1,2,4",
            "--alpha",
            0.25,
            "--ctx",
            64,
            "--max-tokens",
            300,
            *common,
            "--json",
            folder / "distill.json",
        ],
        "temperature-logits": [
            "temperature",
            "--logits",
            "9.1,6.2,4.6,3.3",
            "--labels",
            "cat,lion,lynx,dog",
            "--T",
            "0.5,1,2",
            "--json",
            folder / "temp-logits.json",
        ],
        "temperature-model": [
            "temperature",
            "--model",
            llama,
            "--prompt",
            "The function",
            "--top",
            5,
            "--device",
            "cpu",
            "--json",
            folder / "temp-model.json",
        ],
        "mutual-info-llama": [
            "mutual-info",
            "--model",
            llama,
            "--lengths",
            "8,16,32",
            "--blocks",
            4,
            "--batch-tokens",
            64,
            "--bootstrap",
            50,
            *common,
            "--json",
            folder / "mi.json",
        ],
        "kl-fit": [
            "kl-fit",
            "--steps",
            200,
            "--support",
            60,
            "--target",
            "0.6:15:4,0.4:40:4",
            "--starts",
            "20,35",
            "--json",
            folder / "klfit.json",
        ],
        "quantize-llama": ["quantize", llama, "--scheme", "int4-g32", "--out", folder / "ckpt", "--device", "cpu"],
    }
    if real:
        runs["quantize-compare-smollm2"] = [
            "quantize-compare",
            "--schemes",
            "int8-channel,int4-g128",
            "--ctx",
            128,
            "--max-tokens",
            256,
            "--device",
            "cpu",
            "--json",
            folder / "qc-smollm2.json",
        ]
        runs["compress-bits-smollm2"] = [
            "compress-bits",
            "--dataset",
            "tinyshakespeare",
            "--ctx",
            128,
            "--max-tokens",
            256,
            "--device",
            "cpu",
            "--json",
            folder / "cb-smollm2.json",
        ]
    return runs


GATE = [
    "gate",
    "--reference",
    "ref.safetensors",
    "--scheme",
    "int4-g32",
    "--max-kl-mean",
    0.5,
    "--device",
    "cpu",
    "--json",
    "gate.json",
]


def run_all(folder: Path, real: bool = False, only: set[str] | None = None) -> dict[str, dict]:
    folder = Path(folder)
    build_tiny_llama(folder / "llama", seed=0)
    build_tiny_qwen3(folder / "qwen3", seed=0)
    (folder / "text.txt").write_text(tiny_text(), encoding="utf-8")
    runs = {k: v for k, v in plan(folder, real).items() if only is None or k in only}
    for args in runs.values():
        _run(args, folder)
    out: dict[str, dict] = {}
    for name, args in runs.items():
        if name == "reference-llama":
            out[name] = _reference_record(folder / "ref.safetensors")
            _run(GATE, folder)
            out["gate-llama"] = json.loads((folder / "gate.json").read_text())
        elif name == "quantize-llama":
            out[name] = _checkpoint_record(folder / "ckpt")
        else:
            out[name] = json.loads(Path(args[args.index("--json") + 1]).read_text())
    if "quantize-compare-llama" in runs:
        out["quantize-compare-llama-positions"] = pd.read_csv(folder / "qc-llama-positions.csv").to_dict(orient="list")
    return _scrub(out, str(folder))


def _scrub(obj, folder: str):
    """Replace the run folder in strings with <RUN> so that records from two folders compare."""
    if isinstance(obj, dict):
        return {k: _scrub(v, folder) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_scrub(v, folder) for v in obj]
    if isinstance(obj, str):
        return obj.replace(folder, "<RUN>")
    return obj


# ---- comparison ------------------------------------------------------------------------------------------
def _get(obj, path: str):
    for part in path.split("/") if path else []:
        obj = obj[int(part)] if isinstance(obj, list) else obj[part]
    return obj


def apply_renames(name: str, record: dict) -> dict:
    """Move every renamed key of a golden record to its new place (RENAMES: 'a/b' → 'c/d')."""
    record = json.loads(json.dumps(record))
    for old, new in RENAMES.get(name, []) + RENAMES.get("*", []):
        *old_parent, old_key = old.split("/")
        parent = _get(record, "/".join(old_parent))
        if old_key not in parent:
            continue
        value = parent.pop(old_key)
        *new_parent, new_key = new.split("/")
        node = record
        for part in new_parent:
            node = node.setdefault(part, {})
        node[new_key] = value
    return record


def leaves(obj, path: str = ""):
    """(path, value) of every number, bool and string, skipping VOLATILE keys."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k not in VOLATILE and not k.endswith(("_s", "_s_all")):  # *_s: seconds
                yield from leaves(v, f"{path}/{k}" if path else k)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from leaves(v, f"{path}/{i}")
    elif path.rsplit("/", 1)[-1] == "schema" and isinstance(obj, str):
        yield path, obj.rsplit("/", 1)[0]  # the schema's name; its version number changes with the renames
    else:
        yield path, obj


def compare(
    golden: dict, fresh: dict, name: str, rel: float = 0.0, renamed: bool = True, other_cpu: bool = False
) -> list[str]:
    """Every leaf of the golden record (after renames, unless ``renamed`` is False: a record of today's schema)
    against the fresh one; returns the differences.

    ``rel = 0`` asks for identical numbers. Strings are compared too, so a changed rule text or scheme name
    shows up; a leaf missing from the fresh record is a difference. ``other_cpu``: the records were written on a
    machine of other arithmetic (``machine.fingerprint``): numbers agree within its rounding
    (``machine.within_rounding``), and digests of bits (reference tensors, checkpoint files) are not compared."""
    golden = apply_renames(name, golden) if renamed else golden
    fresh_leaves = dict(leaves(fresh))
    old_se = _schema_version(golden) < SE_SCHEMA
    diffs = []
    for path, want in leaves(golden):
        if old_se and se_moved(path):
            continue
        if path not in fresh_leaves:
            diffs.append(f"{name}: {path} missing (golden {want!r})")
            continue
        got = fresh_leaves[path]
        if isinstance(want, str):
            want = reworded(want)
        if isinstance(want, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
            one_position = ORDER_STATISTIC.search(path.rsplit("/", 1)[-1]) is not None
            close = within_rounding(want, got, one_position) if other_cpu else abs(got - want) <= rel * abs(want)
            same = (math.isnan(want) and math.isnan(got)) or want == got or close
        elif other_cpu and isinstance(want, str) and SHA256.match(want):
            same = isinstance(got, str) and SHA256.match(got) is not None
        else:
            same = want == got
        if not same:
            diffs.append(f"{name}: {path} golden {want!r} now {got!r}")
    return diffs


def reworded(text: str) -> str:
    """A golden record's string in today's words (``TEXT_RENAMES``)."""
    for old, new in TEXT_RENAMES:
        text = text.replace(old, new)
    return text


def _schema_version(record: dict) -> int:
    """The version of a record's result schema (``infoeval/<command>/<version>``; 0 when it has none)."""
    tail = str(record.get("schema", "")).rsplit("/", 1)[-1] if isinstance(record, dict) else ""
    return int(tail) if tail.isdigit() else 0


def main(argv: list[str]) -> None:
    import tempfile

    out_dir = Path(argv[0])
    real = "--real" in argv
    if "--machine" in argv:  # this machine's own records (see test_golden.py), beside the ones before the refactor
        out_dir = out_dir / "machines" / fingerprint()
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        records = run_all(Path(tmp), real)
    for name, record in records.items():
        (out_dir / f"{name}.json").write_text(json.dumps(record, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    print(f"wrote {len(records)} records to {out_dir}")


if __name__ == "__main__":
    main(sys.argv[1:])

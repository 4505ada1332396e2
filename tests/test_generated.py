"""Generated, not typed: the reference pages (CLI, metrics, result schemas), the shipped JSON Schemas and the
performance page are what ``scripts/gen_docs.py`` makes from the code and ``benchmarks/results/*.json`` (a stale
file fails), results validate against their schemas (fresh runs of the tiny model, and placeholder results of
every result type) and broken ones do not, and the schemas ship inside the package."""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import typing
from importlib import resources
from pathlib import Path

import jsonschema
import pytest
import tomllib
from cli_run import run_cli

import infoeval

ROOT = Path(__file__).resolve().parents[1]


def _load_gen_docs():
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_docs", module)
    spec.loader.exec_module(module)
    return module


gen_docs = _load_gen_docs()


@pytest.fixture(scope="module")
def generated() -> dict[Path, str]:
    return gen_docs.outputs()


# ---- generated files are current -------------------------------------------------------------------------
def test_generated_pages_and_schemas_are_current(generated):
    bad = [p.as_posix() for p in gen_docs.stale()]
    assert not bad, f"stale generated files {bad}; run: python scripts/gen_docs.py"


def test_check_mode_lists_stale_files_and_writes_nothing(generated, tmp_path, monkeypatch, capsys):
    for p, text in generated.items():
        (tmp_path / p).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / p).write_text(text, encoding="utf-8")
    shutil.copytree(ROOT / "benchmarks" / "results", tmp_path / "benchmarks" / "results")
    monkeypatch.setattr(gen_docs, "ROOT", tmp_path)
    assert gen_docs.main(["--check"]) == 0
    page = tmp_path / gen_docs.CLI_PAGE
    edited = page.read_text(encoding="utf-8").replace(
        "Fake-quantize", "Quantize for real", 1
    )  # an option's help edited
    page.write_text(edited, encoding="utf-8")
    (tmp_path / gen_docs.SCHEMA_DIR / "gone.schema.json").write_text("{}", encoding="utf-8")
    capsys.readouterr()
    assert gen_docs.main(["--check"]) == 1
    out = capsys.readouterr().out
    assert "stale: docs/reference/cli.md" in out and "stale: infoeval/schemas/gone.schema.json" in out
    assert "metrics.md" not in out
    assert page.read_text(encoding="utf-8") == edited  # nothing written


def test_a_changed_help_text_makes_the_cli_page_stale(generated, monkeypatch):
    import typer

    from infoeval.cli import app

    command = next(c for c in app.registered_commands if c.name == "kl-fit")
    monkeypatch.setattr(command, "help", "A help text that the page does not have yet.")
    assert typer.main.get_command(app).commands["kl-fit"].help.startswith("A help text")
    assert gen_docs.outputs()[gen_docs.CLI_PAGE] != generated[gen_docs.CLI_PAGE]


def test_generation_is_deterministic(generated):
    assert gen_docs.outputs() == generated
    text = "".join(generated.values())
    assert str(ROOT) not in text and "/home/" not in text and "/tmp/" not in text
    code = "".join(t for p, t in generated.items() if p != gen_docs.performance_page.PAGE)
    assert not re.search(r"20\d\d-\d\d-\d\dT", code)  # no timestamps (the performance page shows its records' dates)


# ---- the references cover the code -----------------------------------------------------------------------
def test_every_command_and_option_is_in_the_cli_reference():
    page = (ROOT / gen_docs.CLI_PAGE).read_text(encoding="utf-8")
    assert re.findall(r"^## (\S+)$", page, flags=re.M) == list(gen_docs.commands())
    for name, command in gen_docs.commands().items():
        section = page.split(f"\n## {name}\n", 1)[1].split("\n## ", 1)[0]
        for param in command.params:
            if param.param_type_name == "option" and not param.hidden:
                assert f"`{param.opts[0]}`" in section, f"{name}: {param.opts[0]} is not in the CLI reference"


def test_every_registered_metric_is_in_the_metrics_reference():
    from infoeval.measure import metrics

    page = (ROOT / gen_docs.METRICS_PAGE).read_text(encoding="utf-8")
    for family in metrics.FAMILIES.values():
        for name in family:
            assert f"| `{name}` |" in page, name
    row = next(line for line in page.splitlines() if line.startswith("| `kl_mean` |"))
    assert "`kl_se`" in row and "lower" in row and "nats" in row


# ---- result JSONs against the shipped schemas ------------------------------------------------------------
def _run(args: list, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "INFOEVAL_DEBUG"} | {
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
    }
    return run_cli([*args, "-q"], cwd=cwd, env=env, threads=1)


@pytest.fixture(scope="module")
def fresh(tmp_path_factory, tiny_llama_dir, tiny_text) -> dict[str, dict]:
    """Result JSONs of fresh tiny runs: quantize-compare, reference → gate."""
    work = tmp_path_factory.mktemp("fresh")
    (work / "t.txt").write_text(tiny_text)
    common = ["--text", "t.txt", "--ctx", 32, "--max-tokens", 160, "--device", "cpu"]
    runs = {
        "quantize-compare": [
            "quantize-compare",
            tiny_llama_dir,
            *common,
            "--schemes",
            "int8-channel,int4-g32",
            "--json",
            "qc.json",
        ],
        "reference": ["reference", tiny_llama_dir, *common, "--out", "ref.safetensors"],
        "gate": [
            "gate",
            tiny_llama_dir,
            "--reference",
            "ref.safetensors",
            "--scheme",
            "int4-g32",
            "--json",
            "gate.json",
        ],
    }
    for name, args in runs.items():
        proc = _run(args, work)
        assert proc.returncode in (0, 1), f"{name}: {proc.stderr[-2000:]}"
    return {
        "quantize-compare": json.loads((work / "qc.json").read_text()),
        "gate": json.loads((work / "gate.json").read_text()),
    }


def test_fresh_results_validate(fresh):
    from infoeval import schemas

    for command, data in fresh.items():
        schemas.validate(data)
        assert schemas.command_of(data) == command
        assert data["provenance"]["versions"]["infoeval"] == infoeval.__version__
    version = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    assert infoeval.__version__ == version  # the package says the version its metadata says


def _mutations(data: dict):
    def drop(*path):
        d = copy.deepcopy(data)
        node = d
        for k in path[:-1]:
            node = node[k]
        del node[path[-1]]
        return d

    def put(value, *path):
        d = copy.deepcopy(data)
        node = d
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = value
        return d

    yield "no provenance", drop("provenance")
    yield "no metric_definitions", drop("metric_definitions")
    yield "no provenance.versions", drop("provenance", "versions")
    yield "no versions.infoeval", drop("provenance", "versions", "infoeval")
    yield "torch_threads a string", put("two", "provenance", "torch_threads")
    yield "argv a string", put("infoeval gate", "provenance", "argv")
    yield "another command", put("quantize-compare", "provenance", "command")
    yield "timings not numbers", put({"eval_s": "fast"}, "timings")
    yield "another schema version", put(data["schema"].rsplit("/", 1)[0] + "/1", "schema")
    yield "an unknown top-level key", put(1, "surprise")


def test_broken_results_fail_validation(fresh):
    from infoeval import schemas

    gate, compare = fresh["gate"], fresh["quantize-compare"]
    broken = list(_mutations(gate))
    broken += [
        ("passed a string", {**gate, "passed": "yes"}),
        ("no verdicts", {k: v for k, v in gate.items() if k != "verdicts"}),
        (
            "a verdict without its metric",
            {**gate, "verdicts": [{k: v for k, v in gate["verdicts"][0].items() if k != "metric"}]},
        ),
        ("variants an object", {**compare, "variants": {}}),
        ("a variant without metrics", {**compare, "variants": [{"name": "x", "quantization": {}}]}),
        ("no protocol_metrics", {k: v for k, v in compare.items() if k != "protocol_metrics"}),
    ]
    for what, data in broken:
        with pytest.raises(jsonschema.ValidationError):
            schemas.validate(data)
            pytest.fail(f"{what}: validated")
    with pytest.raises(ValueError):
        schemas.validate({"schema": "something/else"})


def _dummy(tp):
    """A value of the type hint ``tp`` (the first member of a union), as a result dataclass holds it."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Union or type(tp).__name__ == "UnionType":
        return _dummy(next(a for a in args if a is not type(None)))
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        return tp(**{f.name: _dummy(hints[f.name]) for f in dataclasses.fields(tp)})
    if tp is bool:
        return True
    if tp is int:
        return 3
    if tp is float:
        return float("nan")  # written as null
    if tp is str:
        return "x"
    if tp in (tuple, list) or origin in (tuple, list):
        return ()
    return {"k": 0.5} if len(args) == 2 and args[1] is float else {}


@pytest.mark.parametrize("command", sorted(gen_docs.result_types()))
def test_every_result_type_writes_what_its_schema_says(command):
    """A result of every command built from its dataclass (placeholder values of each field's type), through
    ``write_json``'s conversion, validates: also the commands no fresh run here covers."""
    from infoeval import schemas
    from infoeval.input.provenance import provenance
    from infoeval.output.results import _clean, jsonable

    cls = gen_docs.result_types()[command]
    hints = typing.get_type_hints(cls)
    values = {f.name: _dummy(hints[f.name]) for f in dataclasses.fields(cls) if f.name not in ("provenance", "timings")}
    result = cls(provenance(command, dtype="float32", device="cpu"), {"eval_s": 0.25}, **values)
    data = json.loads(json.dumps(_clean(jsonable(result)), allow_nan=False))
    schemas.validate(data)
    assert schemas.command_of(data) == command


def test_shipped_schemas_are_valid_draft_2020_12_and_ship_in_the_package():
    from infoeval import schemas
    from infoeval.output.results import SCHEMA_VERSION

    assert schemas.commands() == sorted(gen_docs.result_types())
    folder = resources.files("infoeval.schemas")
    for command in schemas.commands():
        schema = schemas.load(command)
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["properties"]["schema"]["const"] == f"infoeval/{command}/{SCHEMA_VERSION}"
        assert (folder / f"{command}.schema.json").is_file()
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "schemas/*.json" in config["tool"]["setuptools"]["package-data"]["infoeval"]
    assert any(req.startswith("jsonschema") for req in config["project"]["optional-dependencies"]["test"])


# ---- benchmark results as data ---------------------------------------------------------------------------
BENCHMARKS = ROOT / "benchmarks"
SIX = ("quantize_compare", "memory", "ranks", "codec", "sensitivity", "mix")


def test_every_benchmark_script_takes_save():
    scripts = sorted(p for p in BENCHMARKS.glob("*.py") if not p.name.startswith("_"))
    missing = [
        p.name
        for p in scripts
        if "add_save(ap)" not in p.read_text(encoding="utf-8")
        or not re.search(r"emit\(\s*__file__", p.read_text(encoding="utf-8"))
    ]
    assert scripts and not missing, missing


def test_records_are_complete_and_the_page_shows_their_figures():
    sys.path.insert(0, str(BENCHMARKS))
    import _record

    page = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    for name in SIX:
        rec = json.loads((BENCHMARKS / "results" / f"{name}.json").read_text(encoding="utf-8"))
        assert all(k in rec for k in _record.REQUIRED), name
        assert (
            rec["benchmark"] == name
            and rec["command"].startswith(f"python benchmarks/{name}.py")
            and "--save" in rec["command"]
        )
        assert set(_record.MACHINE_KEYS) <= set(rec["machine"]) and rec["versions"]["infoeval"]
        assert f"## {name}" in page and rec["command"] in page
    qc = json.loads((BENCHMARKS / "results" / "quantize_compare.json").read_text(encoding="utf-8"))
    ratio = qc["figures"]["runs"][0]["ratio_wall_vs_plain"]
    assert f"| {ratio:.5g} |" in page or f" {ratio:.5g} " in page  # a figure of the record, as the page renders it


def test_a_record_is_written_atomically_with_its_provenance(tmp_path):
    sys.path.insert(0, str(BENCHMARKS))
    import _record

    path = _record.save(
        "benchmarks/example.py",
        {"ratio": 1.25},
        args={"tokens": 4096, "save": True},
        results_dir=tmp_path,
        argv=["--tokens", "4096", "--save"],
    )
    rec = json.loads(path.read_text(encoding="utf-8"))
    assert path.name == "example.json" and rec["figures"] == {"ratio": 1.25} and rec["settings"] == {"tokens": 4096}
    assert (
        rec["command"] == "python benchmarks/example.py --tokens 4096 --save"
        and rec["versions"]["infoeval"] == infoeval.__version__
    )
    assert [p.name for p in tmp_path.iterdir()] == ["example.json"]  # no temporary file left behind


def test_the_methods_table_is_the_benchmark_record(tmp_path):
    """docs/methods.md's measured part: a row per scheme of benchmarks/results/methods.json, its figures as
    recorded; the page's hand-written text is kept around it, and a page without the markers is refused."""
    mt = gen_docs.methods_table
    rec = json.loads((ROOT / mt.RECORD).read_text(encoding="utf-8"))
    page = (ROOT / mt.PAGE).read_text(encoding="utf-8").split(mt.BEGIN, 1)[1].split(mt.END, 1)[0]
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    assert [r.split("`")[1] for r in rows] == list(rec["figures"]["compare"]["schemes"])
    for row, s in zip(rows, rec["figures"]["compare"]["schemes"].values()):
        assert (
            f"| {s['bits_per_weight']:.2f} | {s['kl_mean']:.4f} ± {s['kl_se']:.4f} | {s['kl_p99']:.3f} | "
            f"{100 * s['top1']:.1f} % |" in row
        )
    for c in rec["figures"].get("calibrated", []):
        assert f"mean KL ratio **{c['kl_ratio']:.3f}**" in page
    (tmp_path / "docs").mkdir()
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    shutil.copy(ROOT / mt.RECORD, tmp_path / mt.RECORD)
    (tmp_path / mt.PAGE).write_text(f"# Before\n\n{mt.BEGIN}\nstale\n{mt.END}\n\nAfter.\n", encoding="utf-8")
    out = mt.render(tmp_path)
    assert out.startswith(f"# Before\n\n{mt.BEGIN}\n") and out.endswith(f"{mt.END}\n\nAfter.\n") and "stale" not in out
    (tmp_path / mt.PAGE).write_text("# No markers\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="lacks the markers"):
        mt.render(tmp_path)


def test_the_protocols_table_is_the_registry():
    """docs/protocols.md's generated part: one row per registered protocol, in the registry's order, with its
    rule, default context and flags as the protocol answers them."""
    from infoeval.input.protocols import REGISTRY

    pt = gen_docs.protocols_table
    page = (ROOT / pt.PAGE).read_text(encoding="utf-8").split(pt.BEGIN, 1)[1].split(pt.END, 1)[0]
    rows = [line.split(" | ") for line in page.splitlines() if line.startswith("| `") and "`--protocol`" not in line]
    assert [r[0].strip("| `") for r in rows] == list(REGISTRY)
    for row, rules in zip(rows, REGISTRY.values(), strict=True):
        assert row[1] == rules.summary and row[2] == str(rules.default_ctx)
        assert row[3] == ("yes" if rules.takes_stride else "no") and row[4] == ("yes" if rules.anytime else "no")
        assert (row[6] == "—") == (rules.figure_table is None)
    assert gen_docs.PROTOCOL_FIGURES_NOTE.endswith("(lm-eval, gptq; `null` for rolling, llama.cpp)")

"""Results that load back (issue 49, step 1): ``infoeval.load`` reads any result JSON or run folder into its typed
class, for every schema version the package reads; ``to_json`` of what it read is what was written; ``to_frame``
is the CLI's summary table; ``save`` writes what the CLI writes, atomically; bad files are one-line DataErrors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from golden_runs import compare
from tiny_models import as_json, tiny_text

import infoeval
from infoeval.comparison import compare as compare_pipeline
from infoeval.errors import DataError, UsageError
from infoeval.gating.gate import GateSettings, build_reference, run_gate
from infoeval.gating.limits import parse_limits
from infoeval.gating.results import GateResult
from infoeval.input.settings import ModelSettings, TextSettings, WindowSettings
from infoeval.quant.variant_settings import VariantSettings

GOLDEN = Path(__file__).resolve().parent / "golden"
RECORDS = sorted(p for p in GOLDEN.glob("*.json") if "schema" in json.loads(p.read_text(encoding="utf-8")))


@pytest.mark.parametrize("path", RECORDS, ids=[p.stem for p in RECORDS])
def test_every_golden_result_loads_into_its_class_and_back(path):
    data = json.loads(path.read_text(encoding="utf-8"))
    result = infoeval.load(path)
    command = data["schema"].split("/")[1]
    assert type(result) is infoeval.api.results._classes()[command]
    assert compare(data, result.to_json(), path.stem) == []  # every leaf of the record, after the documented renames
    frame = result.to_frame()
    assert frame is None or len(frame) >= 1


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_llama_dir):
    d = tmp_path_factory.mktemp("api")
    text = d / "text.txt"
    text.write_text(tiny_text(), encoding="utf-8")
    model = ModelSettings(str(tiny_llama_dir), "cpu", "float32")
    compared, cols = compare_pipeline.quantize_compare(
        model,
        TextSettings(text=text, max_tokens=300),
        WindowSettings(ctx=64),
        VariantSettings(schemes="int8-channel,int4-g32"),
    )
    ref = d / "ref.safetensors"
    reference = build_reference(
        model, TextSettings(text=text, max_tokens=300), WindowSettings(ctx=64), ref, top_k=16, tail_samples=8
    )
    gated, _ = run_gate(GateSettings(ref, None, "int8-channel", tuple(parse_limits({"max_kl_mean": 1.0}))), model)
    return {"compare": (compared, cols), "reference": reference, "gate": gated, "dir": d, "model": tiny_llama_dir}


def test_a_fresh_result_round_trips_exactly(runs):
    for result in (runs["compare"][0], runs["reference"], runs["gate"]):
        data = as_json(result)
        again = type(result).from_json(json.loads(json.dumps(data)))
        assert again.to_json() == data and again == result or again.to_json() == data
    cr = runs["compare"][0]
    loaded = type(cr).from_json(cr.to_json())
    assert [type(v).__name__ for v in loaded.variants] == ["VariantResult"] * 2 and isinstance(loaded.variants, tuple)
    assert loaded.provenance.command == "quantize-compare" and loaded.provenance.model == cr.provenance.model


def test_save_writes_what_the_cli_writes_and_load_reads_it_back(runs, tmp_path):
    from infoeval.comparison.frames import positions_frame

    result, cols = runs["compare"]
    result.with_positions(lambda: positions_frame(cols.reference, cols.variants))
    written = result.save(tmp_path / "run")
    assert sorted(Path(p).name for p in written) == ["positions.csv", "result.json", "summary.csv"]
    assert [p.name for p in (tmp_path / "run").iterdir() if p.name.startswith(".")] == []  # nothing half-written left
    back = infoeval.load(tmp_path / "run")
    assert back.to_json() == json.loads((tmp_path / "run" / "result.json").read_text(encoding="utf-8"))
    assert back.to_frame().to_csv(index=False) == (tmp_path / "run" / "summary.csv").read_text(encoding="utf-8")
    assert back.positions is not None and len(back.positions) == len(result.positions)
    assert back.to_frame()["variant"].tolist() == ["reference", "int8-channel", "int4-g32", "floor"]
    gate = infoeval.load(_write(tmp_path / "gate.json", runs["gate"]))
    assert isinstance(gate, GateResult) and gate.positions is None  # a lone result file: no positions beside it
    assert gate.to_frame()["limit"].tolist() == ["max_kl_mean"]
    assert runs["reference"].to_frame() is None  # reference writes no summary table
    assert sorted(Path(p).name for p in runs["reference"].save(tmp_path / "ref")) == ["result.json"]


def _write(path: Path, result) -> Path:
    path.write_text(json.dumps(as_json(result)), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "content,fragment",
    [
        ("not json", "is not valid JSON"),
        ("[1, 2]", "is not an infoeval result"),
        ('{"schema": "other/thing/1"}', "is not an infoeval result (schema 'other/thing/1')"),
        ('{"schema": "infoeval/quantize-compare/9"}', "has schema version 9; this infoeval reads versions 1 to 4"),
        ('{"schema": "infoeval/frobnicate/3"}', "a result of 'frobnicate', which this infoeval does not know"),
    ],
)
def test_bad_files_are_one_line_data_errors(tmp_path, content, fragment):
    path = tmp_path / "r.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataError) as e:
        infoeval.load(path)
    assert fragment in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(DataError, match="neither a result JSON nor a run folder"):
        infoeval.load(tmp_path / "missing")
    assert issubclass(DataError, ValueError) and issubclass(UsageError, ValueError) and infoeval.DataError is DataError


def test_the_python_api_page_runs(runs, tmp_path):
    """docs/python-api.md's code blocks, run in order on a run folder this test writes (RUN) and a copy (COPY)."""
    import re

    from infoeval.comparison.frames import positions_frame

    result, cols = runs["compare"]
    run = tmp_path / "run"
    result.with_positions(lambda: positions_frame(cols.reference, cols.variants)).save(run)
    page = (Path(__file__).resolve().parents[1] / "docs" / "python-api.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", page, flags=re.S)
    assert len(blocks) >= 2
    text = tmp_path / "text.txt"
    text.write_text(tiny_text(), encoding="utf-8")
    namespace = {"RUN": str(run), "COPY": str(tmp_path / "copy"), "MODEL": str(runs["model"]), "TEXT": str(text)}
    for block in blocks:
        exec(compile(block, "docs/python-api.md", "exec"), namespace)  # noqa: S102  (the page's own examples)
    assert namespace["summary"]["variant"].tolist() == ["reference", "int8-channel", "int4-g32", "floor"]
    kl = namespace["mem"].to_frame().set_index("variant")["kl_mean"]  # the in-memory example: every variant measured
    assert kl.index.tolist() == ["reference", "int8-channel", "qat", "bnb-nf4", "floor"] and (kl.iloc[1:4] > 0).all()

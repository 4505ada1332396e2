"""The performance page's target table (scripts/performance_targets.py): met, not met, no record, and a record
that lacks a figure, each said as such; and every row of the page's table reads the checked-in records."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import performance_targets as targets  # noqa: E402


def _qc(ratio: float) -> dict:
    return {
        "date": "2026-12-05T00:00:00+00:00",
        "figures": {
            "target_ratio_wall_vs_plain": 1.10,
            "target_ratio_eval_vs_plain": 1.05,
            "runs": [{"ratio_wall_vs_plain": ratio, "ratio_eval_vs_plain": ratio}],
        },
    }


def _rows(records: dict, name: str) -> list[list[str]]:
    return [row for row, (rec, _, _) in zip(targets.summary_rows(records), targets.TARGETS) if rec == name]


def test_a_target_met_and_not_met():
    assert [r[3] for r in _rows({"quantize_compare": _qc(1.04)}, "quantize_compare")] == ["yes", "yes"]
    assert [r[3] for r in _rows({"quantize_compare": _qc(1.08)}, "quantize_compare")] == ["yes", "**no**"]
    assert _rows({"quantize_compare": _qc(1.2)}, "quantize_compare")[0][2] == "1.200×"


def test_a_missing_record_and_a_missing_figure_say_so():
    assert _rows({}, "memory")[0][2:] == ["no record", "–", "–"]
    row = _rows({"memory": {"date": "2026-12-05", "figures": {}}}, "memory")[0]
    assert row[2].startswith("not in the record") and row[3] == "–"


def test_a_removal_is_met_only_when_its_numbers_are_equal():
    def rev(wall, same):
        return {"label": "x removed", "wall_vs_previous": wall, "numbers_equal_previous": same}

    figures = {"revisions": [{"label": "base"}, rev(1.01, True), rev(0.99, True)]}
    assert targets._removals(figures)[1] is True
    figures["revisions"][2] = rev(0.99, False)
    assert targets._removals(figures)[1] is False
    figures["revisions"][2] = rev(1.04, True)
    assert targets._removals(figures)[1] is False


def test_every_checked_in_record_reads_without_a_gap():
    records = {
        p.stem: json.loads(p.read_text(encoding="utf-8")) for p in (ROOT / "benchmarks" / "results").glob("*.json")
    }
    for row in targets.summary_rows(records):
        assert not row[2].startswith(("not in the record", "no record")), row

"""The noise floor in what a user reads: quantize-compare's tables and CSV (its line under the variants, the
"× floor" column, "at floor"), the gate's lines (the floor, and one line per limit below it) and the report
page's header; all from result records, no model."""

from __future__ import annotations

import io

import pandas as pd
import pytest
from rich.console import Console

from infoeval.comparison.frames import CSV_COLUMNS, summary_frame
from infoeval.comparison.tables import variants_tables
from infoeval.gating.limits import below_floor, floor_line, judge, parse_limits
from infoeval.gating.tables import floor_lines
from infoeval.report.data import floor_header

METRICS = {
    "ppl": 10.0,
    "ppl_ratio": 1.01,
    "ln_ppl_ratio": 0.01,
    "ln_ppl_ratio_se": 0.001,
    "top1": 0.97,
    "top1_se": 0.005,
    "bits_per_byte_delta": 0.001,
    "kl_mean": 0.003,
    "kl_se": 0.0002,
    "kl_p50": 0.002,
    "kl_p90": 0.005,
    "kl_p99": 0.013,
    "kl_p999": 0.02,
    "kl_max": 0.04,
    "rkl_mean": 0.003,
    "tv_mean": 0.025,
}
FLOOR = {
    "mode": "sampled",
    "seed": 0,
    "layers": 210,
    "windows": [1, 5],
    "windows_of_run": 8,
    "models_of_run": 3,
    "metrics": {
        "kl_mean": 3e-5,
        "kl_se": 2e-6,
        "kl_p99": 1.8e-4,
        "top1_disagree": 0.003,
        "top1_disagree_se": 0.0016,
        "positions": 1024,
    },
    "variants": {
        "int8-channel": {"x_floor": 100.0, "floor_diff": 0.00297, "floor_diff_se": 0.0002, "at_floor": False},
        "bf16": {"x_floor": 1.02, "floor_diff": 1e-7, "floor_diff_se": 1e-6, "at_floor": True},
    },
}


def _result(floor: dict | None) -> dict:
    variants = [
        {
            "name": n,
            "metrics": METRICS,
            "quantization": {
                "scheme": {"bits": b, "group_size": None, "symmetric": True},
                "layers_quantized": 210,
                "layers_skipped": 2,
            },
        }
        for n, b in (("int8-channel", 8), ("bf16", 16))
    ]
    return {
        "reference": {"ppl": 9.9, "tokens": 4096, "bytes": 15000, "se_block": 64, "se_blocks": 64},
        "variants": variants,
        **({"floor": floor} if floor else {}),
    }


def _text(tables) -> str:
    out = io.StringIO()
    console = Console(file=out, width=200)
    for t in tables:
        console.print(t)
    return out.getvalue()


def test_tables_show_the_floor_line_and_the_times_floor_column():
    text = _text(variants_tables(_result(FLOOR)))
    assert "× floor" in text and "100×" in text and "1.02× at floor" in text
    floor_rows = [line for line in text.splitlines() if line.strip("│ ").startswith("floor ")]
    assert len(floor_rows) == 2 and "99.70" in floor_rows[0] and "3.000e-05" in floor_rows[1]
    assert "on 2 of 8 windows (sampled)" in " ".join(text.split())
    plain = _text(variants_tables(_result(None)))  # --floor off: the tables as before
    assert "floor" not in plain


def test_summary_csv_has_the_floor_row_and_columns():
    frame = summary_frame(_result(FLOOR))
    assert list(frame.columns) == CSV_COLUMNS and frame["variant"].tolist() == [
        "reference",
        "int8-channel",
        "bf16",
        "floor",
    ]
    floor = frame.iloc[-1]
    assert floor["kl_mean"] == 3e-5 and floor["top1"] == pytest.approx(0.997) and floor["tokens"] == 1024
    assert frame["x_floor"].tolist()[1:3] == [100.0, 1.02] and frame["at_floor"].tolist()[1:3] == [False, True]
    off = summary_frame(_result(None))
    assert off["variant"].tolist() == ["reference", "int8-channel", "bf16"] and off["x_floor"].isna().all()


def test_gate_lines_and_the_limit_below_the_floor():
    verdicts = below_floor(
        judge(
            parse_limits({"max_kl_mean": 1e-5, "min_top1": 0.999, "max_kl_p99": 0.5}),
            {"kl_mean": 0.003, "kl_se": 0.0002, "kl_p99": 0.013, "top1": 0.97, "top1_se": 0.005},
        ),
        {"kl_mean": 3e-5, "kl_p99": 1.8e-4, "top1": 0.997},
    )
    assert [(v.limit.key, v.passed, v.floor) for v in verdicts] == [
        ("max_kl_mean", False, 3e-5),
        ("min_top1", False, 0.997),
        ("max_kl_p99", True, None),
    ]
    rows = [v.as_dict() for v in verdicts]
    assert rows[0]["below_floor"] and rows[0]["judged"] == "below the noise floor" and "below_floor" not in rows[2]
    line = floor_line(rows[0])
    assert line.startswith("max_kl_mean 1e-05 is below the noise floor (kl_mean 3e-05") and line.endswith(
        "pass --floor off"
    )
    assert floor_line(rows[2]) is None
    gate = {"verdicts": rows, "floor": {**FLOOR, "variants": None, "candidate": {"x_floor": 100.0, "at_floor": False}}}
    lines = floor_lines(gate)
    assert (
        len(lines) == 3
        and lines[0].startswith("noise floor (2 windows, sampled): mean KL 3.000e-05")
        and "100× the floor's" in lines[0]
    )
    assert floor_lines({"verdicts": rows}) == []  # --floor off: nothing


def test_page_header_carries_the_floor():
    h = floor_header(_result(FLOOR))
    assert h["windows"] == 2 and h["kl_mean"] == 3e-5 and h["versus"]["bf16"] == {"x_floor": 1.02, "at_floor": True}
    assert floor_header(_result(None)) is None
    gate = {
        "schema": "infoeval/gate/3",
        "candidate": {"spec": "models/q8", "scheme": None},
        "floor": {**FLOOR, "variants": None, "candidate": {"x_floor": 7.0, "at_floor": False}},
    }
    assert floor_header(gate)["versus"] == {"q8": {"x_floor": 7.0, "at_floor": False}}


def test_csv_frame_round_trips_booleans():
    frame = summary_frame(_result(FLOOR))
    back = pd.read_csv(io.StringIO(frame.to_csv(index=False)))
    assert back["at_floor"].tolist()[1:3] == [False, True]


def test_the_llama_cpp_layout_ends_with_the_floor_line():
    from infoeval.comparison.tables import floor_summary

    line = floor_summary(FLOOR)
    assert "noise floor (2 of 8 windows, sampled): mean KL 3.000e-05" in line and "int8-channel 100×" in line
    assert "bf16 1.02× at floor" in line and "top-1 disagreement 0.30 %" in line


def _column(table, header: str) -> list[str]:
    """One column's cells, as added, by its header."""
    (column,) = [c for c in table.columns if c.header == header]
    return [str(cell) for cell in column._cells]


def test_the_floor_lines_cells_sit_under_their_headers():
    agreement, kl = variants_tables(_result(FLOOR))
    assert _column(agreement, "layers q/skip")[-1] == "210/–" and _column(agreement, "bits/w")[-1] == ""
    assert _column(agreement, "top-1 agree")[-1].startswith("99.70 ± ") and _column(agreement, "Δ ln PPL")[-1] == ""
    assert _column(kl, "mean KL")[-1].startswith("3.000e-05") and _column(kl, "× floor")[-1] == "1×"
    assert _column(kl, "P99")[-1] == "1.80e-04" and _column(kl, "P90")[-1] == ""
    for table in (agreement, kl):  # every row fills every column: no cell shifted under another header
        assert len({len(c._cells) for c in table.columns}) == 1

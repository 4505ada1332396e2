"""Every command's numbers, on fixed small settings, against the records saved before the engine refactor
(``tests/golden/``, written by ``golden_runs.py``): a refactor must keep every number (same arithmetic, same
order), apart from the documented key renames (``golden_runs.RENAMES``).

One change on purpose since: the SQNR sums (``quant.primitives.sum_of_squares``) are float32 row sums added in
float64 since 2026-12-01, so that they do not depend on the number of threads; the records' ``sqnr_db`` values
(whole-tensor float32 sums) differ from the fresh ones by less than 1e-8 relative, within REL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from golden_runs import ENV, compare, run_all
from tiny_models import requires_smollm2

GOLDEN = Path(__file__).resolve().parent / "golden"
# Identical numbers are expected on the machine that wrote the records; the tolerance only absorbs a different
# BLAS thread count (float32 reductions in another order), far below any reported digit.
REL = 1e-5


def _check(records: dict) -> None:
    diffs = []
    for name, fresh in records.items():
        diffs += compare(json.loads((GOLDEN / f"{name}.json").read_text(encoding="utf-8")), fresh, name, REL)
    assert not diffs, "\n".join(diffs[:40])


@pytest.mark.slow
def test_every_command_keeps_its_numbers(tmp_path):
    records = run_all(tmp_path)
    assert len(records) == 15
    _check(records)


@pytest.mark.slow
@requires_smollm2
def test_real_model_keeps_its_numbers(tmp_path):
    if not (Path(ENV["INFOEVAL_DATA_DIR"]) / "tinyshakespeare" / "input.txt").is_file():
        pytest.skip("Tiny Shakespeare is not in $INFOEVAL_DATA_DIR or ../shared/data")
    records = run_all(tmp_path, real=True, only={"quantize-compare-smollm2", "compress-bits-smollm2"})
    assert set(records) == {"quantize-compare-smollm2", "compress-bits-smollm2"}
    _check(records)

"""Every command's numbers, on fixed small settings, against the records saved before the engine refactor
(``tests/golden/``, written by ``golden_runs.py``): a refactor must keep every number (same arithmetic, same
order), apart from the documented key renames (``golden_runs.RENAMES``).

One change on purpose since: the SQNR sums (``quant.primitives.sum_of_squares``) are float32 row sums added in
float64 since 2026-12-01, so that they do not depend on the number of threads; the records' ``sqnr_db`` values
(whole-tensor float32 sums) differ from the fresh ones by less than 1e-8 relative, within REL.

Another CPU rounds otherwise (tests/machine.py): on 2026-12-02 a machine of other arithmetic gave, with the same
code, numbers within 9e-5 relative of the records (3e-4 for differences of nearly equal numbers, 3e-7 absolute)
and other reference tensor bits. Its own records, written by that code there, are in
``tests/golden/machines/<fingerprint>/`` and compared like the records of the records' machine; on a machine
with none, the records are compared within another CPU's rounding, digests of bits skipped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from golden_runs import ENV, compare, run_all
from machine import fingerprint
from tiny_models import requires_smollm2

GOLDEN = Path(__file__).resolve().parent / "golden"
# Identical numbers are expected on a machine of the records' arithmetic; the tolerance only absorbs a different
# BLAS thread count (float32 reductions in another order), far below any reported digit.
REL = 1e-5


def _check(records: dict) -> None:
    """Against the records of this machine's arithmetic (``tests/golden/machines/<fingerprint>/``, written by the
    code that matched the records before the refactor) within REL, every digest equal, where there are some;
    else against the records before the refactor within another CPU's rounding (tests/machine.py)."""
    own = GOLDEN / "machines" / fingerprint()
    diffs = []
    for name, fresh in records.items():
        mine = own / f"{name}.json"
        if mine.is_file():
            diffs += compare(json.loads(mine.read_text(encoding="utf-8")), fresh, name, REL, renamed=False)
        else:
            diffs += compare(
                json.loads((GOLDEN / f"{name}.json").read_text(encoding="utf-8")), fresh, name, other_cpu=True
            )
    assert not diffs, f"this machine's fingerprint: {fingerprint()}\n" + "\n".join(diffs[:40])


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


def test_another_cpu_is_held_to_its_rounding_and_skips_digests():
    digest, other = "ab" * 32, "cd" * 32
    golden = {"kl": 0.0030740431, "delta": -0.00085129, "scheme": "int4-g32", "tensors": {"entropy": digest}}
    near = {"kl": 0.003074051414, "delta": -0.00085158, "scheme": "int4-g32", "tensors": {"entropy": other}}
    assert compare(golden, near, "x", renamed=False, other_cpu=True) == []
    strict = compare(golden, near, "x", REL, renamed=False)  # the records' own arithmetic: kl is within REL, no more
    assert [d.split(" ")[1] for d in strict] == ["delta", "tensors/entropy"]
    far = {**near, "kl": 0.0030740431 * (1 + 3e-4) + 1e-6}
    assert [d.split(" ")[1] for d in compare(golden, far, "x", renamed=False, other_cpu=True)] == ["kl"]
    assert len(compare(golden, far, "x", REL, renamed=False)) == 3  # and within REL only on the records' arithmetic
    renamed = {**near, "scheme": "int4-g64", "tensors": {"entropy": "not a digest"}}
    assert len(compare(golden, renamed, "x", renamed=False, other_cpu=True)) == 2
    assert len(fingerprint()) == 16 and fingerprint() == fingerprint()


def test_one_positions_value_keeps_its_absolute_rounding_on_another_cpu():
    """A maximum or quantile is one position's KL, a difference of float32 log-probabilities: another CPU moves it by
    its absolute rounding (machine.OTHER_POSITION_ABS), which a mean of many positions averages away."""
    golden = {"kl_max": 0.03789256513118744, "kl_p90": 0.006328327348455787, "kl_mean": 0.0033602513681714186}
    seen = {"kl_max": 0.03788686543703079, "kl_p90": 0.006330113857984543, "kl_mean": 0.0033602513681714186}
    assert compare(golden, seen, "x", renamed=False, other_cpu=True) == []  # the CI machine of 2026-12-05
    mean_moved = {**seen, "kl_mean": 0.0033602513681714186 + 5.7e-6}  # the same shift in a mean is a difference
    assert [d.split(" ")[1] for d in compare(golden, mean_moved, "x", renamed=False, other_cpu=True)] == ["kl_mean"]
    tail_far = {**seen, "kl_p90": 0.006328327348455787 + 2e-5}  # more than a few ulps of one position's log-probs
    assert [d.split(" ")[1] for d in compare(golden, tail_far, "x", renamed=False, other_cpu=True)] == ["kl_p90"]
    assert [d.split(" ")[1] for d in compare(golden, seen, "x", REL, renamed=False)] == ["kl_max", "kl_p90"]

"""The report page's data for compress-bits and gate runs and for several runs on one page (the browser tests are
in test_report_browser.py): a gate's positions carry the same windows, tokens and top-k as the other commands on
the same text; `--html` on compress-bits and gate writes the page `infoeval report` makes from the run folder; the
comparison table lists every variant of every run; runs of different texts, models or protocols are refused with
one line (exit 2, nothing written) unless --separate."""

from __future__ import annotations

import copy
import json
import re

import numpy as np
import pandas as pd
import pytest
from cli_run import run_cli

from infoeval.errors import UsageError
from infoeval.report.packed import unpack
from infoeval.report.table import check_comparable, comparison_rows, shared_key


def _cli(args, cwd):
    return run_cli(args, cwd=cwd)


def _payload(path) -> dict:
    text = path.read_text(encoding="utf-8")
    return json.loads(
        re.search(r'<script type="application/json" id="data">(.*?)</script>', text, re.S)
        .group(1)
        .replace("<\\/", "</")
    )


def _same_top(a: pd.DataFrame, b: pd.DataFrame, ids: list[str], rtol: float) -> None:
    """Equal top-k: the probabilities to ``rtol``, and the ids of every row's tokens more likely than its k-th
    (tokens tied with others, which the tiny model has many of, may come in any order)."""
    pa, pb = a[[c[:-3] + "_p" for c in ids]].to_numpy(), b[[c[:-3] + "_p" for c in ids]].to_numpy()
    np.testing.assert_allclose(pa, pb, rtol=rtol, atol=1e-7)
    ia, ib = a[ids].to_numpy(), b[ids].to_numpy()
    for i in range(len(a)):
        clear = pb[i] > pb[i, -1] * (1 + 4 * rtol)
        assert set(ia[i][clear]) == set(ib[i][clear]), i
    assert (ia == ib).mean() > 0.9


def test_gate_positions_match_the_other_commands(report_runs):
    gate, cb = pd.read_csv(report_runs / "gate" / "positions.csv"), pd.read_csv(report_runs / "cb" / "positions.csv")
    qc = pd.read_csv(report_runs / "qc" / "positions.csv")
    qc = qc[qc["variant"] == "int4-g32"].reset_index(drop=True)
    assert len(gate) == len(cb) == len(qc) == 300
    for c in ("window", "token_id", "context"):
        np.testing.assert_array_equal(gate[c], cb[c])
    ref_ids, cand_ids = [f"ref_top{j}_id" for j in range(1, 6)], [f"top{j}_id" for j in range(1, 6)]
    # the reference file keeps log-probabilities in 16 bits; the candidate's come from its own logits
    _same_top(gate, cb, ref_ids, rtol=2e-3)
    _same_top(gate, qc, cand_ids, rtol=1e-4)
    assert (gate[[c[:-3] + "_p" for c in cand_ids]].sum(axis=1) <= 1 + 1e-5).all()
    vocab = json.loads((report_runs / "gate" / "positions.tokens.json").read_text(encoding="utf-8"))
    assert {str(i) for i in np.unique(gate[["token_id", *ref_ids, *cand_ids]].to_numpy())} <= set(vocab)


def test_gate_topk_beyond_the_reference_file_is_refused(report_runs):
    r = _cli(
        [
            "gate",
            "--reference",
            report_runs / "ref.safetensors",
            "--scheme",
            "int4-g32",
            "--topk",
            9,
            "--json",
            report_runs / "x.json",
            "-q",
        ],
        report_runs,
    )
    assert r.returncode == 2 and "top-K its file keeps" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (report_runs / "x.json").exists()


@pytest.mark.parametrize("name", ["cb", "gate", "seq"])
def test_html_option_writes_the_page_report_makes(report_runs, name):
    page, again = report_runs / f"{name}.html", report_runs / f"{name}-again.html"
    r = _cli(["report", report_runs / name, "-o", again], report_runs)
    assert r.returncode == 0, r.stderr
    a, b = _payload(page), _payload(again)
    for p in (a, b):
        p["sections"][0].pop("title")
    assert a == b and a["comparison"] is None
    sec, frame = a["sections"][0], pd.read_csv(report_runs / name / "positions.csv")
    assert sec["n"] == len(frame) and unpack(sec["token"]).tolist() == frame["token_id"].tolist()
    result = json.loads((report_runs / name / "result.json").read_text())
    if name == "cb":
        assert sec["kind"] == "compress-bits" and sec["variants"] == {} and sec["compressors"][0]["method"] == "utf-8"
        nll = frame["nll_ref"].to_numpy()
        assert sec["ref"]["worst"][0] == int(np.argmax(nll)) and len(sec["ref"]["worst"]) == 30
        return
    (variant,) = sec["variants"]
    assert sec["kind"] == "gate" and sec["gate"]["passed"] == result["passed"]
    assert [v["limit"] for v in sec["gate"]["verdicts"]] == [v["limit"] for v in result["verdicts"]]
    np.testing.assert_array_equal(unpack(sec["variants"][variant]["kl"]), frame["kl"].to_numpy(np.float32))
    if name == "seq":  # only the windows the sequential gate used
        assert sec["gate"]["sequential"]["tokens_used"] == result["sequential"]["tokens_used"] == sec["n"] < 300
        assert np.all(np.diff(unpack(sec["position"])) > 0)


def test_several_runs_share_one_comparison_table(report_runs, tiny_llama_dir):
    out = report_runs / "all.html"
    r = _cli(["report", report_runs / "qc", report_runs / "cb", report_runs / "gate", "-o", out], report_runs)
    assert r.returncode == 0, r.stderr
    p = _payload(out)
    assert [s["kind"] for s in p["sections"]] == ["quantize-compare", "compress-bits", "gate"]
    rows = p["comparison"]
    assert [(row["command"], row["variant"]) for row in rows] == [
        ("quantize-compare", "int4-g32"),
        ("quantize-compare", "int8-channel"),
        ("compress-bits", "(the model alone)"),
        ("gate", f"{tiny_llama_dir.name} int4-g32"),
    ]
    qc = json.loads((report_runs / "qc" / "result.json").read_text())
    assert rows[0]["kl_mean"] == qc["variants"][0]["metrics"]["kl_mean"] and rows[0]["passed"] is None
    assert rows[3]["passed"] == json.loads((report_runs / "gate" / "result.json").read_text())["passed"]
    # the gate's KL is estimated from the reference file's top-k and tail samples: close to the full one, not equal
    assert rows[3]["kl_mean"] == pytest.approx(rows[0]["kl_mean"], rel=0.1)


def test_mismatched_runs_exit_2_unless_separate(report_runs, tiny_llama_dir):
    other = report_runs / "ctx16"
    r = _cli(
        [
            "compress-bits",
            tiny_llama_dir,
            "--text",
            report_runs / "text.txt",
            "--ctx",
            16,
            "--max-tokens",
            300,
            "--topk",
            2,
            "--out-dir",
            other,
            "-q",
        ],
        report_runs,
    )
    assert r.returncode == 0, r.stderr
    r = _cli(["report", report_runs / "qc", other, "-o", report_runs / "mixed.html"], report_runs)
    assert r.returncode == 2 and "protocol" in r.stderr and "--separate" in r.stderr, r.stderr
    assert (
        len([line for line in r.stderr.splitlines() if line.strip()]) == 1 and not (report_runs / "mixed.html").exists()
    )
    r = _cli(["report", report_runs / "qc", other, "--separate", "-o", report_runs / "mixed.html"], report_runs)
    assert r.returncode == 0, r.stderr
    assert (
        _payload(report_runs / "mixed.html")["comparison"] is None
        and len(_payload(report_runs / "mixed.html")["sections"]) == 2
    )


def _result(**changes) -> dict:
    base = {
        "schema": "infoeval/compress-bits/3",
        "reference": {"tokens": 300, "ppl": 9.0},
        "provenance": {
            "model": {"spec": "m", "sha256": "aa", "dtype": "float32"},
            "text": {"sha256": "tt"},
            "protocol": {"name": "rolling", "ctx": 32, "stride": 32, "prefix_id": 0},
        },
    }
    out = copy.deepcopy(base)
    for path, value in changes.items():
        *head, last = path.split("__")
        d = out
        for k in head:
            d = d[k]
        d[last] = value
    return out


@pytest.mark.parametrize(
    ("path", "value", "key"),
    [
        ("provenance__model__sha256", "bb", "model"),
        ("provenance__model__dtype", "bfloat16", "dtype"),
        ("provenance__text__sha256", "uu", "text"),
        ("provenance__protocol__ctx", 64, "protocol"),
        ("provenance__protocol__prefix_id", None, "protocol"),
        ("reference__tokens", 299, "positions"),
    ],
)
def test_check_comparable_names_the_first_difference(path, value, key):
    a, b = _result(), _result(**{path: value})
    check_comparable([a, _result()], ["a", "b"])  # equal keys pass
    with pytest.raises(UsageError, match=f"differ in the reference's {key} "):
        check_comparable([a, b], ["a", "b"])
    assert shared_key(a) != shared_key(b)


def test_a_gate_is_keyed_by_its_reference_files_provenance():
    plain = _result()
    gate = {
        "schema": "infoeval/gate/3",
        "reference": plain["reference"],
        "passed": False,
        "metrics": {"kl_mean": 0.1, "tokens": 300},
        "candidate": {"spec": "c", "scheme": "int4"},
        "provenance": {"model": {"spec": "c", "sha256": "zz"}, "reference_provenance": plain["provenance"]},
    }
    check_comparable([plain, gate], ["plain", "gate"])
    (row,) = [r for r in comparison_rows([plain, gate], ["plain", "gate"]) if r["command"] == "gate"]
    assert row["variant"] == "c int4" and row["passed"] is False and row["kl_mean"] == 0.1

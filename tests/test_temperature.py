"""The temperature table: softmax(z/T) by hand, its limits, and a model's next-token logits."""

from __future__ import annotations

import math

import pytest
import torch
from tiny_models import as_json

from infoeval.errors import UsageError
from infoeval.models import load_model
from infoeval.speculative import temperature as tm
from infoeval.speculative.results import temperature_frame

Z = [9.1, 6.2, 4.6, 3.3]


def _softmax(z, t):
    e = [math.exp((x - max(z)) / t) for x in z]
    return [x / sum(e) for x in e]


@pytest.mark.parametrize("t", [0.25, 1.0, 4.0])
def test_rows_by_hand(t):
    (row,) = tm.temperature_rows(torch.tensor(Z, dtype=torch.float64), [t], [0, 1, 2, 3])
    p = _softmax(Z, t)
    assert row["probs"] == pytest.approx(p, rel=1e-9, abs=1e-300)
    assert row["top_prob"] == pytest.approx(max(p)) and row["tail_mass"] == pytest.approx(1 - max(p))
    assert row["entropy_bits"] == pytest.approx(-sum(x * math.log2(x) for x in p if x > 0), rel=1e-9, abs=1e-12)
    assert row["other"] == pytest.approx(0.0, abs=1e-12)


def test_worked_example_in_the_docstring():
    rows = tm.temperature_rows(torch.tensor(Z, dtype=torch.float64), [1.0, 4.0], [0, 1, 2, 3])
    assert [round(x, 4) for x in rows[0]["probs"]] == [0.9353, 0.0515, 0.0104, 0.0028]
    assert round(rows[0]["entropy_bits"], 4) == 0.4029 and round(rows[1]["entropy_bits"], 4) == 1.7769


def test_limits():
    hot, cold = tm.temperature_rows(torch.tensor(Z, dtype=torch.float64), [1e6, 1e-3], [0, 1, 2, 3])
    assert hot["entropy_bits"] == pytest.approx(2.0, abs=1e-6) and hot["top_prob"] == pytest.approx(0.25, abs=1e-6)
    assert cold["entropy_bits"] == pytest.approx(0.0, abs=1e-12) and cold["top_prob"] == 1.0
    ent = [r["entropy_bits"] for r in tm.temperature_rows(torch.tensor(Z, dtype=torch.float64), [0.5, 1, 2, 4, 8], [0])]
    assert ent == sorted(ent)  # entropy rises with T


def test_shown_subset_and_other():
    (row,) = tm.temperature_rows(torch.tensor(Z, dtype=torch.float64), [1.0], [0, 2])
    p = _softmax(Z, 1.0)
    assert row["probs"] == pytest.approx([p[0], p[2]]) and row["other"] == pytest.approx(p[1] + p[3])
    assert row["entropy_bits"] == pytest.approx(-sum(x * math.log2(x) for x in p))  # over every class


def test_table_from_logits():
    r = as_json(tm.temperature_table([1.0, 2.0], logits=Z, labels="cat,lion,lynx,dog"))
    assert r["labels"] == ["cat", "lion", "lynx", "dog"] and r["logits"] == pytest.approx(Z)
    frame = temperature_frame(r)
    assert list(frame.columns) == [
        "temperature",
        "p(cat)",
        "p(lion)",
        "p(lynx)",
        "p(dog)",
        "other",
        "top_prob",
        "tail_mass",
        "entropy_bits",
    ]
    assert r["schema"].startswith("infoeval/temperature/")


def test_table_from_a_model(tiny_llama_dir):
    lm = load_model(str(tiny_llama_dir), torch.device("cpu"), torch.float32)
    r = as_json(tm.temperature_table([0.5, 1.0], loaded=lm, prompt="The dictionary", top=5))
    ids = lm.tokenizer("The dictionary").input_ids
    with torch.inference_mode():
        z = lm.model(input_ids=torch.tensor([ids])).logits[0, -1].double()
    p = torch.softmax(z, -1)
    top = torch.argsort(z, descending=True)[:5].tolist()
    assert r["provenance"]["source"]["token_ids"] == top and r["provenance"]["source"]["prompt_tokens"] == len(ids)
    row = r["rows"][1]
    assert row["probs"] == pytest.approx(p[top].tolist(), rel=1e-5)
    assert row["other"] == pytest.approx(1 - float(p[top].sum()), rel=1e-5)
    assert row["entropy_bits"] == pytest.approx(float(-(p * p.log()).sum()) / math.log(2), rel=1e-5)


@pytest.mark.parametrize("spec", ["1", "a,b", "1,inf", ""])
def test_bad_logits(spec):
    with pytest.raises(UsageError, match="logits"):
        tm.parse_logits(spec)


def test_label_count_must_match():
    with pytest.raises(UsageError, match="labels"):
        tm.parse_labels("a,b", 3)
    assert tm.parse_labels(None, 2) == ["z0", "z1"]

"""The gate's noise floor on a tiny model: made from the reference's weights whatever the candidate (the same
floor numbers for a --scheme candidate quantized in place, for the reference's own model, and for a checkpoint of
its own, beside which the reference's model is loaded); a limit below it fails closed with its one line, and
--floor off judges it as before; the sequential gate runs it on the first windows of its visiting order."""

from __future__ import annotations

import pytest
import torch
from tiny_models import _save, as_json, tiny_reference

from infoeval.gating.gate import GateSettings, build_reference, run_gate
from infoeval.gating.limits import floor_line, parse_limits
from infoeval.gating.sequential_gate import SequentialSettings, run_sequential_gate
from infoeval.input.settings import ModelSettings, TextSettings, WindowSettings
from infoeval.measure.floor import floor_windows
from infoeval.measure.stopping import visit_order

pytestmark = pytest.mark.usefixtures("one_thread")
LAX = {"max_kl_mean": 10.0, "min_top1": 0.0}
CPU32 = ModelSettings("", "cpu", "float32")


@pytest.fixture(scope="module")
def ref(tmp_path_factory, tiny_llama_dir, tiny_text):
    return tiny_reference(tmp_path_factory.mktemp("floor-gate"), tiny_llama_dir, tiny_text, 640)


def _gate(ref, candidate=None, scheme=None, limits=LAX, **kw):
    gs = GateSettings(ref, candidate, scheme, tuple(parse_limits(limits)), **kw)
    return as_json(run_gate(gs, ModelSettings(candidate or "", "cpu", "float32")))


def test_the_floor_is_the_references_whatever_the_candidate(ref, tiny_llama_dir, tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from infoeval.gating import candidate

    other = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    with torch.no_grad():
        other.model.layers[0].mlp.down_proj.weight.mul_(1.01)
    _save(other, AutoTokenizer.from_pretrained(tiny_llama_dir), tmp_path / "other")
    int4, _ = _gate(ref, None, "int4-g32")
    itself, _ = _gate(ref)  # the reference's own model, nothing applied
    own, _ = _gate(ref, str(tmp_path / "other"))  # a checkpoint of its own: the reference's model is loaded beside it
    loads = []
    real = candidate._reference_floor
    monkeypatch.setattr(candidate, "_reference_floor", lambda *a: loads.append(a) or real(*a))
    named, _ = _gate(ref, str(tiny_llama_dir), "int4-g32")  # the reference's model by name: not loaded twice
    f = int4["floor"]
    assert f["windows"] == list(floor_windows(range(10), 1, "sampled", 0)) and f["mode"] == "sampled"
    assert (
        f["metrics"] == itself["floor"]["metrics"] == own["floor"]["metrics"] == named["floor"]["metrics"]
    )  # quantized in place, yet the reference's weights
    assert not loads and named["metrics"] == int4["metrics"] and own["metrics"] != itself["metrics"]
    assert (
        0 < f["metrics"]["kl_mean"] < int4["metrics"]["kl_mean"]
        and f["candidate"]["x_floor"] > 10
        and not f["candidate"]["at_floor"]
    )
    assert itself["floor"]["candidate"]["at_floor"]  # the reference against itself cannot be told from the floor


def test_a_limit_below_the_floor_fails_closed_unless_floor_off(ref):
    tight = {"max_kl_mean": 1e-12, "min_top1": 0.0}
    r, _ = _gate(ref, None, "int8-channel", tight)
    v = r["verdicts"][0]
    assert not r["passed"] and v["below_floor"] and v["judged"] == "below the noise floor" and v["floor_value"] > 1e-12
    assert floor_line(v).startswith("max_kl_mean 1e-12 is below the noise floor")
    assert r["verdicts"][1]["passed"] and "below_floor" not in r["verdicts"][1]
    off, _ = _gate(ref, None, "int8-channel", tight, floor="off")
    assert "floor" not in off and not off["passed"] and off["verdicts"][0]["judged"] != "below the noise floor"
    assert off["metrics"] == r["metrics"]  # the candidate's numbers do not depend on the floor beside it
    lax, _ = _gate(ref, None, "int8-channel")
    assert lax["passed"] and not any(v.get("below_floor") for v in lax["verdicts"])


def test_full_floor_and_its_seed(ref):
    full, _ = _gate(ref, None, "int8-channel", floor="full")
    assert full["floor"]["windows"] == list(range(10))
    other, _ = _gate(ref, None, "int8-channel", floor_seed=3)
    assert other["floor"]["seed"] == 3 and other["floor"]["windows"] == list(floor_windows(range(10), 1, "sampled", 3))


def test_sequential_gate_runs_the_floor_on_the_first_windows_of_its_order(ref):
    gs = GateSettings(ref, None, "int8-channel", tuple(parse_limits({"max_kl_mean": 10.0})))
    r, _ = as_json(run_sequential_gate(gs, SequentialSettings(), CPU32))
    order = visit_order(10, 0)
    assert r["floor"]["windows"] == sorted(order[:2].tolist()) and r["floor"]["metrics"]["kl_mean"] > 0
    gs = GateSettings(ref, None, "int8-channel", tuple(parse_limits({"max_kl_mean": 1e-12})))
    r, _ = as_json(run_sequential_gate(gs, SequentialSettings(), CPU32))
    assert not r["passed"] and r["verdicts"][0]["below_floor"]


def test_reference_seeds_draw_different_tails_on_a_cpu(ref, tiny_llama_dir, tmp_path):
    """A CPU generator uses only the low 32 bits of a seed: seed · 2³² + window gave every --seed seed 0's tail
    samples. Seed 0 keeps its draws (the window index, as before); another seed draws others, the same each time."""
    from infoeval.gating.reference_file import read_reference

    text = ref.parent / "text.txt"

    def tails(seed: int, name: str):
        out = tmp_path / name
        build_reference(
            ModelSettings(str(tiny_llama_dir), "cpu", "float32"),
            TextSettings(text=text, max_tokens=640),
            WindowSettings(ctx=64),
            out,
            top_k=16,
            tail_samples=32,
            seed=seed,
        )
        return read_reference(out).dist.tail_ids

    zero, one, again = tails(0, "s0.safetensors"), tails(1, "s1.safetensors"), tails(1, "s1b.safetensors")
    assert (zero == read_reference(ref).dist.tail_ids).all()  # seed 0: the draws of every seed-0 file
    assert (one == again).all() and (one != zero).float().mean() > 0.5

"""quantize-compare --stream layers (the plan ``streamed``): the same result as the lockstep, every number, from a
model read one decoder layer at a time; chosen by --plan auto when nothing else fits; refused with one line where it
cannot run."""

from __future__ import annotations

import math

import pytest

import infoeval
from infoeval.errors import UsageError

RUN = {"max_tokens": 320, "ctx": 64, "schemes": ("int4-g32", "int8-channel"), "device": "cpu", "progress": False}


def _numbers(tree, path=""):
    """Every number of a result's JSON but the timings and the memory plan, by its path."""
    if isinstance(tree, dict):
        out = {}
        for k, v in tree.items():
            if k not in ("timings", "memory_plan", "provenance"):
                out |= _numbers(v, f"{path}/{k}")
        return out
    if isinstance(tree, list):
        return {k: v for i, x in enumerate(tree) for k, v in _numbers(x, f"{path}/{i}").items()}
    return {path: tree} if isinstance(tree, (int, float)) and not isinstance(tree, bool) else {}


@pytest.fixture(scope="module")
def both(tiny_qwen3_dir, tiny_text, tmp_path_factory):
    text = tmp_path_factory.mktemp("text") / "t.txt"
    text.write_text(tiny_text, encoding="utf-8")
    kw = {**RUN, "model": str(tiny_qwen3_dir), "text": text}
    return infoeval.compare(**kw, plan="lockstep"), infoeval.compare(**kw, stream="layers"), kw


def test_the_streamed_plan_gives_the_lockstep_s_numbers(both):
    lockstep, streamed, _ = both
    a, b = lockstep.to_json(), streamed.to_json()
    assert streamed.memory_plan["plan"] == "streamed" and lockstep.memory_plan["plan"] == "lockstep"
    x, y = _numbers(a), _numbers(b)
    assert x.keys() == y.keys() and len(x) > 100
    worst = max(abs(x[k] - y[k]) for k in x if isinstance(x[k], float) and math.isfinite(x[k]))
    assert worst <= 1e-6 and all(x[k] == y[k] for k in x if isinstance(x[k], int))
    assert a["floor"]["windows"] == b["floor"]["windows"]


def test_the_streamed_run_records_what_it_read(both, tiny_qwen3_dir):
    lockstep, streamed, _ = both
    stored = sum(p.stat().st_size for p in tiny_qwen3_dir.glob("*.safetensors"))
    reads = streamed.memory_plan["stream"]
    assert reads["layers"] == 2 and 0.95 * stored <= reads["bytes_read"] <= stored  # the file less its header
    assert streamed.timings["stream_read_s"] > 0 and streamed.timings["stream_compute_s"] > 0
    # the model's provenance as a loaded folder's: the weights' sha256, architecture, parameters, tokenizer
    assert streamed.to_json()["provenance"]["model"] == lockstep.to_json()["provenance"]["model"]


def test_auto_streams_when_nothing_else_fits(both):
    """A budget between the streamed plan's estimate and the others' (on this tiny model they differ by less than a
    MiB: the process dominates): auto takes the streamed plan and says why."""
    from infoeval.comparison.memory_plan import estimate_run
    from infoeval.input.settings import ModelSettings
    from infoeval.quant.variant_settings import VariantSettings

    _, streamed, kw = both
    assert set(streamed.memory_plan["estimates"]) == {"streamed"}  # --stream layers: the one plan estimated
    model, settings = ModelSettings(kw["model"], "cpu", "float32"), VariantSettings(schemes="int4-g32")
    peaks = {
        p: estimate_run(model, settings, kw["ctx"], p, kw["max_tokens"]).total
        for p in ("lockstep", "reference-first", "streamed")
    }
    assert peaks["streamed"] < min(peaks["lockstep"], peaks["reference-first"])
    budget = (peaks["streamed"] + min(peaks["lockstep"], peaks["reference-first"])) / 2 / 2**30
    chosen = infoeval.compare(**{**kw, "schemes": ("int4-g32",)}, memory_budget=budget).memory_plan
    assert chosen["plan"] == "streamed", chosen["reason"]
    assert {p: e["peak_bytes"] for p, e in chosen["estimates"].items()} == peaks
    assert chosen["reason"].startswith("lockstep's estimated 0.5 GiB and reference-first's estimated 0.5 GiB are over")


@pytest.mark.parametrize("method, library", [("hqq:int4-g64", "hqq"), ("quanto:int4", "optimum.quanto")])
def test_a_library_method_streams_layer_by_layer(both, method, library):
    """A method whose library quantizes one Linear at a time runs its own modules in each layer as it is read: the
    lockstep's numbers and report (SQNR, stored bytes) again."""
    pytest.importorskip(library)
    _, _, kw = both
    run = {**kw, "schemes": (method,), "floor": "off"}
    lockstep, streamed = infoeval.compare(**run, plan="lockstep"), infoeval.compare(**run, stream="layers")
    a, b = lockstep.to_json(), streamed.to_json()
    x, y = _numbers(a), _numbers(b)
    drop = [k for k in x if k.endswith("/quantize_s") or "/seconds" in k]  # the library's own timing
    assert x.keys() == y.keys() and len(x) > 50
    worst = max(abs(x[k] - y[k]) for k in x if k not in drop and isinstance(x[k], float) and math.isfinite(x[k]))
    assert worst <= 1e-6


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"plan": "lockstep"}, r"^stream layers is a plan of its own .* leave out plan lockstep$"),
        ({"until_se": 0.01}, r"^until_se runs with plan lockstep or auto"),
        ({"schemes": ("autoround:int4-g64",)}, r"cannot run autoround:int4-g64: it calibrates over the whole model"),
        ({"memory_budget": 0.01}, r"^streamed \(estimated .* GiB\) cannot run within the memory budget of .* GiB"),
        ({"max_tokens": None}, r"^stream layers holds every window's hidden states: give max_tokens"),
    ],
)
def test_what_cannot_stream_is_refused_before_loading(both, extra, message):
    _, _, kw = both
    if "autoround" in str(extra.get("schemes")):
        pytest.importorskip("auto_round")
    with pytest.raises(UsageError, match=message):
        infoeval.compare(**{**kw, "stream": "layers", **extra})


def test_a_model_that_is_not_a_safetensors_folder_is_refused(tmp_path, tiny_llama_dir):
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "config.json").write_text((tiny_llama_dir / "config.json").read_text(), encoding="utf-8")
    (folder / "pytorch_model.bin").write_bytes(b"")
    for model, what in (
        (str(folder), r"a folder without safetensors \(pytorch_model.bin\)"),
        ("smollm2-135m", "a GGUF file"),
    ):
        with pytest.raises(UsageError, match=f"^stream layers reads a model folder's safetensors .* is {what}$"):
            infoeval.compare(model=model, stream="layers", max_tokens=64)

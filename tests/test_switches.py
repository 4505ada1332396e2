"""Every performance mechanism switched off (``INFOEVAL_OFF``, infoeval/switches.py) leaves the numbers as they
are: quantize-compare's and sensitivity --by block's results equal with all on and all off."""

from __future__ import annotations

import json

import pytest

import infoeval
from infoeval import switches


def _numbers(result) -> dict:
    def strip(x):
        if isinstance(x, dict):
            return {
                k: strip(v)
                for k, v in x.items()
                if not k.endswith("_s")
                and k not in ("timings", "provenance", "memory_plan", "block_cache", "layers_run_fraction")
            }
        return [strip(v) for v in x] if isinstance(x, list) else x

    return strip(json.loads(json.dumps(result.to_json())))


@pytest.fixture(scope="module")
def text(tmp_path_factory, tiny_text):
    path = tmp_path_factory.mktemp("switches") / "text.txt"
    path.write_text(tiny_text, encoding="utf-8")
    return path


def test_a_switch_names_a_mechanism(monkeypatch):
    monkeypatch.setenv(switches.ENV, "shared_batches, heap")
    assert switches.off("shared_batches") and switches.off("heap") and not switches.off("blocks")
    with pytest.raises(KeyError, match="unknown mechanism 'fast'"):
        switches.off("fast")


def test_quantize_compare_numbers_do_not_depend_on_the_mechanisms(tiny_llama_dir, text, monkeypatch):
    kw = dict(schemes=("int8-channel", "int4-g32"), text=text, ctx=64, max_tokens=400, device="cpu")
    on = _numbers(infoeval.compare(str(tiny_llama_dir), **kw))
    monkeypatch.setenv(switches.ENV, ",".join(switches.MECHANISMS))
    assert _numbers(infoeval.compare(str(tiny_llama_dir), **kw)) == on


def test_sensitivity_numbers_do_not_depend_on_the_block_cache(tiny_llama_dir, text, monkeypatch):
    kw = dict(by="block", schemes=("int4-g32",), text=text, ctx=64, max_tokens=256, device="cpu")
    on = _numbers(infoeval.sensitivity(str(tiny_llama_dir), **kw))
    monkeypatch.setenv(switches.ENV, "blocks")
    assert _numbers(infoeval.sensitivity(str(tiny_llama_dir), **kw)) == on

"""The noise floor: its weights (one bfloat16 rounding step at most, seeded), its windows (a seeded share, at
least 2, within 10 % of the forward passes), its columns in the lockstep (only on its windows, the bits of a
run on every window there), its metrics, and each variant read against it."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from infoeval import engine
from infoeval.comparison import compare as compare_pipeline
from infoeval.input.tokens import TokenStream
from infoeval.input.windows import rolling_windows
from infoeval.measure import floor as fm
from infoeval.models import load_model
from infoeval.quant import apply
from infoeval.quant.floor import FLOOR, STEP, build_floor, floor_weight, stochastic_round
from infoeval.quant.schemes import parse_scheme

pytestmark = pytest.mark.usefixtures("one_thread")
CPU = torch.device("cpu")


def _w(seed=0, shape=(64, 96), dtype=torch.float32):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def test_float32_floor_weight_moves_each_weight_by_at_most_one_step_and_is_seeded():
    w = _w()
    a, b, c = floor_weight(w, 0, 5), floor_weight(w, 0, 5), floor_weight(w, 1, 5)
    assert a.dtype == torch.float32 and torch.equal(a, b) and not torch.equal(a, c)
    assert not torch.equal(floor_weight(w, 0, 6), a)  # another layer, other noise
    rel = ((a.double() - w.double()) / w.double()).abs()
    assert rel.max() <= STEP * (1 + 2**-20) and rel.max() > STEP * 0.9  # the whole range ±2⁻⁹ is used
    u = (a.double() / w.double() - 1).flatten()
    assert abs(u.mean().item()) < 4 * STEP / np.sqrt(3 * u.numel())  # centred: |mean| within 4 SE of U(±STEP)
    assert torch.equal(w, _w())  # the source is untouched


def test_bfloat16_floor_weight_is_the_weight_or_a_neighbour():
    w = _w(dtype=torch.bfloat16)
    a = floor_weight(w, 3, 0)
    assert a.dtype == torch.bfloat16 and torch.equal(a, floor_weight(w, 3, 0))
    up, down = torch.nextafter(w, torch.full_like(w, torch.inf)), torch.nextafter(w, torch.full_like(w, -torch.inf))
    assert bool(((a == w) | (a == up) | (a == down)).all())
    moved = (a != w).float().mean().item()
    assert 0.02 < moved < 0.6  # a nearest-even cast would have moved none of them


def test_float16_floor_weight_is_within_one_step_and_one_ulp():
    """float16's ulp is 2⁻¹⁰ … 2⁻¹¹ relative: ±2⁻⁹ spans a few of them, and the rounding adds at most one."""
    w = _w(dtype=torch.float16)
    a = floor_weight(w, 3, 0)
    ulp = (torch.nextafter(w, torch.full_like(w, torch.inf)).float() - w.float()).abs()
    assert a.dtype == torch.float16 and bool(((a.float() - w.float()).abs() <= STEP * w.float().abs() + ulp).all())
    assert (a != w).float().mean().item() > 0.5


def test_stochastic_rounding_is_unbiased_and_keeps_representable_values():
    gen = torch.Generator().manual_seed(0)
    exact = torch.tensor([1.0, -2.5, 0.0, 3.0])
    for dtype in (torch.bfloat16, torch.float16):  # (the argument is overwritten: give a copy)
        assert torch.equal(stochastic_round(exact.clone(), dtype, gen).float(), exact)
    x = torch.full((200_000,), 1.0 + 2**-9)  # a quarter of the way from 1 to bfloat16's next value 1 + 2⁻⁷
    for sign in (1.0, -1.0):  # the bit trick of bfloat16 works on the magnitude: the same for negative values
        r = stochastic_round(sign * x, torch.bfloat16, gen).float() * sign
        assert set(r.unique().tolist()) == {1.0, 1.0 + 2**-7}
        assert abs((r == 1.0 + 2**-7).float().mean().item() - 0.25) < 0.005
        assert abs(r.double().mean().item() - (1.0 + 2**-9)) < 4 * 2**-7 * np.sqrt(0.25 * 0.75 / x.numel())  # 4 SE
    h = stochastic_round(torch.full((200_000,), 1.0 + 2**-12), torch.float16, gen).float()  # float16: 1 and 1 + 2⁻¹⁰
    assert set(h.unique().tolist()) == {1.0, 1.0 + 2**-10} and abs((h > 1).float().mean().item() - 0.25) < 0.005


def test_sampled_windows_count_seed_and_modes():
    assert fm.sampled_count(16, 4) == 5 and fm.sampled_count(100, 1) == 8 and fm.sampled_count(5, 1) == 2
    assert fm.sampled_count(1, 4) == 1
    for n, m in [(8, 4), (33, 4), (100, 2), (400, 1)]:
        k = fm.sampled_count(n, m)
        assert k == n or k == fm.MIN_WINDOWS or k / (n * m + k) <= fm.FORWARD_SHARE  # within 8 % of the forward passes
    a = fm.floor_windows(range(40), 4, "sampled", seed=7)
    assert a == fm.floor_windows(range(40), 4, "sampled", seed=7) != fm.floor_windows(range(40), 4, "sampled", seed=8)
    assert len(a) == fm.sampled_count(40, 4) and list(a) == sorted(set(a)) and set(a) <= set(range(40))
    assert fm.floor_windows(range(5), 1, "full") == (0, 1, 2, 3, 4) and fm.floor_windows(range(5), 1, "off") == ()
    assert fm.floor_windows([9, 3, 5, 1], 1, "sampled", first=True) == (3, 9)


def test_versus_floor_flags_a_variant_equal_to_the_floor():
    rng = np.random.default_rng(0)
    floor_kl = rng.exponential(1e-4, 4096).astype(np.float32)
    rows, windows = np.ones(4096, bool), np.repeat(np.arange(16), 256)
    same = fm.versus_floor(floor_kl.copy(), floor_kl, rows, float(floor_kl.mean()), windows)
    assert same["at_floor"] and same["x_floor"] == pytest.approx(1.0) and same["floor_diff"] == 0.0
    noisy = fm.versus_floor(
        floor_kl + rng.normal(0, 1e-6, 4096).astype(np.float32), floor_kl, rows, float(floor_kl.mean()), windows
    )
    assert noisy["at_floor"]  # a difference within its noise
    worse = fm.versus_floor(floor_kl * 3, floor_kl, rows, float(floor_kl.mean()), windows)
    assert not worse["at_floor"] and worse["x_floor"] == pytest.approx(3.0, rel=1e-5)
    m = fm.floor_metrics({"kl": floor_kl, "top1": np.r_[np.zeros(96, bool), np.ones(4000, bool)]}, rows, windows)
    assert m["kl_mean"] == pytest.approx(float(floor_kl.astype(np.float64).mean())) and m[
        "top1_disagree"
    ] == pytest.approx(96 / 4096)
    assert m["kl_p99"] == pytest.approx(float(np.quantile(floor_kl, 0.99))) and m["positions"] == 4096


@pytest.fixture(scope="module")
def tiny(tiny_llama_dir):
    model = load_model(str(tiny_llama_dir), CPU, torch.float32).model
    ids = torch.randint(3, model.config.vocab_size, (330,), generator=torch.Generator().manual_seed(0))
    stream = TokenStream(ids, np.ones(len(ids), dtype=np.int64), None)
    return model, stream, rolling_windows(len(ids), 40)  # 8 windows


def test_floor_layers_are_the_quantized_layers_and_the_reference_is_untouched(tiny):
    model, _, _ = tiny
    floor = build_floor(model, exclude=["*.mlp.down_proj"])
    quantized = [
        r.name
        for r in apply.quantize_variant(model, parse_scheme("int8-channel"), exclude=["*.mlp.down_proj"]).layers
        if r.quantized
    ]
    assert list(floor.weights) == quantized and floor.summary()["layers"] == len(quantized)
    modules = dict(model.named_modules())
    name = quantized[0]
    before = modules[name].weight.detach().clone()
    seen = []
    handle = modules[name].register_forward_hook(lambda m, a, o: seen.append(m.weight.detach().clone()))
    with torch.inference_mode():
        apply.WithVariant(model, floor)(input_ids=torch.tensor([[5, 6, 7]]))
    handle.remove()
    assert torch.equal(seen[0], floor_weight(before, 0, 0)) and torch.equal(modules[name].weight, before)


def test_the_sampled_floor_runs_on_its_windows_only_with_the_bits_of_a_full_floor(tiny):
    model, stream, windows = tiny
    variant = apply.quantize_variant(model, parse_scheme("int8-channel"))
    floor = build_floor(model, seed=1)
    at = fm.floor_windows([w.index for w in windows], 2, "sampled", seed=1)
    assert len(at) == 2
    calls = []
    sampled = compare_pipeline.run_lockstep(
        model, stream, windows, [variant], floor=floor, floor_at=at, on_forward=lambda: calls.append(1)
    )
    full = compare_pipeline.run_lockstep(
        model, stream, windows, [variant], floor=floor, floor_at=[w.index for w in windows]
    )
    assert len(calls) == 2 * len(windows) + len(at)  # the floor's forward passes: its windows only
    rows = fm.floor_rows(sampled.reference["window"], at)
    assert rows.sum() == sum(w.n_scored for w in windows if w.index in at)
    np.testing.assert_array_equal(sampled.floor["kl"][rows], full.floor["kl"][rows])
    assert not sampled.floor["kl"][~rows].any()
    np.testing.assert_array_equal(sampled.variants[variant.name]["kl"], full.variants[variant.name]["kl"])
    # the variants' and the reference's bits do not depend on the floor running beside them
    alone = compare_pipeline.run_lockstep(model, stream, windows, [variant])
    np.testing.assert_array_equal(alone.variants[variant.name]["kl"], sampled.variants[variant.name]["kl"])
    np.testing.assert_array_equal(alone.reference["nll"], sampled.reference["nll"])
    # shared batches (the blocks of several windows at once) and one window at a time agree on the floor's rows
    reducer = compare_pipeline.lockstep_reducer([])
    roles = {"reference": model, FLOOR: apply.WithVariant(model, floor)}
    schema = {f"{FLOOR}/kl": np.float32}
    one = engine.run(roles, stream.ids, engine.plan(windows), None, reducer, schema, only={FLOOR: frozenset(at)})
    many = engine.run(
        roles, stream.ids, engine.plan_shared(windows, 4 * 40), None, reducer, schema, only={FLOOR: frozenset(at)}
    )
    np.testing.assert_array_equal(one[f"{FLOOR}/kl"], many[f"{FLOOR}/kl"])
    np.testing.assert_array_equal(one[f"{FLOOR}/kl"][rows], sampled.floor["kl"][rows])


def test_floor_kl_is_small_nonnegative_and_below_int8(tiny):
    model, stream, windows = tiny
    variant = apply.quantize_variant(model, parse_scheme("int8-channel"))
    floor = build_floor(model)
    cols = compare_pipeline.run_lockstep(
        model, stream, windows, [variant], floor=floor, floor_at=[w.index for w in windows]
    )
    rows = np.ones(cols.n, bool)
    m = fm.floor_metrics(cols.floor, rows, cols.reference["window"])
    int8 = float(cols.variants[variant.name]["kl"].astype(np.float64).mean())
    assert cols.floor["kl"].min() > -1e-6 and 0 < m["kl_mean"] < int8  # ≥ 0 but for float32 rounding near 0
    block = compare_pipeline.floor_block(cols, floor, "full", tuple(w.index for w in windows), 2)
    assert block["windows"] == [w.index for w in windows] and block["metrics"]["positions"] == cols.n
    assert block["variants"][variant.name]["x_floor"] > 1 and not block["variants"][variant.name]["at_floor"]


def test_floor_on_a_command_without_variants_is_one_line():
    proc = subprocess.run(
        [sys.executable, "-m", "infoeval", "compress-bits", "--floor", "off"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "infoeval: error: --floor applies to runs with variants (quantize-compare, gate); 'compress-bits' has none"
    ]

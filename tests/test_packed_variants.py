"""Packed variants: integer codes + scales (+ zero points) dequantized layer by layer into a shared buffer.

Facts checked:
* dequantizing the stored codes gives fake_quantize(w) bit for bit (the bits themselves, −0.0 included) for
  per-channel and grouped schemes, partial last groups, groups ≥ in_features, symmetric and asymmetric, 2–8
  bits, float32 / bfloat16 / float16 weights, all-zero rows;
* the stored bytes are exactly codes (⌈n/2⌉ bytes at ≤ 4 bits, n above) + 4 bytes per scale + 1 per zero point;
* a tiny model run with ``WithVariant`` gives the logits of the model with whole fake-quantized copies swapped
  in, and keeps its own Parameters (same objects, same values); a head tied to the embeddings is quantized
  without touching the embeddings;
* each layer's weight is a view of the one shared buffer (nothing allocated per call), except when autograd
  records the forward pass: then fresh tensors, and the gradients are those of the fake-quantized model.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch

from infoeval.models import load_model
from infoeval.quant.apply import (
    QuantizedVariant,
    WithVariant,
    build_variants,
    dequant_buffers,
    fake_quantize_,
    quantize_variant,
    swap_in,
    swapped,
)
from infoeval.quant.codes import (
    PackedWeight,
    dequantize,
    encode,
    pack_nibbles,
    unpack_nibbles,
)
from infoeval.quant.primitives import fake_quantize, sqnr_db
from infoeval.quant.schemes import Scheme, parse_scheme

pytestmark = pytest.mark.usefixtures("one_thread")
CPU = torch.device("cpu")
_INT = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}


def _bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same dtype, shape and bit patterns (so −0.0 ≠ +0.0), and torch.equal."""
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and torch.equal(a, b)
        and torch.equal(a.view(_INT[a.dtype]), b.view(_INT[b.dtype]))
    )


def _weight(shape, seed, dtype=torch.float32, shift=0.0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(*shape, generator=g) * 0.05 + shift
    w[1] = 0.0  # an all-zero row
    w[2, :5] = -0.0  # negative zeros
    w[3, :7] = torch.tensor([-1e-4, 1e-4, -1e-6, 0.0, -0.0, 1e-30, -1e-30])  # round to ±0
    return w.to(dtype)


# ------------------------------------------------------------------------------------------ exactness
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("sym", [True, False])
@pytest.mark.parametrize("bits", [2, 3, 4, 5, 6, 8])
@pytest.mark.parametrize(
    "shape,group",
    [
        ((7, 300), None),
        ((7, 300), 100),
        ((7, 300), 128),
        ((7, 300), 512),
        ((64, 576), 128),
        ((64, 576), 32),
        ((64, 576), None),
        ((5, 9), 4),
    ],
)
def test_dequantized_codes_are_fake_quantize_bit_for_bit(shape, group, bits, sym, dtype):
    scheme = Scheme(bits, group, sym)
    w = _weight(shape, seed=bits * 1000 + shape[1], dtype=dtype, shift=0.0 if sym else 0.01)
    packed = encode(w, scheme)
    got = dequantize(packed)
    assert got.is_contiguous()
    assert _bits_equal(got, fake_quantize(w, scheme))


@pytest.mark.parametrize("name", ["int8-channel", "int4-g32", "int3-g64-asym", "int2-g4"])
def test_float16_weights_and_large_or_tiny_scales(name):
    scheme = parse_scheme(name)
    w = _weight((6, 96), seed=7) * torch.tensor([1.0, 1.0, 1e3, 1e-3, 1e-6, 3e4]).unsqueeze(1)
    for dtype in (torch.float16, torch.float32):
        x = w.to(dtype)
        assert _bits_equal(dequantize(encode(x, scheme)), fake_quantize(x, scheme))


def test_negative_zero_survives():
    """fake_quantize gives −0.0 for a small negative weight (round(w/s) = −0, times s); so do the codes."""
    w = torch.tensor([[-0.3, -0.01, 0.0, 0.7]])
    scheme = parse_scheme("int4-channel")
    want = fake_quantize(w, scheme)
    assert want[0, 1].item() == 0.0 and torch.signbit(want[0, 1])
    packed = encode(w, scheme)
    assert packed.codes.tolist() == [0b1011, 0b0111_1000]  # sign-magnitude nibbles (−3, −0 | 0, 7), halves layout
    assert _bits_equal(dequantize(packed), want)


@pytest.mark.parametrize("bits", [5, 8])
def test_eight_bit_codes_list_few_negative_zeros_else_keep_sign_bits(bits):
    """≥ 5 bits: int8 codes + the positions of the −0 codes when they are few (≤ n/64), else sign-magnitude."""
    scheme = Scheme(bits, None, True)
    few = torch.linspace(-1, 1, 640).reshape(4, 160)
    few[0, :3] = torch.tensor([-1e-6, -0.0, 1e-6])
    many = few.clone()
    many[1:3, 1::2] = -1e-6  # half of two rows rounds to −0
    for w, int8 in ((few, True), (many, False)):
        packed = encode(w, scheme)
        want = fake_quantize(w, scheme)
        assert (packed.codes.dtype == torch.int8) == int8 and (packed.negative_zeros is not None) == int8
        if int8:
            assert packed.negative_zeros.tolist() == [
                i for i, x in enumerate(want.reshape(-1).tolist()) if x == 0.0 and math.copysign(1, x) < 0
            ]
        assert _bits_equal(dequantize(packed), want)


def test_nibble_packing_halves():
    c = torch.tensor([1, 2, 3, 4, 5], dtype=torch.uint8)
    assert pack_nibbles(c).tolist() == [1 + 16 * 4, 2 + 16 * 5, 3]
    for n in (1, 2, 7, 64):
        x = torch.randint(0, 16, (n,), dtype=torch.uint8, generator=torch.Generator().manual_seed(n))
        assert torch.equal(unpack_nibbles(pack_nibbles(x), n), x)


# --------------------------------------------------------------------------------------- stored bytes
@pytest.mark.parametrize(
    "name,shape",
    [
        ("int8-channel", (64, 576)),
        ("int4-g128", (64, 576)),
        ("int4-g32-asym", (64, 576)),
        ("int3-g64", (7, 301)),
        ("int6-g100-asym", (7, 300)),
        ("int2-channel", (5, 9)),
    ],
)
def test_stored_bytes_exact(name, shape):
    scheme = parse_scheme(name)
    packed = encode(_weight(shape, seed=3), scheme)
    n = shape[0] * shape[1]
    n_groups = 1 if scheme.group_size is None else math.ceil(shape[1] / scheme.group_size)
    code_bytes = math.ceil(n / 2) if scheme.bits <= 4 else n
    listed = 0 if packed.negative_zeros is None else packed.negative_zeros.numel()
    assert listed <= n / 64
    want = code_bytes + 4 * listed + 4 * shape[0] * n_groups + (0 if scheme.symmetric else shape[0] * n_groups)
    assert isinstance(packed, PackedWeight) and packed.nbytes == want
    assert packed.codes.dtype in (torch.uint8, torch.int8) and packed.scale.dtype == torch.float32
    assert packed.scale.shape == (shape[0], n_groups)
    assert (packed.zero is None) == scheme.symmetric
    bits_per_weight = 8 * code_bytes / n
    assert bits_per_weight == pytest.approx(8 if scheme.bits > 4 else 4, abs=0.2)


# ----------------------------------------------------------------------------------------- tiny model
@pytest.fixture(scope="module")
def llama(tiny_llama_dir):
    return load_model(str(tiny_llama_dir), CPU, torch.float32).model


@pytest.fixture(scope="module")
def ids():
    return torch.randint(3, 500, (2, 40), generator=torch.Generator().manual_seed(0))


def _full_copies(model, variant):
    """The previous way: whole fake-quantized Parameters (from the model's own weights)."""
    mods = dict(model.named_modules())
    return {
        n: torch.nn.Parameter(fake_quantize(mods[n].weight, variant.scheme), requires_grad=False)
        for n in variant.weights
    }


def _logits_with(model, ids, full):
    mods = dict(model.named_modules())
    originals = {n: mods[n].weight for n in full}
    try:
        for n, p in full.items():
            mods[n].weight = p
        with torch.inference_mode():
            return model(input_ids=ids, use_cache=False).logits
    finally:
        for n, p in originals.items():
            mods[n].weight = p


def _snapshot(model):
    return [(name, p, p.detach().clone()) for name, p in model.named_parameters(remove_duplicate=False)]


def _unchanged(model, snap) -> bool:
    now = list(model.named_parameters(remove_duplicate=False))
    return len(now) == len(snap) and all(
        n == n0 and p is p0 and _bits_equal(p.detach(), v0) for (n, p), (n0, p0, v0) in zip(now, snap)
    )


@pytest.mark.parametrize("name", ["int8-channel", "int4-g32", "int3-g64-asym", "int4-g48"])
def test_with_variant_logits_equal_full_copies(llama, ids, name):
    snap = _snapshot(llama)
    variant = quantize_variant(llama, parse_scheme(name))
    with torch.inference_mode():
        got = WithVariant(llama, variant)(input_ids=ids, use_cache=False).logits
    assert torch.equal(got, _logits_with(llama, ids, _full_copies(llama, variant)))
    assert _unchanged(llama, snap)
    assert all(not m._forward_pre_hooks and not m._forward_hooks for m in llama.modules())


def test_partial_groups_in_every_layer_of_qwen3(tiny_qwen3_dir, ids):
    model = load_model(str(tiny_qwen3_dir), CPU, torch.float32).model
    variant = quantize_variant(model, parse_scheme("int4-g64"))
    assert all("last group" in r.reason for r in variant.layers if r.quantized)
    with torch.inference_mode():
        got = WithVariant(model, variant)(input_ids=ids, use_cache=False).logits
    assert torch.equal(got, _logits_with(model, ids, _full_copies(model, variant)))


def test_tied_head_quantized_without_touching_the_embeddings(tiny_llama_dir, ids):
    model = load_model(str(tiny_llama_dir), CPU, torch.float32).model
    emb = model.model.embed_tokens.weight
    model.lm_head.weight = emb  # tie them (the saved tiny model is untied)
    snap = _snapshot(model)
    variant = quantize_variant(model, parse_scheme("int4-g32"), include=["lm_head"])
    head = next(r for r in variant.layers if r.name == "lm_head")
    assert head.quantized and head.tied_to == "model.embed_tokens.weight"
    seen = {}
    with swapped(model, variant), torch.inference_mode():
        model.model.embed_tokens.register_forward_hook(lambda m, a, o: seen.update(emb=m.weight))  # returns None
        got = model(input_ids=ids, use_cache=False).logits
    model.model.embed_tokens._forward_hooks.clear()
    assert seen["emb"] is emb  # the embedding ran with its own weights
    assert torch.equal(got, _logits_with(model, ids, _full_copies(model, variant)))
    assert _unchanged(model, snap) and model.lm_head.weight is emb
    right = copy.deepcopy(model)
    fake_quantize_(right, parse_scheme("int4-g32"), include=["lm_head"])
    assert _bits_equal(right.model.embed_tokens.weight.detach(), emb.detach())
    assert _bits_equal(right.lm_head.weight.detach(), fake_quantize(emb, parse_scheme("int4-g32")))


def test_swap_in_puts_full_fake_quantized_parameters(llama):
    model = copy.deepcopy(llama)
    scheme = parse_scheme("int4-g32")
    want = {
        n: fake_quantize(m.weight, scheme)
        for n, m in model.named_modules()
        if n.startswith("model.layers.") and isinstance(m, torch.nn.Linear)
    }
    variant = quantize_variant(model, scheme)
    swap_in(model, variant)
    mods = dict(model.named_modules())
    for n, w in want.items():
        p = mods[n].weight
        assert isinstance(p, torch.nn.Parameter) and not p.requires_grad and _bits_equal(p.detach(), w)


def test_summary_keeps_its_report_and_adds_stored_bytes(llama):
    scheme = parse_scheme("int4-g32-asym")
    variant = quantize_variant(llama, scheme)
    s = variant.summary()
    assert s["stored_bytes"] == variant.nbytes == sum(w.nbytes for w in variant.weights.values())
    assert s["stored_bytes"] < s["params_quantized"] * 4 / 6  # int4 + scales + zeros: well under the float32 bytes
    mods = dict(llama.named_modules())
    for r in variant.layers:
        if r.quantized:
            w = mods[r.name].weight
            assert r.sqnr_db == sqnr_db(w, fake_quantize(w, scheme))


def test_variants_built_together_report_each_layers_own_sqnr(llama):
    """build_variants computes Σw² once per layer for all its schemes (a strided ŵ when the last group is padded,
    a contiguous one otherwise): every layer's SQNR is still exactly sqnr_db(w, fake_quantize(w))."""
    schemes = [parse_scheme(n) for n in ("int8-channel", "int4-g24", "int3-g16-asym")]
    mods = dict(llama.named_modules())
    for variant, scheme in zip(build_variants(llama, schemes), schemes):
        for r in (r for r in variant.layers if r.quantized):
            w = mods[r.name].weight
            assert r.sqnr_db == sqnr_db(w, fake_quantize(w, scheme)), (scheme.name, r.name)


# ------------------------------------------------------------------------------------ shared buffer
def _capture_weights(model, names, store):
    mods = dict(model.named_modules())
    return [
        mods[n].register_forward_pre_hook(lambda m, a, n=n: store.setdefault(n, []).append(m.weight)) for n in names
    ]  # None


@pytest.mark.parametrize("dtype,kind", [(torch.float32, "f32"), (torch.bfloat16, "out")])
def test_every_layer_uses_the_shared_buffer(tiny_llama_dir, ids, dtype, kind):
    model = load_model(str(tiny_llama_dir), CPU, dtype).model
    variant = quantize_variant(model, parse_scheme("int4-g32"))
    seen = {}
    with swapped(model, variant), torch.inference_mode():
        handles = _capture_weights(model, variant.weights, seen)  # after the swap's hooks: sees the swapped weight
        a = model(input_ids=ids, use_cache=False).logits
        model(input_ids=ids, use_cache=False)
    for h in handles:
        h.remove()
    buf = dequant_buffers(model).buffers[kind, CPU, dtype]
    mods = dict(model.named_modules())
    for n, ws in seen.items():
        assert len(ws) == 2 and all(w.dtype == dtype and w.untyped_storage().data_ptr() == buf.data_ptr() for w in ws)
        assert mods[n].weight is not ws[0] and isinstance(mods[n].weight, torch.nn.Parameter)
    assert torch.equal(a, _logits_with(model, ids, _full_copies(model, variant)))


def test_grad_mode_dequantizes_into_fresh_tensors():
    """With autograd recording, each layer gets its own tensor (kept for backward) and the gradients are those of
    the fake-quantized model; under no_grad the same layers share the buffer."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(24, 40), torch.nn.Tanh(), torch.nn.Linear(40, 24), torch.nn.Tanh(), torch.nn.Linear(24, 8)
    )
    variant = QuantizedVariant(
        parse_scheme("int4-g16"),
        {
            n: encode(m.weight.detach(), parse_scheme("int4-g16"))
            for n, m in model.named_modules()
            if isinstance(m, torch.nn.Linear)
        },
        (),
    )
    x = torch.randn(5, 24, requires_grad=True)
    seen = {}
    with swapped(model, variant):
        _capture_weights(model, variant.weights, seen)
        model(x).square().sum().backward()
    for m in model.modules():
        m._forward_pre_hooks.clear()
    ptrs = {ws[0].untyped_storage().data_ptr() for ws in seen.values()}
    assert len(ptrs) == 3  # three fresh tensors
    ref = copy.deepcopy(model)
    for _n, m in ref.named_modules():
        if isinstance(m, torch.nn.Linear):
            m.weight = torch.nn.Parameter(fake_quantize(m.weight, variant.scheme), requires_grad=False)
    x2 = x.detach().clone().requires_grad_(True)
    ref(x2).square().sum().backward()
    assert torch.equal(x.grad, x2.grad)
    seen.clear()
    with swapped(model, variant), torch.no_grad():
        _capture_weights(model, variant.weights, seen)
        model(x)
    assert len({ws[0].untyped_storage().data_ptr() for ws in seen.values()}) == 1


def test_weights_restored_when_the_forward_pass_fails(llama, ids):
    snap = _snapshot(llama)
    variant = quantize_variant(llama, parse_scheme("int8-channel"))
    name = next(iter(variant.weights))
    bad = QuantizedVariant(variant.scheme, {**variant.weights, name: torch.zeros(3, 3)}, variant.layers)
    with pytest.raises(RuntimeError), torch.inference_mode():
        WithVariant(llama, bad)(input_ids=ids, use_cache=False)
    assert _unchanged(llama, snap)
    assert all(not m._forward_pre_hooks and not m._forward_hooks for m in llama.modules())


def test_a_variant_keeps_its_tensors_in_one_allocation_with_the_same_values(tiny_llama_dir):
    """storage.gather: every kept tensor of a variant is a view of one buffer (64-byte aligned, no overlap), with
    the dtype, shape and values encode gave; the dequantized weights are unchanged."""
    from infoeval.quant import storage

    model = load_model(str(tiny_llama_dir), CPU, torch.float32).model
    modules = dict(model.named_modules())
    for name in ("int8-channel", "int4-g32", "int3-g24-asym", "int6-channel-asym"):
        scheme = parse_scheme(name)
        variant = quantize_variant(model, scheme)
        tensors = [
            t
            for pw in variant.weights.values()
            for t in (pw.codes, pw.scale, pw.zero, pw.negative_zeros)
            if t is not None
        ]
        assert len({t.untyped_storage().data_ptr() for t in tensors}) == 1
        spans = sorted((t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()) for t in tensors)
        assert all(start % storage.ALIGN == 0 for start, _ in spans)
        assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:]))
        for layer, pw in variant.weights.items():
            fresh = encode(modules[layer].weight.data, scheme)
            for f in storage.FIELDS:
                a, b = getattr(pw, f), getattr(fresh, f)
                assert (a is None and b is None) or (a.dtype == b.dtype and torch.equal(a, b)), (name, layer, f)
            assert _bits_equal(dequantize(pw), fake_quantize(modules[layer].weight.data, scheme)), (name, layer)

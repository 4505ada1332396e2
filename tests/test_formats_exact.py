"""The shipped formats against code no one here wrote, bit for bit on CPU: every element cast against ml_dtypes (after
the kernels' clamp), MX against torchao's ``to_mx`` (FLOOR and RCEIL), NVFP4 against torchao's ``nvfp4_quantize``
and compressed-tensors' NVFP4, FP8 against compressed-tensors' FP8 presets, the GGUF types against the gguf
package. Random weights of ≥ 10⁶ values and the edge vectors: ties, amax of exactly 2^k and of 2^k·(1 + 2⁻²³),
all-zero blocks, subnormals. A reference that is not installed skips with its package's name.

Values are compared with ``==`` (NaN never appears: non-finite weights are refused), so −0.0 and +0.0 agree:
compressed-tensors and ggml give +0.0 where a small negative weight rounds to zero, ml_dtypes and torch −0.0,
which no matrix product can tell apart."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from infoeval.errors import DataError, SchemeError
from infoeval.quant.formats.elements import ELEMENTS, round_element
from infoeval.quant.formats.presets import PRESETS, parse_format
from infoeval.quant.formats.rounding import check_divides, fake_quantize

ROWS, COLS = 1024, 1024  # 2^20 values


def _weights(seed: int = 0, rows: int = ROWS, cols: int = COLS) -> torch.Tensor:
    """Gaussian rows at scales from 2^-12 to 2^4, so blocks see every exponent a scale can take."""
    g = torch.Generator().manual_seed(seed)
    scales = torch.exp2(torch.randint(-12, 5, (rows, 1), generator=g).float())
    return torch.randn(rows, cols, generator=g) * scales


def _edges(cols: int = 32) -> torch.Tensor:
    """Rows that probe the conventions' edges, each a block of ``cols`` (a multiple of 32)."""
    rows = []

    def row(values):
        v = torch.zeros(cols)
        v[: len(values)] = torch.tensor(values, dtype=torch.float32)
        rows.append(v)

    for k in (-8, 0, 3):
        row([2.0**k, 0.3 * 2.0**k, -0.7 * 2.0**k])  # amax exactly 2^k
        row([2.0**k * (1 + 2.0**-23), 0.1, -0.2])  # just above 2^k: FLOOR and RCEIL part
        row([2.0**k * (1 - 2.0**-24), 0.05])  # just below
        row([1.5 * 2.0**k, 0.75 * 2.0**k, -1.125 * 2.0**k])  # 1.5·2^k (E8M0's midpoint)
    row([6.0, 0.75, 1.75, 3.5, -0.25, -2.5, 5.0, 1.25])  # E2M1 ties once scaled by 1
    row([448.0, 464.0 / 448.0 * 6.0, 0.5])
    row([])  # an all-zero block
    row([1e-40, -3e-41, 2.0**-130, 1e-39])  # subnormal weights
    row([-1.0, -0.5, 0.25, 2.0**-20])
    return torch.stack(rows)


def _assert_same(ours: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    ref = ref.to(torch.float32).reshape(ours.shape)
    bad = (ours != ref).sum().item()
    first = f"{ours[ours != ref][:4].tolist()} against {ref[ours != ref][:4].tolist()}"
    assert bad == 0, f"{what}: {bad} of {ours.numel()} values differ; the first: {first}"


# ---- elements ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", [n for n, e in ELEMENTS.items() if e.ml_dtypes_name])
def test_every_element_cast_is_ml_dtypes_after_the_clamp(name):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    el = ELEMENTS[name]
    x = torch.cat([_weights(1).reshape(-1) * 64, _edges().reshape(-1)]).clamp(-el.largest, el.largest)
    ref = torch.from_numpy(x.numpy().astype(getattr(ml_dtypes, el.ml_dtypes_name)).astype(np.float32))
    ours = round_element(x, el)
    assert (ours.view(torch.int32) == ref.view(torch.int32)).all()  # bit for bit: −0.0 included


def test_the_ties_the_issue_names():
    e4m3, e2m1 = ELEMENTS["fp8-e4m3"], ELEMENTS["fp4-e2m1"]
    assert round_element(torch.tensor([464.0, 465.0, 1e9]), e4m3).tolist() == [448.0, 448.0, 448.0]  # saturates
    assert round_element(torch.tensor([0.75, 1.75, 3.5]), e2m1).tolist() == [1.0, 2.0, 4.0]  # to even
    assert round_element(torch.tensor([0.75, 1.75, 3.5]), e2m1, ties="zero").tolist() == [0.5, 1.5, 3.0]  # ggml


# ---- MX against torchao --------------------------------------------------------------------------------------
def _torchao_mx(w: torch.Tensor, element: str, mode: str) -> torch.Tensor:
    mx = pytest.importorskip("torchao.prototype.mx_formats.mx_tensor", reason="torchao")
    from torchao.prototype.mx_formats.config import ScaleCalculationMode
    from torchao.prototype.mx_formats.constants import DTYPE_FP6_E2M3, DTYPE_FP6_E3M2

    dtype = {
        "fp8-e4m3": torch.float8_e4m3fn,
        "fp6-e2m3": DTYPE_FP6_E2M3,
        "fp6-e3m2": DTYPE_FP6_E3M2,
        "fp4-e2m1": torch.float4_e2m1fn_x2,
    }[element]
    scale, data = mx.to_mx(w.contiguous(), dtype, 32, getattr(ScaleCalculationMode, mode))
    return mx.to_dtype(data, scale, dtype, 32, torch.float32)


@pytest.mark.parametrize("preset", ["mxfp8", "mxfp6", "mxfp6-e3m2", "mxfp4"])
@pytest.mark.parametrize("suffix, mode", [("", "FLOOR"), ("-rceil", "RCEIL")])
def test_mx_is_torchao_to_mx(preset, suffix, mode):
    fmt = PRESETS[preset + suffix]
    for w in (_weights(2), _edges()):
        _assert_same(fake_quantize(w, fmt), _torchao_mx(w, fmt.element, mode), fmt.name)


# ---- NVFP4 ---------------------------------------------------------------------------------------------------
def test_nvfp4_at_torchao_is_torchao():
    nv = pytest.importorskip("torchao.prototype.mx_formats.nvfp4_tensor", reason="torchao")
    for w in (_weights(3), _edges()):
        amax = w.abs().max()
        t = nv.NVFP4Tensor.to_nvfp4(w.contiguous(), per_tensor_scale=nv.per_tensor_amax_to_scale(amax))
        _assert_same(fake_quantize(w, PRESETS["nvfp4@torchao"]), t.dequantize(torch.float32), "nvfp4@torchao")


def _compressed_tensors(w: torch.Tensor, preset: str) -> torch.Tensor:
    """compressed-tensors' own fake quantization of a weight under one of its preset schemes: its observer's
    statistics, ``calculate_qparams`` (and ``generate_gparam``), then ``fake_quantize``."""
    pytest.importorskip("compressed_tensors", reason="compressed-tensors")
    from compressed_tensors.quantization.lifecycle.forward import fake_quantize as ct_fake_quantize
    from compressed_tensors.quantization.quant_args import QuantizationArgs, QuantizationStrategy
    from compressed_tensors.quantization.quant_scheme import PRESET_SCHEMES
    from compressed_tensors.quantization.utils.helpers import calculate_qparams, generate_gparam

    args = QuantizationArgs(**dict(PRESET_SCHEMES[preset]["weights"]))
    strategy = args.strategy
    if strategy == QuantizationStrategy.TENSOR:
        lo, hi = w.amin().reshape(1), w.amax().reshape(1)
    elif strategy == QuantizationStrategy.CHANNEL:
        lo, hi = w.amin(1, keepdim=True), w.amax(1, keepdim=True)
    elif strategy == QuantizationStrategy.BLOCK:
        r, c = args.block_structure
        b = w.reshape(w.shape[0] // r, r, w.shape[1] // c, c)
        lo, hi = b.amin((1, 3)), b.amax((1, 3))
    else:  # group, tensor_group
        b = w.reshape(w.shape[0], -1, args.group_size)
        lo, hi = b.amin(-1), b.amax(-1)
    g = generate_gparam(w.amin(), w.amax()) if strategy == QuantizationStrategy.TENSOR_GROUP else None
    scale, zero = calculate_qparams(lo, hi, args, global_scale=g)
    return ct_fake_quantize(w, scale, zero, args, global_scale=g)


@pytest.mark.parametrize(
    "ours, theirs", [("nvfp4", "NVFP4"), ("fp8", "FP8_DYNAMIC"), ("fp8-tensor", "FP8"), ("fp8-b128", "FP8_BLOCK")]
)
def test_compressed_tensors_presets(ours, theirs):
    edges = torch.cat([_edges(128), _weights(9, 128 - 17, 128)])  # the edge rows in one 128 × 128 block
    for w in (_weights(4), edges):
        _assert_same(fake_quantize(w, PRESETS[ours]), _compressed_tensors(w, theirs), ours)


# ---- GGUF ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "gguf-mxfp4"])
def test_gguf_types_are_the_gguf_package(name):
    gguf = pytest.importorskip("gguf")
    qtype = getattr(gguf.GGMLQuantizationType, "MXFP4" if name == "gguf-mxfp4" else name.upper())
    for w in (_weights(5), _edges()):
        ref = gguf.quants.dequantize(gguf.quants.quantize(w.numpy(), qtype), qtype)
        _assert_same(fake_quantize(w, PRESETS[name]), torch.from_numpy(ref), name)


# ---- bad input -----------------------------------------------------------------------------------------------
def test_a_weight_that_is_not_finite_is_refused():
    w = _weights(6, 4, 64)
    w[1, 3] = float("inf")
    for name in ("mxfp4", "nvfp4", "q4_0", "fp8"):
        with pytest.raises(DataError, match="inf or a NaN"):
            fake_quantize(w, PRESETS[name])


def test_blocks_that_do_not_divide_a_layer():
    check_divides(PRESETS["fp8-b128"], (100, 200))  # padded, as compressed-tensors pads
    with pytest.raises(SchemeError, match="layer mlp.down_proj has 200 inputs, not a multiple of its block of 32"):
        check_divides(PRESETS["q4_0"], (64, 200), "mlp.down_proj")


def test_suffixes():
    assert parse_format("MXFP4-RCEIL").name == "mxfp4-rceil" and parse_format("int4-g128") is None
    with pytest.raises(SchemeError, match="q8_0 has no convention '-rceil'; it takes no suffix"):
        parse_format("q8_0-rceil")

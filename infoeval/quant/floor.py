"""The noise floor's variant: the reference with every quantized layer's weights moved by about one bfloat16
rounding step, a checkpoint no user could tell from the reference. THE definition, stated once (the docs and
the results quote ``DEFINITION``):

    ŵ = cast(w · (1 + u)),   u ~ Uniform(−2⁻⁹, 2⁻⁹) per weight, drawn from a generator seeded with
                             (seed, the layer's ordinal among the quantized layers)

computed in float32, then cast back to the weight's dtype: a plain cast in float32; in a 16-bit dtype (where
a nearest-even cast would round most weights straight back to w) a stochastic rounding to one of the two
neighbouring values, with the probabilities that make it unbiased, drawn from the same generator (in bfloat16 u
and the rounding share one 31-bit draw per weight: u on 2¹⁵ levels, the rounding from 16 bits). 2⁻⁹ is half
of bfloat16's unit roundoff 2⁻⁸: the relative change of a weight that bfloat16 stores well.

The variant stores nothing: each forward pass makes a layer's weights again from (w, seed, ordinal), the same
bits every time, in a fresh tensor that replaces the weight for that pass only (``apply.swapped``). The layers
are those the schemes quantize (``selection.plan_layers``: the same --include / --exclude).

>>> w = torch.tensor([[1.0, -2.0, 0.5]])
>>> a, b = floor_weight(w, seed=0, ordinal=3), floor_weight(w, seed=0, ordinal=3)
>>> torch.equal(a, b), bool(((a - w).abs() <= STEP * w.abs()).all()), torch.equal(a, w)
(True, True, False)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from infoeval.quant.selection import plan_layers

STEP = 2.0**-9  # the largest relative change: half of bfloat16's unit roundoff
FLOOR = "floor"  # the floor's role and column prefix
DEFINITION = (
    "the reference with each quantized layer's weights w replaced by cast(w·(1+u)), u ~ U(±2^-9) per weight, "
    "seeded per layer (float32: a plain cast; 16-bit dtypes: unbiased stochastic rounding)"
)


def _generator(device: torch.device, seed: int, ordinal: int) -> torch.Generator:
    """A generator seeded from (seed, ordinal) through numpy's SeedSequence: 32 well-mixed bits, as a CPU
    generator (mt19937) uses only the low 32 bits of its seed (seed · 2³² + ordinal would repeat every seed's)."""
    return torch.Generator(device=device).manual_seed(
        int(np.random.SeedSequence([int(seed), int(ordinal)]).generate_state(1)[0])
    )


def stochastic_round(x: torch.Tensor, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    """``x`` (float32) to ``dtype`` rounding each value to one of its two neighbours in ``dtype``, the far one with
    probability |x − near| / |far − near|, so that the expected value is x (a value ``dtype`` holds stays);
    ``x`` may be overwritten (bfloat16: ``_bfloat16_carry``)."""
    if dtype == torch.bfloat16:
        return _bfloat16_carry(x, torch.randint(0, 1 << 16, x.shape, generator=gen, device=x.device, dtype=torch.int32))
    near = x.to(dtype)
    gap = x - near.float()
    far = torch.nextafter(near, torch.where(gap > 0, torch.inf, -torch.inf).to(dtype))
    width = (far.float() - near.float()).abs()
    p = torch.where(width > 0, gap.abs() / width, torch.zeros_like(gap))
    pick = torch.rand(x.shape, generator=gen, device=x.device, dtype=torch.float32) < p
    return torch.where(pick, far, near)


@torch.no_grad()
def floor_weight(w: torch.Tensor, seed: int, ordinal: int) -> torch.Tensor:
    """The floor's weight of one layer (a new tensor of ``w``'s dtype and device): see the module docstring."""
    gen = _generator(w.device, seed, ordinal)
    if w.dtype == torch.bfloat16:
        return _bfloat16_floor(w, gen)
    u = torch.empty(w.shape, dtype=torch.float32, device=w.device).uniform_(-STEP, STEP, generator=gen)
    wf = w.float()
    x = torch.addcmul(wf, wf, u, out=u)  # w + w·u = w·(1 + u), in float32
    if w.dtype == torch.float32:
        return x
    return stochastic_round(x, w.dtype, gen) if w.dtype == torch.float16 else x.to(w.dtype)


def _bfloat16_floor(w: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """The bfloat16 floor from one random draw per weight (the generator's cost is most of the floor's own): of 31
    random bits, the top 15 give u (centred on 2¹⁵ levels of ±2⁻⁹) and the low 16 the stochastic rounding."""
    k = torch.empty(w.shape, dtype=torch.int32, device=w.device).random_(generator=gen)
    u = (k >> 16).float().mul_(2 * STEP / 32768).sub_(STEP - STEP / 32768)
    wf = w.float()
    return _bfloat16_carry(torch.addcmul(wf, wf, u, out=u), k.bitwise_and_(0xFFFF))


def _bfloat16_carry(x: torch.Tensor, r16: torch.Tensor) -> torch.Tensor:
    """``x`` (float32, overwritten) stochastically rounded to bfloat16 by ``r16``, uniform 16-bit integers (int32):
    bfloat16 is the top half of a float32, and r16 added to the bottom half carries into the top half with
    probability |x − near| / |far − near| (on the magnitude, so for either sign); the top half is the result."""
    bits = x.view(torch.int32).add_(r16)
    return (bits >> 16).to(torch.int16).view(torch.bfloat16)


@dataclass(frozen=True)
class NoisyWeight:
    """A layer's floor weight, made when a forward pass needs it (``apply.swapped``): nothing is stored."""

    source: torch.Tensor
    seed: int
    ordinal: int

    def materialize(self) -> torch.Tensor:
        return floor_weight(self.source, self.seed, self.ordinal)


@dataclass(frozen=True)
class FloorVariant:
    """The floor as a variant ``apply.WithVariant`` runs: a NoisyWeight per quantized layer, no stored bytes."""

    weights: dict[str, NoisyWeight]
    seed: int
    name: str = FLOOR
    scratch = {}  # no shared dequantization buffers (``DequantBuffers.reserve``)

    def summary(self) -> dict:
        return floor_summary(self.seed, [w.source.shape for w in self.weights.values()])


def floor_summary(seed: int, shapes) -> dict:
    """The floor's record: its definition, seed, and the layers and parameters it moves (their weights' shapes)."""
    return {
        "definition": DEFINITION,
        "seed": seed,
        "layers": len(shapes),
        "params": sum(int(torch.Size(s).numel()) for s in shapes),
    }


def build_floor(
    model: torch.nn.Module,
    include=(),
    exclude=(),
    seed: int = 0,
    layers: list[str] | None = None,
) -> FloorVariant:
    """The floor of ``model``: every layer the schemes would quantize (same --include / --exclude), or ``layers``
    (those a gate's candidate changed)."""
    modules = dict(model.named_modules())
    chosen = (
        layers
        if layers is not None
        else [name for name, selected, _ in plan_layers(model, list(include), list(exclude)) if selected]
    )
    return FloorVariant({name: NoisyWeight(modules[name].weight.data, seed, k) for k, name in enumerate(chosen)}, seed)

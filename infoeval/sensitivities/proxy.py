"""A cheap predictor of each unit's KL: the diagonal-Fisher estimate, from one backward pass per window.

Expanding the mean KL(p‖q_{w+Δ}) in the weight change Δ around the reference weights w: the zeroth and
first-order terms vanish (KL = 0 and ∇KL = 0 at q = p, so a gradient-times-Δ proxy has nothing to measure),
and the second-order term is ½ Δᵀ F Δ with F = (1/n) Σ_t E_{y∼p_t}[g_t g_tᵀ], g_t = ∇_w ln q(y | context_t),
the Fisher information averaged over the n scored positions. Keeping the diagonal:

    proxy(unit) = ½ · (1/n) · Σ_{i ∈ unit} F̂_ii · Δw_i²,      Δw = fake_quantize(w) − w      (nats/token)

F̂ in one backward pass per window: draw y_t ∼ p_t at every scored position (a generator seeded by (seed,
window index)), take G = ∇_w Σ_t −ln p(y_t) and square it. Each g_t has mean zero under y_t ∼ p_t and the
draws are independent given the (observed) context, so E[G_i²] = Σ_t E[g_{t,i}²]: the cross terms vanish and
Σ_windows G_i² is unbiased for Σ_t F_t,ii. With the observed tokens instead (the "empirical Fisher") the
g_t would not have mean zero (the model is not the text's distribution) and the square of their sum would be
dominated by the squared mean gradient, not the curvature; with a sampled token the estimate is the true
Fisher of the reference, the Hessian of KL at q = p. It is noisy per weight (G_i² is ~χ²₁-distributed) and
averages out over a unit's many weights. Proxies of layers add up to the proxy of their union (diagonal).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from infoeval import engine
from infoeval.engine import gradients
from infoeval.input.windows import Window, window_inputs
from infoeval.quant import codes
from infoeval.quant.codes import PackedWeight

METHOD = (
    "diagonal Fisher: ½ · (1/n) Σ F_ii Δw_i² (nats/token), F_ii from the squared gradient of Σ −ln p(y) "
    "over each window's positions with y drawn from the reference (one backward pass per window)"
)


def sampled_nll(generator: torch.Generator):
    """The loss of some rows of a window's logits (rows, V): Σ_t −ln softmax(z_t)(y_t) with y_t drawn from
    softmax(z_t), row after row (``drawn``: the y_t drawn before, when the rows' logits are made again)."""

    def loss(logits: torch.Tensor, drawn: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        lp = torch.log_softmax(logits.float(), dim=-1)
        y = torch.multinomial(lp.detach().exp(), 1, generator=generator) if drawn is None else drawn
        return -lp.gather(-1, y).sum(), y

    return loss


def fisher_sums(
    model,
    stream_ids: torch.Tensor,
    windows: Sequence[Window],
    prefix_id: int | None,
    packed: Mapping[str, Mapping[str, PackedWeight]],
    seed: int = 0,
    on_window=None,
    rows: int | None = None,
) -> dict[str, dict[str, float]]:
    """Σ_windows Σ_i G_i² Δw_i² for each scheme and layer of ``packed`` (scheme → layer → codes); ``rows``: the
    head's rows per chunk (``gradients.head_rows``)."""
    names = sorted({n for layers in packed.values() for n in layers})
    modules = dict(model.named_modules())
    device = engine.model_device(model)
    out = {s: dict.fromkeys(layers, 0.0) for s, layers in packed.items()}
    for b in engine.plan(windows):
        w = b.windows[0]
        gen = torch.Generator(device=device).manual_seed(seed * 1_000_003 + w.index)
        inputs = window_inputs(stream_ids, w, prefix_id).to(device)

        def add(name: str, g: torch.Tensor) -> None:  # as the backward pass reaches the layer
            with torch.no_grad():
                g2 = g.float().square()
                weight = modules[name].weight.float()
                for s, layers in packed.items():
                    if name in layers:
                        out[s][name] += float((g2 * (codes.dequantize(layers[name]).float() - weight).square_()).sum())

        gradients.weight_grads(model, inputs, b.keep, sampled_nll(gen), names, add, rows)
        if on_window:
            on_window()
    return out


def unit_proxy(sums: Mapping[str, float], layers: Sequence[str], n_positions: int) -> float:
    """½ · (1/n) · Σ over the unit's layers of Σ_i G_i² Δw_i²."""
    return 0.5 * sum(sums[name] for name in layers) / max(1, n_positions)

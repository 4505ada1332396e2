"""What the engine needs to know of a role (a model, or a wrapper such as a quantized variant): its module, the
device of its weights, the context in which the module computes as that role, and its head."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch


def model_device(model, default: torch.device | None = None) -> torch.device:
    """The device of a model's first parameter (a wrapper's inner ``.model`` is looked at too)."""
    for m in (model, getattr(model, "model", None)):
        params = getattr(m, "parameters", None)
        if callable(params):
            first = next(iter(params()), None)
            if first is not None:
                return first.device
    return default if default is not None else torch.device("cpu")


def parts(role) -> tuple[torch.nn.Module, Callable[[], contextlib.AbstractContextManager]]:
    """A role's module, and the context in which that module computes as the role (a variant's ``active``)."""
    if isinstance(role, torch.nn.Module):
        return role, contextlib.nullcontext
    return role.model, getattr(role, "active", contextlib.nullcontext)


@contextlib.contextmanager
def headless(model: torch.nn.Module):
    """The model with an identity in place of its head (its "logits" are then the head's inputs); yields the head."""
    head = model.get_output_embeddings()
    model.set_output_embeddings(torch.nn.Identity())
    try:
        yield head
    finally:
        model.set_output_embeddings(head)


def linear_into(rows: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor) -> torch.Tensor:
    """``nn.functional.linear`` of a 2-D ``rows`` written into ``out``: the very call at::linear makes for it (``mm``
    with the transposed weight, ``addmm`` with a bias), hence its bits."""
    if bias is None:
        return torch.mm(rows, weight.t(), out=out)
    return torch.addmm(bias, rows, weight.t(), out=out)


@contextlib.contextmanager
def linears_row_by_row(model: torch.nn.Module):
    """Every ``nn.Linear`` of the model computes a batch of B sequences as B products of one sequence each, written
    into one output tensor (at::linear's own ``mm``/``addmm`` for a contiguous sequence; other inputs concatenate
    B ``linear`` calls): the very matrix shapes, hence the very bits, of B separate forward passes (a BLAS may
    block one product of B·T rows differently from B products of T rows), while a forward pre-hook (a variant's
    dequantization) still runs once for the batch."""
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear) and "forward" not in vars(m)]

    def one_by_one(mod: torch.nn.Linear):
        def forward(x: torch.Tensor) -> torch.Tensor:
            w, b = mod.weight, mod.bias  # read at call time: a variant's pre-hook swaps them in
            if x.dim() < 3 or x.shape[0] == 1:
                return torch.nn.functional.linear(x, w, b)
            if x.dim() > 3 or not x.is_contiguous() or x.dtype != w.dtype:
                return torch.cat([torch.nn.functional.linear(x[k : k + 1], w, b) for k in range(x.shape[0])])
            out = x.new_empty(*x.shape[:-1], w.shape[0])
            for k in range(x.shape[0]):
                linear_into(x[k], w, b, out[k])
            return out

        return forward

    for mod in linears:
        mod.forward = one_by_one(mod)
    try:
        yield model
    finally:
        for mod in linears:
            del mod.forward

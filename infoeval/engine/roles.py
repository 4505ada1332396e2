"""What the engine needs to know of a role (a model, or a wrapper such as a quantized variant): its module, the
device of its weights, the context in which the module computes as that role, and its head."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from types import SimpleNamespace

import torch

from infoeval.errors import RuntimeFailure, spell


def model_device(model, default: torch.device | None = None) -> torch.device:
    """The device of a model's first parameter that holds data (a wrapper's inner ``.model`` is looked at too): one
    offloaded to disk by accelerate is on the meta device, and its hooks bring the inputs where it runs."""
    for m in (model, getattr(model, "model", None)):
        params = getattr(m, "parameters", None)
        if callable(params):
            first = next((p for p in params() if p.device.type != "meta"), None)
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


class _Capture(torch.nn.Module):
    """In place of a head: keeps its input (the last hidden states) and gives a one-wide "logits" that whatever the
    architecture does after its head (a soft-cap, a scale) may change without touching the states."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.states = x
        return x[..., :1]


class Headless:
    """A role whose "logits" are its model's last hidden states (the head's inputs, after the final norm): ``role``
    (a model or a wrapper such as a quantized variant) with its head's input captured in a whole forward pass
    (``__call__``), and an identity in place of the head in the engine's shared batches (``active``: the blocks,
    then the "head"; only models whose logits are their head's output, ``engine.shared.splits``, go there)."""

    def __init__(self, role):
        self.role = role
        self.model, self._active = parts(role)

    def __call__(self, **kwargs):
        head, capture = self.model.get_output_embeddings(), _Capture()
        self.model.set_output_embeddings(capture)
        try:
            self.role(**kwargs)
        finally:
            self.model.set_output_embeddings(head)
        if not hasattr(capture, "states"):
            raise RuntimeFailure(
                f"{type(self.model).__name__}'s forward pass does not call its output head module, so its last hidden "
                f"states cannot be taken: use {spell('format')} topk (reference) or {spell('plan')} lockstep "
                "(quantize-compare)"
            )
        return SimpleNamespace(logits=capture.states)

    @contextlib.contextmanager
    def active(self):
        with self._active(), headless(self.model):
            yield

    @property
    def config(self):
        return self.model.config


def linear_into(rows: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor) -> torch.Tensor:
    """``nn.functional.linear`` of a 2-D ``rows`` written into ``out``: the very call at::linear makes for it (``mm``
    with the transposed weight, ``addmm`` with a bias), hence its bits."""
    if bias is None:
        return torch.mm(rows, weight.t(), out=out)
    return torch.addmm(bias, rows, weight.t(), out=out)


# (input shape, weight shape and strides, dtype, bias, device, threads) → whether one product of the batch gives the
# bits of one product per sequence: a BLAS's blocking depends on the shapes and the thread count, not on the values
_SAME_BITS: dict[tuple, bool] = {}
_linear = torch.nn.functional.linear  # (a module attribute: tests emulate a BLAS that blocks differently)


def _one_by_one(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """A contiguous batch (B, T, in) as B products of one sequence each, written into one output (B, T, out)."""
    out = x.new_empty(*x.shape[:-1], w.shape[0])
    for k in range(x.shape[0]):
        linear_into(x[k], w, b, out[k])
    return out


def batched_linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """``linear`` of a batch of sequences with the very bits of one sequence at a time. A contiguous batch goes as
    one product where that product gave those bits (checked once per shape and thread count, on the first batch of
    that shape: where the blocking differs, ~90 % of the values do), else as one product per sequence; other
    inputs concatenate B ``linear`` calls."""
    if x.dim() < 3 or x.shape[0] == 1:
        return _linear(x, w, b)
    if x.dim() > 3 or not x.is_contiguous() or x.dtype != w.dtype:
        return torch.cat([_linear(x[k : k + 1], w, b) for k in range(x.shape[0])])
    key = (tuple(x.shape), tuple(w.shape), w.stride(), w.dtype, b is not None, x.device, torch.get_num_threads())
    same = _SAME_BITS.get(key)
    if same:
        return _linear(x, w, b)
    out = _one_by_one(x, w, b)
    if same is None:
        _SAME_BITS[key] = torch.equal(_linear(x, w, b), out)
    return out


def _plain_linear(m: torch.nn.Module) -> bool:
    """A Linear that computes ``linear(x, weight, bias)`` with a plain weight: not a library's subclass with its own
    forward (bitsandbytes' Linear4bit, quanto's QLinear) nor one holding a tensor subclass (torchao's)."""
    return (
        isinstance(m, torch.nn.Linear)
        and type(m).forward is torch.nn.Linear.forward
        and type(m.weight) is torch.nn.Parameter
    )


@contextlib.contextmanager
def linears_row_by_row(model: torch.nn.Module):
    """Every ``nn.Linear`` of the model computes a batch of B sequences with the bits of B separate forward passes
    (``batched_linear``: a BLAS may block one product of B·T rows differently from B products of T rows, as it does
    in bfloat16 and for some float32 shapes), while a forward pre-hook (a variant's dequantization) still runs once
    for the batch."""
    linears = [m for m in model.modules() if _plain_linear(m) and "forward" not in vars(m)]

    def batched(mod: torch.nn.Linear):
        def forward(x: torch.Tensor) -> torch.Tensor:
            return batched_linear(x, mod.weight, mod.bias)  # read at call time: a variant's pre-hook swaps them in

        return forward

    for mod in linears:
        mod.forward = batched(mod)
    try:
        yield model
    finally:
        for mod in linears:
            del mod.forward

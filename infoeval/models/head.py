"""A causal LM's output head as data: what turns its last hidden state (after the final norm) into logits. The
head's Linear (weight, and a bias where there is one), then what the architecture does after it: a scale (Cohere's
``logit_scale``, Falcon-H1's ``lm_head_multiplier``), a divisor (Granite's ``logits_scaling``) and Gemma's final
logit soft-capping, cap · tanh(z / cap), in that order, as their forward passes do; ``check`` holds a head to the
model's own logits, for an architecture that does something else. A hidden-state reference stores the states and
this head (or only its digest), and gets the reference's logits back exactly.

>>> lin = torch.nn.Linear(2, 3, bias=False)
>>> _ = lin.weight.data.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))
>>> head = OutputHead(lin.weight.detach(), None, None, 2.0)
>>> head(torch.tensor([[1.0, 3.0]]))  # z = (1, 3, 4), capped at 2: 2·tanh(z/2)
tensor([[0.9242, 1.8103, 1.9281]])
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import torch

from infoeval.errors import UsageError

SOFTCAP_KEYS = ("final_logit_softcapping",)  # Gemma 2 and 3
SCALE_KEYS = ("logit_scale", "lm_head_multiplier")  # Cohere; Falcon-H1
DIVISOR_KEYS = ("logits_scaling",)  # Granite
MAX_HEAD_ERROR = 1e-4  # max |head(states) − logits| the check allows (float32 logits)


@dataclass(frozen=True)
class OutputHead:
    """logits = softcap(scale · (h · weightᵀ + bias) / divisor); None where the model has no such step."""

    weight: torch.Tensor  # (V, d)
    bias: torch.Tensor | None  # (V,)
    scale: float | None
    softcap: float | None
    divisor: float | None = None

    @property
    def vocab(self) -> int:
        return int(self.weight.shape[0])

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        """Logits (…, V) of hidden states ``h`` (…, d), in the head's dtype."""
        z = torch.nn.functional.linear(h.to(self.weight.device, self.weight.dtype), self.weight, self.bias)
        if self.scale is not None:
            z = z * self.scale
        if self.divisor is not None:
            z = z / self.divisor
        if self.softcap is not None:
            z = torch.tanh(z / self.softcap) * self.softcap
        return z

    def settings(self) -> dict:
        """What the head does besides its tensors (JSON)."""
        out = {"scale": self.scale, "softcap": self.softcap, "dtype": str(self.weight.dtype).replace("torch.", "")}
        return out | ({"divisor": self.divisor} if self.divisor is not None else {})

    def digest(self) -> str:
        """sha256 of the weight's and the bias's bytes and the settings: equal exactly when two heads give the same
        logits from the same states bit for bit."""
        h = hashlib.sha256(json.dumps(self.settings(), sort_keys=True).encode())
        for t in (self.weight, self.bias):
            if t is not None:
                h.update(t.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes())
        return h.hexdigest()

    def tensors(self) -> dict[str, torch.Tensor]:
        out = {"head_weight": self.weight.detach().contiguous().cpu()}
        if self.bias is not None:
            out["head_bias"] = self.bias.detach().contiguous().cpu()
        return out

    @classmethod
    def from_tensors(cls, tensors: dict[str, torch.Tensor], settings: dict) -> OutputHead:
        bias, steps = tensors.get("head_bias"), (settings.get(k) for k in ("scale", "softcap", "divisor"))
        return cls(tensors["head_weight"], bias, *steps)

    def to(self, device: torch.device) -> OutputHead:
        bias = None if self.bias is None else self.bias.to(device)
        return OutputHead(self.weight.to(device), bias, self.scale, self.softcap, self.divisor)


def check(z: torch.Tensor, logits: torch.Tensor, architecture: str, what: str, instead: str) -> None:
    """The head's logits ``z`` against the model's own ``logits`` of the same rows: a miss over MAX_HEAD_ERROR means
    the architecture does more after its head than ``OutputHead`` knows; ``what`` cannot run then (``instead``)."""
    err = float((z.float() - logits.to(z.device).float()).abs().max())
    if not err <= MAX_HEAD_ERROR:
        raise UsageError(
            f"{what} cannot run on {architecture}: its head applied to its last hidden states misses its logits by "
            f"up to {err:.2g} (allowed {MAX_HEAD_ERROR:g}); use {instead}"
        )


def _config_value(config, keys) -> float | None:
    for key in keys:
        value = getattr(config, key, None)
        if value is not None:
            return float(value)
    return None


def head_of(model: torch.nn.Module) -> OutputHead:
    """The head of a transformers causal LM (its output embeddings, and its config's scale and soft-cap), sharing
    the model's tensors (no copy)."""
    lin = model.get_output_embeddings()
    config = getattr(model, "config", None)
    return OutputHead(
        lin.weight.detach(),
        None if getattr(lin, "bias", None) is None else lin.bias.detach(),
        _config_value(config, SCALE_KEYS),
        _config_value(config, SOFTCAP_KEYS),
        _config_value(config, DIVISOR_KEYS),
    )

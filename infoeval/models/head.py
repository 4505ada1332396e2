"""A causal LM's output head as data: what turns its last hidden state (after the final norm) into logits. The
head's Linear (weight, and a bias where there is one), then what the architecture does after it: a scale
(Cohere's ``logit_scale``) and Gemma's final logit soft-capping, cap · tanh(z / cap), in that order, as their
forward passes do. A hidden-state reference stores the states and this head (or only its digest), and gets the
reference's logits back exactly.

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

SOFTCAP_KEYS = ("final_logit_softcapping",)  # Gemma 2 and 3
SCALE_KEYS = ("logit_scale",)  # Cohere


@dataclass(frozen=True)
class OutputHead:
    """logits = softcap(scale · (h · weightᵀ + bias)); ``scale`` and ``softcap`` None where the model has none."""

    weight: torch.Tensor  # (V, d)
    bias: torch.Tensor | None  # (V,)
    scale: float | None
    softcap: float | None

    @property
    def vocab(self) -> int:
        return int(self.weight.shape[0])

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        """Logits (…, V) of hidden states ``h`` (…, d), in the head's dtype."""
        z = torch.nn.functional.linear(h.to(self.weight.dtype), self.weight, self.bias)
        if self.scale is not None:
            z = z * self.scale
        if self.softcap is not None:
            z = torch.tanh(z / self.softcap) * self.softcap
        return z

    def settings(self) -> dict:
        """What the head does besides its tensors (JSON)."""
        return {"scale": self.scale, "softcap": self.softcap, "dtype": str(self.weight.dtype).replace("torch.", "")}

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
        return cls(tensors["head_weight"], tensors.get("head_bias"), settings.get("scale"), settings.get("softcap"))

    def to(self, device: torch.device) -> OutputHead:
        bias = None if self.bias is None else self.bias.to(device)
        return OutputHead(self.weight.to(device), bias, self.scale, self.softcap)


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
    )

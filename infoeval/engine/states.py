"""A model's last hidden states in place of its logits: the check that its head gives its logits back from them.

A hidden-state reference file (``gating/hidden.py``) and quantize-compare's reference-first plan
(``comparison/reference_first.py``) keep the states (``roles.Headless``) and make the reference's logits again with
``models.head.OutputHead``; ``check_head`` holds that head to the model's own logits on some inputs first, so an
architecture that does more after its head than the head knows is refused with one line.
"""

from __future__ import annotations

import torch

from infoeval.engine import forward
from infoeval.engine.roles import Headless, model_device
from infoeval.models.head import OutputHead, check


@torch.inference_mode()
def check_head(model, head: OutputHead, inputs: torch.Tensor, architecture: str, what: str, instead: str) -> None:
    """``head`` applied to ``model``'s last hidden states of ``inputs`` (1, T) must give its logits (``head.check``:
    else a usage error saying ``what`` cannot run, and to use ``instead``)."""
    inputs = inputs.to(model_device(model))
    logits, states = forward.forward_logits(model, inputs, 0), forward.forward_logits(Headless(model), inputs, 0)
    check(head(states), logits, architecture, what, instead)

"""Window protocols, one module each, and the registry of them (``registered``).

``base.py`` says what a protocol answers (``WindowRules``); ``rolling.py`` is the default and ``llamacpp.py``
llama-perplexity's chunks. ``lmeval.py`` and ``gptq.py`` hold the lm-eval and GPTQ protocols' token streams,
cut by ``input/prepare.py`` until each is a ``WindowRules`` of its own here.

Adding a protocol: a module with a ``WindowRules`` subclass (name, summary, its cut) and one entry in ``REGISTRY``.
"""

from __future__ import annotations

from infoeval.input.protocols.base import WindowRules
from infoeval.input.protocols.llamacpp import LlamaCpp
from infoeval.input.protocols.rolling import Rolling

REGISTRY: dict[str, WindowRules] = {rules.name: rules for rules in (Rolling(), LlamaCpp())}


def registered(name: str) -> WindowRules | None:
    """The protocol named ``name``, or None for one not yet in the registry."""
    return REGISTRY.get(name)

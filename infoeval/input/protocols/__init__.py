"""Window protocols, one module each, and the registry of them (``registered``).

``base.py`` says what a protocol answers (``WindowRules``); ``rolling.py`` is the default, ``llamacpp.py``
llama-perplexity's chunks, ``lmeval.py`` lm-evaluation-harness's rolling log-likelihood per document and
``gptq.py`` the GPTQ papers' windows.

Adding a protocol: a module with a ``WindowRules`` subclass (name, summary, its cut) and one entry in ``REGISTRY``.
"""

from __future__ import annotations

from infoeval.input.protocols.base import WindowRules
from infoeval.input.protocols.gptq import Gptq
from infoeval.input.protocols.llamacpp import LlamaCpp
from infoeval.input.protocols.lmeval import LmEval
from infoeval.input.protocols.rolling import Rolling

REGISTRY: dict[str, WindowRules] = {rules.name: rules for rules in (Rolling(), LlamaCpp(), LmEval(), Gptq())}


def registered(name: str) -> WindowRules:
    """The protocol named ``name`` (a name ``WindowSettings`` accepted)."""
    return REGISTRY[name]


def with_flag(flag: str) -> list[str]:
    """The registered protocols whose class attribute ``flag`` is set (``anytime``, ``takes_stride``, …), in
    registry order: what an error message names as allowed."""
    return [name for name, rules in REGISTRY.items() if getattr(rules, flag)]

"""Window protocols, one module each, and the registry of them (``registered``).

``base.py`` says what a protocol answers (``WindowRules``); ``rolling.py`` is the default, ``llamacpp.py``
llama-perplexity's chunks, ``lmeval.py`` lm-evaluation-harness's rolling log-likelihood per document and
``gptq.py`` the GPTQ papers' windows.

Adding a protocol: a module with a ``WindowRules`` subclass (name, summary, its cut) and one entry in ``REGISTRY``.
"""

from __future__ import annotations

from infoeval.errors import DataError
from infoeval.input.protocols.base import WindowRules
from infoeval.input.protocols.gptq import Gptq
from infoeval.input.protocols.llamacpp import LlamaCpp
from infoeval.input.protocols.lmeval import LmEval
from infoeval.input.protocols.rolling import Rolling
from infoeval.input.text import Text

REGISTRY: dict[str, WindowRules] = {rules.name: rules for rules in (Rolling(), LlamaCpp(), LmEval(), Gptq())}


def registered(name: str) -> WindowRules:
    """The protocol named ``name``: one ``WindowSettings`` accepted, or one a stored result names (a result written
    by another version of infoeval may name one this version lacks: one line, exit 2)."""
    if name not in REGISTRY:
        raise DataError(
            f"unknown window protocol {name!r} (in a stored result?); this infoeval knows {', '.join(REGISTRY)}"
        )
    return REGISTRY[name]


def with_flag(flag: str) -> list[str]:
    """The registered protocols whose class attribute ``flag`` is set (``anytime``, ``takes_stride``, …), in
    registry order: what an error message names as allowed."""
    return [name for name, rules in REGISTRY.items() if getattr(rules, flag)]


def reread_text(info: dict, protocol: str) -> Text | None:
    """The text a stored run scored (its text provenance ``info``, read by ``protocol``), read again and changed
    as that protocol changes it, if it is here unchanged (the same SHA-256); else None."""
    rules = REGISTRY.get(protocol)
    text = rules.reread(info) if rules is not None else None
    return text if text is not None and text.sha256 == info.get("sha256") else None

"""Each protocol's own published figures for every model (``WindowRules.figures``: lm-eval's per document, GPTQ's
per window), and whether the whole protocol was run. The maths lives with each protocol
(``input/protocols/lmeval.py``, ``gptq.py``); its pure functions are named here too.
"""

from __future__ import annotations

import numpy as np

from infoeval.input.protocols.base import WindowRules
from infoeval.input.protocols.gptq import gptq_figures
from infoeval.input.protocols.lmeval import document_loglikelihoods, lmeval_figures

__all__ = ["document_loglikelihoods", "gptq_figures", "lmeval_figures", "protocol_figures"]


def protocol_figures(
    rules: WindowRules, layout: dict | None, documents, identity: dict, nll_by_model: dict[str, np.ndarray]
) -> dict | None:
    """The protocol's figures for each model (``nll_by_model``: name → per-position NLL, in the columns' order),
    with whether the whole protocol was run; None for a protocol without figures of its own."""
    if rules.figure_table is None:
        return None
    figures = {model: rules.figures(nll, identity, documents) for model, nll in nll_by_model.items()}
    return {"protocol": rules.name, "complete": bool((layout or {}).get("complete", True)), "figures": figures}

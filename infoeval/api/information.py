"""Information in text and in distributions as functions: ``infoeval.mutual_info`` (how much the first half of a
block tells a model about the second) and ``infoeval.kl_fit`` (forward against reverse KL on a toy target); the
CLI's commands call them.

    import infoeval
    mi = infoeval.mutual_info(lengths=(16, 64, 256), blocks=8)
    fit = infoeval.kl_fit(target="0.6:25:5,0.4:70:5", starts=(30, 60))
"""

from __future__ import annotations

from infoeval.api.requests import takes
from infoeval.api.scoring import _prepared, _reporter
from infoeval.klfit.fit import KLFitSettings
from infoeval.mutual_information.request import MutualInfoRequest


@takes(MutualInfoRequest, "mutual-info")
def mutual_info(request: MutualInfoRequest):
    """mutual-info: I(L) ≈ H(Y) − H(Y|X) in bits, X the first and Y the second half of blocks of L tokens, for each
    length, and the power law I(L) ≈ A·L^β with a bootstrap CI for β; ``max_tokens``: the text tokens the blocks
    may use (None: as many as they need). Called with the keywords of ``MutualInfoRequest``, a request, or
    ``config=``."""
    from infoeval.models.objects import evaluating
    from infoeval.mutual_information.mutual_info import run_mutual_info

    model, model_settings = _prepared(request)
    with evaluating(model):
        return run_mutual_info(model_settings, request.text, request.settings, _reporter(request.progress))


@takes(KLFitSettings, "kl-fit", first="target")
def kl_fit(settings: KLFitSettings):
    """kl-fit: one discretized Gaussian fitted to a mixture ``target`` (WEIGHT:CENTRE:WIDTH bumps) by forward KL (mode
    covering) and by reverse KL (mode seeking), from each start; returns the ``KLFitResult``."""
    from infoeval.klfit.fit import kl_fit_result

    return kl_fit_result(settings)

"""Per-unit measurements as functions: ``infoeval.sensitivity`` (which units a scheme hurts) and ``infoeval.mix``
(the best scheme per unit for a bits budget, measured); the CLI's commands call them.

    import infoeval
    s = infoeval.sensitivity(schemes="int4-g128", by="type", max_tokens=2048)
    m = infoeval.mix(budget_bits="int4-g128", max_tokens=2048)
    m.exports["recipe"]        # the recipe TOML, as `infoeval mix` writes it
"""

from __future__ import annotations

from infoeval.api.requests import takes
from infoeval.api.scoring import _reporter, _run
from infoeval.mixing.settings import MixRequest
from infoeval.sensitivities.request import SENSITIVITY_MAX_TOKENS, SensitivityRequest  # noqa: F401  (re-exported)


@takes(SensitivityRequest, "sensitivity")
def sensitivity(request: SensitivityRequest):
    """sensitivity: each unit (``by`` linear, block or type; ``units`` globs keep some) quantized alone with each
    scheme and measured against the original on the same windows (mean KL ± SE, P99, top-1, Δ ln PPL ± SE), with
    the diagonal-Fisher proxy (``proxy``) and its Spearman ρ; returns the ``SensitivityResult``. Called with the
    keywords of ``SensitivityRequest``, a request, or ``config=`` a TOML file of them."""
    from infoeval.sensitivities import sweep

    return _run(
        request,
        sweep,
        request.schemes,
        by=request.by,
        units=request.units,
        block_cache=request.block_cache,
        proxy=request.proxy,
        seed=request.seed,
        reporter=_reporter(request.progress),
    )


@takes(MixRequest, "mix")
def mix(request: MixRequest):
    """mix: one scheme per unit minimising the predicted KL within ``budget_bits`` stored bits per weight (or a
    scheme's exact bits), solved exactly from a sensitivity sweep (or ``sensitivity`` files), then the mix and every
    uniform scheme measured on held-out text; returns the ``MixResult`` (``exports``: the recipe, llama.cpp tensor
    types, compressed-tensors config; ``sweep``: the sweep's own result) with its positions. Called with the
    keywords of ``MixRequest``, a request, or ``config=``."""
    from infoeval.comparison.frames import positions_frame
    from infoeval.mixing.mix import mix as run_mix

    result, cols, sweep_json = _run(request, run_mix, request.mix, _reporter(request.progress))
    return result.with_positions(lambda: positions_frame(cols.reference, cols.variants), cols).with_sweep(sweep_json)

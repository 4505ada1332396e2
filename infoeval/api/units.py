"""Per-unit measurements as functions: ``infoeval.sensitivity`` (which units a scheme hurts) and ``infoeval.mix``
(the best scheme per unit for a bits budget, measured); the CLI's commands call them.

    import infoeval
    s = infoeval.sensitivity(schemes="int4-g128", by="type", max_tokens=2048)
    m = infoeval.mix(budget_bits="int4-g128", max_tokens=2048)
    m.exports["recipe"]        # the recipe TOML, as `infoeval mix` writes it
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from infoeval.api.checks import checked
from infoeval.api.scoring import _reporter, comma_list, prepared
from infoeval.errors import UsageError, keyword_errors
from infoeval.input.settings import DEFAULT_MODEL
from infoeval.mixing.settings import DEFAULT_MIX_SCHEMES

SENSITIVITY_MAX_TOKENS = 2048  # the sensitivity command's --max-tokens default


@keyword_errors
@checked
def sensitivity(
    model: str | object = DEFAULT_MODEL,
    *,
    tokenizer=None,
    schemes: str | Sequence[str] = "int4-g128",
    by: str = "type",
    units: Sequence[str] | None = None,
    block_cache: bool = True,
    proxy: bool = True,
    seed: int = 0,
    max_tokens: int | str | None = SENSITIVITY_MAX_TOKENS,
    progress: bool = False,
    **run,
):
    """sensitivity: each unit (``by`` linear, block or type; ``units`` globs keep some) quantized alone with each
    scheme and measured against the original on the same windows (mean KL ± SE, P99, top-1, Δ ln PPL ± SE), with
    the diagonal-Fisher proxy (``proxy``) and its Spearman ρ; returns the ``SensitivityResult``."""
    from infoeval.models.objects import evaluating
    from infoeval.quant.schemes import parse_schemes
    from infoeval.sensitivities import sweep
    from infoeval.sensitivities.units import KINDS, split_globs

    if by not in KINDS:
        raise UsageError(f"--by '{by}' is not allowed; use one of {', '.join(KINDS)}")
    model, (model_settings, text_settings, window_settings) = prepared(
        model, tokenizer, {**run, "max_tokens": max_tokens}
    )
    parsed = parse_schemes(comma_list(schemes))  # a bad scheme fails before anything loads
    with evaluating(model):
        return sweep(
            model_settings,
            text_settings,
            window_settings,
            parsed,
            by=by,
            units=split_globs(units),
            block_cache=block_cache,
            proxy=proxy,
            seed=seed,
            reporter=_reporter(progress),
        )


@keyword_errors
@checked
def mix(
    model: str | object = DEFAULT_MODEL,
    *,
    tokenizer=None,
    schemes: str | Sequence[str] = DEFAULT_MIX_SCHEMES,
    budget_bits: str | float = "int4-g128",
    by: str = "type",
    sensitivity: Sequence[str | Path] = (),
    sweep: str | None = None,
    sweep_tokens: int = 2048,
    block_cache: bool = True,
    progress: bool = False,
    **run,
):
    """mix: one scheme per unit minimising the predicted KL within ``budget_bits`` stored bits per weight (or a
    scheme's exact bits), solved exactly from a sensitivity sweep (or ``sensitivity`` files), then the mix and every
    uniform scheme measured on held-out text; returns the ``MixResult`` (``exports``: the recipe, llama.cpp tensor
    types, compressed-tensors config; ``sweep``: the sweep's own result) with its positions."""
    from infoeval.comparison.frames import positions_frame
    from infoeval.mixing.pipeline import mix as run_mix
    from infoeval.mixing.settings import MixSettings
    from infoeval.models.objects import evaluating

    settings = MixSettings(
        schemes=comma_list(schemes),
        budget=str(budget_bits),
        by=by,
        sensitivity=tuple(Path(p) for p in sensitivity),
        sweep=sweep,
        sweep_tokens=sweep_tokens,
        block_cache=block_cache,
    )
    model, (model_settings, text_settings, window_settings) = prepared(model, tokenizer, run)
    with evaluating(model):
        result, cols, sweep_json = run_mix(
            model_settings, text_settings, window_settings, settings, _reporter(progress)
        )
    return result.with_positions(lambda: positions_frame(cols.reference, cols.variants), cols).with_sweep(sweep_json)

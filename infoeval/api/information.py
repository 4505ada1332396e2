"""Information in text and in distributions as functions: ``infoeval.mutual_info`` (how much the first half of a
block tells a model about the second) and ``infoeval.kl_fit`` (forward against reverse KL on a toy target); the
CLI's commands call them.

    import infoeval
    mi = infoeval.mutual_info(lengths=(16, 64, 256), blocks=8)
    fit = infoeval.kl_fit(target="0.6:25:5,0.4:70:5", starts=(30, 60))
"""

from __future__ import annotations

from collections.abc import Sequence

from infoeval.api.checks import checked
from infoeval.api.scoring import _reporter, comma_list, prepared
from infoeval.errors import UsageError, keyword_errors
from infoeval.input.settings import DEFAULT_MODEL
from infoeval.mutual_information.estimator import DEFAULT_BATCH_TOKENS, DEFAULT_BLOCKS, DEFAULT_LENGTHS

TEXT_KEYWORDS = ("text", "dataset", "data_dir", "device", "dtype", "device_map")


@keyword_errors
@checked
def mutual_info(
    model: str | object = DEFAULT_MODEL,
    *,
    tokenizer=None,
    lengths: str | Sequence[int] = DEFAULT_LENGTHS,
    blocks: int = DEFAULT_BLOCKS,
    max_tokens: int | str | None = None,
    prefix: str = "auto",
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    bootstrap: int = 1000,
    seed: int = 0,
    progress: bool = False,
    **run,
):
    """mutual-info: I(L) ≈ H(Y) − H(Y|X) in bits, X the first and Y the second half of blocks of L tokens, for each
    length, and the power law I(L) ≈ A·L^β with a bootstrap CI for β; ``max_tokens``: the text tokens the blocks
    may use (None: as many as they need); ``run``: text, dataset, data_dir, device, dtype, device_map."""
    from infoeval.models.objects import evaluating
    from infoeval.mutual_information.estimator import parse_lengths
    from infoeval.mutual_information.pipeline import MISettings, run_mutual_info

    unknown = sorted(set(run) - set(TEXT_KEYWORDS))
    if unknown:
        raise UsageError(
            f"unknown keyword '{unknown[0]}'; allowed besides the command's own: {', '.join(TEXT_KEYWORDS)}"
        )
    settings = MISettings(parse_lengths(comma_list(lengths)), blocks, batch_tokens, bootstrap, seed, prefix)
    model, (model_settings, text_settings, _) = prepared(
        model, tokenizer, {**run, "max_tokens": max_tokens}
    )  # no windows: blocks
    with evaluating(model):
        return run_mutual_info(model_settings, text_settings, settings, _reporter(progress))


@keyword_errors
@checked
def kl_fit(
    target: str = "0.6:25:5,0.4:70:5",
    *,
    support: int = 100,
    starts: str | Sequence[float] = (30, 60),
    directions: str | Sequence[str] = ("forward", "reverse"),
    steps: int = 2000,
    lr: float = 0.5,
    sigma0: float = 10.0,
):
    """kl-fit: one discretized Gaussian fitted to a mixture ``target`` (WEIGHT:CENTRE:WIDTH bumps) by forward KL (mode
    covering) and by reverse KL (mode seeking), from each start; returns the ``KLFitResult``."""
    from infoeval.klfit.fit import KLFitSettings, kl_fit_result, parse_target

    try:
        mu0 = tuple(float(v) for v in (starts.split(",") if isinstance(starts, str) else starts) if str(v).strip())
    except ValueError:
        raise UsageError(
            f"--starts '{comma_list(starts)}' is not a comma-separated list of numbers, e.g. 30,60"
        ) from None
    dirs = tuple(d.strip() for d in (directions.split(",") if isinstance(directions, str) else directions) if d.strip())
    return kl_fit_result(KLFitSettings(parse_target(target), support, mu0, dirs, steps, lr, sigma0))

"""Each protocol's own published figures, from the per-position NLL columns. Pure numpy.

lm-eval (``lm_eval/api/metrics.py``): per document the log-likelihood ℓ_d = −Σ NLL of its tokens; then
``word_perplexity`` = exp(−Σ ℓ_d / Σ words_d), ``byte_perplexity`` = exp(−Σ ℓ_d / Σ bytes_d), ``bits_per_byte`` =
−Σ ℓ_d / Σ bytes_d / ln 2 (the ``weighted_perplexity`` and ``bits_per_byte`` aggregations: sums over documents,
not means of per-document figures).
gptq (GPTQ's ``llama_eval``, AutoAWQ's ``evaluate_perplexity``): ``ppl`` = exp(mean over windows of each window's
mean NLL), which equals exp(mean NLL) since every window scores ctx − 1 tokens.
"""

from __future__ import annotations

import math

import numpy as np

from infoeval.measure.stats import LN2

LMEVAL_FIGURES = ("word_perplexity", "byte_perplexity", "bits_per_byte")
GPTQ_FIGURES = ("ppl",)


def document_loglikelihoods(nll: np.ndarray, position: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """ℓ_d = −Σ NLL over the scored positions of each document; ``starts`` the documents' first stream positions."""
    doc = np.searchsorted(starts, position, side="right") - 1  # an empty document shares its start with the next
    return -np.bincount(doc, weights=np.asarray(nll, np.float64), minlength=len(starts))


def lmeval_figures(loglikelihoods: np.ndarray, words: np.ndarray, nbytes: np.ndarray) -> dict:
    """lm-eval's three figures from per-document log-likelihoods, word and byte counts."""
    ll = float(sum(float(x) for x in loglikelihoods))  # lm-eval sums Python floats, document by document
    w, b = int(np.sum(words)), int(np.sum(nbytes))
    return {
        "loglikelihood": ll,
        "documents": int(len(loglikelihoods)),
        "words": w,
        "bytes": b,
        "word_perplexity": math.exp(-ll / w) if w else math.nan,
        "byte_perplexity": math.exp(-ll / b) if b else math.nan,
        "bits_per_byte": -ll / b / LN2 if b else math.nan,
    }


def gptq_figures(nll: np.ndarray, window: np.ndarray) -> dict:
    """GPTQ's PPL: exp of the mean over windows of each window's mean NLL."""
    _, inverse = np.unique(window, return_inverse=True)
    sums = np.bincount(inverse, weights=np.asarray(nll, np.float64))
    means = sums / np.bincount(inverse)
    return {"ppl": math.exp(float(means.mean())), "windows": int(means.size), "nll_mean": float(means.mean())}


def protocol_figures(
    name: str, layout: dict | None, documents, identity: dict, nll_by_model: dict[str, np.ndarray]
) -> dict | None:
    """The protocol's figures for each model (``nll_by_model``: name → per-position NLL, in the columns' order),
    with whether the whole protocol was run; None for protocols without figures of their own."""
    if name == "lm-eval":

        def one(nll):
            return lmeval_figures(
                document_loglikelihoods(nll, identity["position"], documents.starts), documents.words, documents.nbytes
            )
    elif name == "gptq":

        def one(nll):
            return gptq_figures(nll, identity["window"])
    else:
        return None
    figures = {model: one(nll) for model, nll in nll_by_model.items()}
    return {"protocol": name, "complete": bool((layout or {}).get("complete", True)), "figures": figures}

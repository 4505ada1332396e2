"""The lm-eval protocol's token stream: documents → one stream and its windows.

Every document is tokenized as lm-evaluation-harness's HF model does it for ``loglikelihood_rolling``
(``tok_encode``: ``tokenizer.encode(doc)`` with the tokenizer's default special tokens, none when the document
starts with the prefix token's text), preceded by the prefix token (BOS, else EOS: ``prefix_token_id``); the
documents' streams are concatenated and ``windows.lmeval_windows`` keeps every window inside its document.

Its figures (``lm_eval/api/metrics.py``): per document the log-likelihood ℓ_d = −Σ NLL of its tokens; then
``word_perplexity`` = exp(−Σ ℓ_d / Σ words_d), ``byte_perplexity`` = exp(−Σ ℓ_d / Σ bytes_d), ``bits_per_byte`` =
−Σ ℓ_d / Σ bytes_d / ln 2 (the ``weighted_perplexity`` and ``bits_per_byte`` aggregations: sums over documents,
not means of per-document figures).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from infoeval.errors import DataError, UsageError, spell
from infoeval.input.documents import Documents, count_words, documents_spec, load_documents
from infoeval.input.protocols.base import Cut, DocumentLayout, FigureTable, WindowRules  # noqa: F401  (re-exported)
from infoeval.input.tokens import TokenStream, default_special_tokens, text_tokens
from infoeval.input.windows import lmeval_windows


def lmeval_prefix(policy: str, bos: int | None, eos: int | None) -> tuple[int, str]:
    """lm-eval's prefix token: BOS, else EOS (``--prefix auto``), or the one asked for."""
    if policy == "none":
        raise UsageError(
            f"{spell('prefix')} none is not part of the lm-eval protocol (it always puts a prefix token first); use "
            "auto, bos or eos"
        )
    tid = (bos if bos is not None else eos) if policy == "auto" else (bos if policy == "bos" else eos)
    if tid is None:
        raise UsageError(
            f"{spell('prefix')} {policy}: the tokenizer has no "
            f"{'BOS or EOS' if policy == 'auto' else policy.upper()} token"
        )
    what = "BOS" if tid == bos else "EOS"
    return (
        tid,
        f"{what} before every document "
        f"({'lm-eval prefix_token_id: BOS, else EOS' if policy == 'auto' else '--prefix ' + policy})",
    )


def _document(text: str, tokenizer, marker: str, specials, left: int | None):
    """One document's ids and bytes (lm-eval's tok_encode), cut to ``left`` tokens; whether it was cut."""
    ids, nbytes = text_tokens(text, tokenizer, *(((), ()) if text.startswith(marker) else specials))
    if left is not None and ids.size > left:
        return ids[:left], nbytes[:left], True
    return ids, nbytes, False


def lmeval_cut(docs: Documents, tokenizer, prefix: tuple[int, str], ctx: int, max_tokens: int | None) -> Cut:
    """The documents' streams concatenated (``P d…`` each), lm-eval's windows, and the document layout; with
    ``max_tokens`` documents are taken in order until that many tokens are scored (the last one cut)."""
    prefix_id, prefix_desc = prefix
    marker = tokenizer.decode(prefix_id)
    specials = default_special_tokens(tokenizer)
    ids, nbytes, lengths, words, doc_bytes = [], [], [], [], []
    left, cut = max_tokens, False
    for text, w, b in zip(docs.texts, docs.words, docs.nbytes):
        if left is not None and left <= 0:
            break
        d_ids, d_bytes, cut = _document(text, tokenizer, marker, specials, left)
        if cut:  # the part scored: its bytes, and the words of the text they cover
            b = int(d_bytes.sum())
            w = count_words(text.encode("utf-8")[:b].decode("utf-8", errors="ignore"))
        if d_ids.size:
            ids += [np.array([prefix_id], np.int64), d_ids]
            nbytes += [np.zeros(1, np.int64), d_bytes]
        lengths.append(d_ids.size + 1 if d_ids.size else 0)
        words.append(w)
        doc_bytes.append(b)
        left = None if left is None else left - d_ids.size
        if cut:
            break
    stream = TokenStream(
        torch.from_numpy(np.concatenate(ids or [np.zeros(0, np.int64)])),
        np.concatenate(nbytes or [np.zeros(0, np.int64)]),
        prefix_id,
    )
    windows = lmeval_windows(lengths, ctx)
    complete = not cut and len(lengths) == len(docs.texts)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    layout = DocumentLayout(starts, np.array(words, np.int64), np.array(doc_bytes, np.int64), complete, len(docs.texts))
    rule = (
        f"lm-eval (loglikelihood_rolling): each document its own stream after the prefix token, encoded with the "
        f"tokenizer's default special tokens (tok_encode); windows of at most {ctx} inputs score up to {ctx} tokens "
        f"each, every token once, the last window of a document filled with its earlier tokens; windows never "
        f"cross documents"
    )
    summary = {
        "documents": docs.rule,
        "documents_total": len(docs.texts),
        "documents_scored": len(lengths),
        "complete": complete,
        "special_tokens": {"before": specials[0], "after": specials[1]},
    }
    return Cut(stream, windows, prefix_id, prefix_desc, rule, int(sum(max(n - 1, 0) for n in lengths)), summary, layout)


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
        "bits_per_byte": -ll / b / math.log(2.0) if b else math.nan,  # lm-eval's own expression
    }


class LmEval(WindowRules):
    name = "lm-eval"
    summary = "lm-evaluation-harness's loglikelihood_rolling: each document alone, a prefix token first"
    reads_documents = True
    cuts_itself = True
    figure_table = FigureTable(
        "lm-eval figures",
        "lm-evaluation-harness's loglikelihood_rolling metrics, summed over documents",
        (
            ("word_perplexity", "word_perplexity", 4),
            ("byte_perplexity", "byte_perplexity", 4),
            ("bits_per_byte", "bits_per_byte", 4),
            ("docs", "documents", 4),
            ("words", "words", 4),
            ("bytes", "bytes", 4),
            ("log-lik", "loglikelihood", 2),
        ),
    )

    def figures(self, nll, identity, documents) -> dict:
        ll = document_loglikelihoods(nll, identity["position"], documents.starts)
        return lmeval_figures(ll, documents.words, documents.nbytes)

    def load(self, text_settings) -> tuple[object, Documents]:
        return load_documents(
            text_settings.text,
            text_settings.dataset,
            text_settings.data_dir,
            text_settings.documents,
            text_settings.document_field,
        )

    def reread(self, info: dict):
        documents, field = documents_spec(info)
        source = info.get("source")
        path = Path(info["path"]) if source == "file" and info.get("path") else None
        try:
            return load_documents(path, None if source in ("file", "jsonl") else source, None, documents, field)[0]
        except (UsageError, DataError, TypeError):
            return None

    def cut(self, text, docs, loaded, text_settings, window_settings) -> Cut:
        info = loaded.info.tokenizer
        prefix = lmeval_prefix(window_settings.prefix, info.bos_id, info.eos_id)
        return lmeval_cut(docs, loaded.tokenizer, prefix, window_settings.ctx, text_settings.max_tokens)

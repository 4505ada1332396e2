"""Calibration data for the methods that learn from text (AutoRound): ``samples`` chunks of ``seqlen`` tokens
from a named text, by default disjoint from the tokens the evaluation reads.

Where the chunks come from:

* no ``--calibration`` text, or the evaluation's own text: the part of that text after the evaluated tokens
  (the held-out tail; ``--max-tokens`` leaves it), so the method never sees what it is judged on;
* another named text (a dataset name or a UTF-8 file): all of it.

The text is cut into consecutive chunks of ``seqlen`` tokens and ``samples`` of them are drawn without
replacement with a seeded generator, then kept in text order::

    held-out tokens:   | c0 | c1 | c2 | c3 | c4 | c5 | c6 |    (seqlen each, the rest dropped)
    samples=3, seed:          c1        c3             c6

Whatever the source, every chunk is then checked against the evaluated tokens: a run of ``OVERLAP_RUN``
consecutive token ids that occurs in both is an overlap, refused unless ``allow_overlap`` (``--calibration-
overlap``), in which case the chunks may also come from anywhere in the evaluation's text. The provenance
records the text's hash and size, where the chunks came from, the seed and the sha256 of the token ids used.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from infoeval.errors import UsageError, spell
from infoeval.input.text import DATASETS, Text, load_text
from infoeval.input.tokens import TokenStream, text_tokens
from infoeval.quant.variant_settings import CalibrationSettings

OVERLAP_RUN = 32  # tokens: shorter common runs (boilerplate, code idioms) happen between unrelated texts


@dataclass(frozen=True)
class Calibration:
    samples: torch.Tensor  # (samples, seqlen) int64 token ids
    provenance: dict


def chunk_starts(n_tokens: int, seqlen: int, samples: int, seed: int) -> np.ndarray:
    """Start offsets of ``samples`` of the ``n_tokens // seqlen`` consecutive chunks, drawn with ``seed``, sorted.

    >>> chunk_starts(10, 3, 2, seed=0).tolist()  # chunks at 0, 3, 6; two of them
    [0, 6]
    """
    n_chunks = n_tokens // seqlen
    if n_chunks < samples:
        raise ValueError(f"{n_chunks} chunks, {samples} wanted")
    picked = np.random.default_rng(seed).choice(n_chunks, size=samples, replace=False)
    return np.sort(picked) * seqlen


def _runs(ids: np.ndarray, run: int) -> np.ndarray:
    """Every window of ``run`` consecutive ids as one opaque value (a row of bytes), (len − run + 1,)."""
    if len(ids) < run:
        return np.empty(0, dtype=f"V{4 * run}")
    windows = np.lib.stride_tricks.sliding_window_view(np.ascontiguousarray(ids, dtype=np.int32), run)
    return np.ascontiguousarray(windows).view(f"V{4 * run}").ravel()


def shared_runs(evaluated: np.ndarray, chunks: np.ndarray, run: int = OVERLAP_RUN) -> int:
    """How many windows of ``run`` ids inside the chunks (each row of ``chunks`` on its own) also occur in
    ``evaluated``. 0 means no run of that length is common to both.

    >>> shared_runs(np.arange(100), np.arange(40, 80)[None, :], run=32)  # 40..79 lies inside 0..99: 9 windows
    9
    """
    seen = set(_runs(evaluated, run).tolist())
    return sum(int(v in seen) for row in chunks for v in _runs(row, run).tolist())


def _calibration_text(settings: CalibrationSettings, evaluated: Text) -> Text:
    if settings.text is None:
        return evaluated
    name = settings.text
    return load_text(dataset=name) if name.lower() in DATASETS else load_text(text_path=Path(name))


def calibration_samples(
    settings: CalibrationSettings, evaluated: Text | None, evaluated_ids: np.ndarray, evaluated_bytes: int, tokenizer
) -> Calibration:
    """The chunks a calibrated method learns from, and their provenance (see the module's docstring).
    ``evaluated``: the evaluation's text (None where it cannot be read: then a --calibration text is needed);
    ``evaluated_ids``: the token ids the evaluation reads, which cover the text's first ``evaluated_bytes``."""
    if settings.text is None and evaluated is None:
        raise UsageError(
            "the evaluated text cannot be read again here to hold out its tokens; name the calibration text "
            f"with {spell('calibration')}"
        )
    source = _calibration_text(settings, evaluated)
    own = evaluated is not None and source.sha256 == evaluated.sha256
    held_out = own and not settings.allow_overlap
    raw = source.text.encode("utf-8")
    skip = evaluated_bytes if held_out else 0
    ids, _ = text_tokens(raw[skip:].decode("utf-8", errors="ignore"), tokenizer)  # as the evaluation tokenizes
    where = f"the {len(raw) - skip} bytes of {_name(source)} after the evaluated ones" if held_out else _name(source)
    try:
        starts = chunk_starts(len(ids), settings.seqlen, settings.samples, settings.seed)
    except ValueError:
        raise UsageError(
            f"calibration needs {settings.samples} × {settings.seqlen} tokens and {where} hold {len(ids)}: "
            "give a smaller "
            f"{spell('calibration_samples')} or {spell('calibration_seqlen')}, fewer {spell('max_tokens')}, or a "
            f"larger {spell('calibration')} text"
        ) from None
    chunks = np.stack([ids[s : s + settings.seqlen] for s in starts])
    shared = shared_runs(np.asarray(evaluated_ids), chunks)
    if shared and not settings.allow_overlap:
        raise UsageError(
            f"the calibration chunks from {where} repeat the evaluated tokens ({shared} runs of {OVERLAP_RUN} tokens): "
            f"calibrating on what is evaluated flatters the method; give another {spell('calibration')} text, or "
            f"{spell('calibration_overlap')} to allow it"
        )
    provenance = {
        **source.provenance(),
        "held_out": held_out,
        "offset_bytes": skip,
        "tokens_available": int(len(ids)),
        "samples": settings.samples,
        "seqlen": settings.seqlen,
        "seed": settings.seed,
        "chunk_starts": starts.tolist(),
        "tokens_sha256": hashlib.sha256(chunks.astype("<i8").tobytes()).hexdigest(),
        "overlap_run": OVERLAP_RUN,
        "overlap_runs": shared,
        "overlap_allowed": settings.allow_overlap,
    }
    return Calibration(torch.from_numpy(chunks), provenance)


def _name(text: Text) -> str:
    return text.path or text.source


def for_methods(
    methods, settings: CalibrationSettings | None, evaluated: Text | None, stream: TokenStream, tokenizer
) -> Calibration | None:
    """The calibration chunks when one of ``methods`` (MethodScheme) learns from text, else None; the
    evaluation reads ``stream`` (from the start of ``evaluated``)."""
    if not any(m.calibrated for m in methods):
        return None
    return calibration_samples(
        settings or CalibrationSettings(), evaluated, stream.ids.numpy(), int(stream.nbytes.sum()), tokenizer
    )

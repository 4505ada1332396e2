"""The pipeline behind ``infoeval mutual-info``: settings, the blocks of every length through the estimator,
the power-law fit with its bootstrap CI, and the result."""

from __future__ import annotations

import dataclasses

import numpy as np

from infoeval.errors import DataError
from infoeval.input.prepare import Prepared, Reporter, prepare, progress
from infoeval.input.provenance import provenance
from infoeval.input.settings import ModelSettings, TextSettings, WindowSettings
from infoeval.mutual_information.estimator import (
    RULE,
    LengthSummary,
    blocks_per_length,
    check_blocks,
    check_max_positions,
    estimate,
    forwards_needed,
)
from infoeval.mutual_information.powerlaw import fit_with_ci
from infoeval.mutual_information.request import MISettings, check_settings  # noqa: F401  (re-exported)
from infoeval.mutual_information.result import MutualInfoResult


def _block_rows(summaries: list[LengthSummary], nbytes: np.ndarray) -> list[dict]:
    """Where every block lies: stream positions (the start token is position 0) and UTF-8 byte offsets."""
    starts = np.cumsum(nbytes) - nbytes
    stride = max(s.length for s in summaries)
    rows = []
    for s in summaries:
        for k in range(s.blocks):
            x0 = 1 + k * stride
            end = x0 + s.length
            rows.append(
                {
                    "length": s.length,
                    "block": k,
                    "x_start": x0,
                    "y_start": x0 + s.length // 2,
                    "end": end,
                    "byte_start": int(starts[x0]),
                    "byte_end": int(starts[end - 1] + nbytes[end - 1]),
                    "marginal_bits": float(s.marginal_bits[k]),
                    "conditional_bits": float(s.conditional_bits[k]),
                    "mi_bits": float(s.mi_bits[k]),
                }
            )
    return rows


def _length_rows(summaries: list[LengthSummary], fit: dict, seconds: dict[int, float]) -> list[dict]:
    """A row per length: its estimate, the fitted power law's value there, its time and its per-position profiles."""
    rows = []
    for x in summaries:
        law = fit.get("fit")
        rows.append(
            x.row()
            | {
                "mi_bits_fit": law["a"] * x.length ** law["beta"] if law else None,
                "seconds": seconds[x.length],
                "marginal_profile_bits": x.marginal_profile.tolist(),
                "conditional_profile_bits": x.conditional_profile.tolist(),
            }
        )
    return rows


def _protocol(
    p: Prepared, text_settings: TextSettings, s: MISettings, tokens_available: int, counts: dict, max_positions
) -> dict:
    """The result's protocol record: the rule, the start token, the tokens read and the blocks of every length."""
    return {
        "name": "mutual-info",
        "rule": RULE,
        "prefix": s.prefix,
        "prefix_token": p.protocol.prefix_token,
        "prefix_id": p.protocol.prefix_id,
        "max_tokens": text_settings.max_tokens,
        "tokens_available": tokens_available,
        "text_tokens": p.protocol.text_tokens,
        "tokenized": p.protocol.tokenized,
        "tokenizer": p.protocol.tokenizer,
        "blocks_requested": s.blocks,
        "blocks": {str(k): v for k, v in counts.items()},
        "max_positions": max_positions,
    }


def run_mutual_info(
    model_settings: ModelSettings, text_settings: TextSettings, s: MISettings, reporter: Reporter | None = None
) -> MutualInfoResult:
    """Load model and text, score the blocks of every length, fit I(L) ≈ A·L^β."""
    reporter = reporter or Reporter()
    check_settings(s)
    need = s.blocks * max(s.lengths)
    cap = need if text_settings.max_tokens is None else min(text_settings.max_tokens, need)
    p = prepare(
        model_settings,
        dataclasses.replace(text_settings, max_tokens=cap),
        WindowSettings(ctx=max(s.lengths), prefix=s.prefix),
        reporter,
        check_ctx=False,  # --lengths sets the length: check_max_positions says so below
    )
    start_id = p.protocol.prefix_id
    if start_id is None:
        raise DataError(
            "the tokenizer has neither a BOS nor an EOS token; mutual-info needs a start token to score Y alone"
        )
    max_positions = getattr(p.loaded.model.config, "max_position_embeddings", None)
    check_max_positions(s.lengths, max_positions)
    text_ids = p.stream.ids[1:]
    counts = blocks_per_length(int(text_ids.shape[0]), s.lengths, s.blocks)
    check_blocks(counts, int(text_ids.shape[0]))
    seconds: dict[int, float] = {}
    with progress(
        reporter,
        forwards_needed(counts, s.batch_tokens),
        f"{sum(counts.values())} blocks × 2 passes, {len(counts)} lengths",
    ) as bar:
        summaries = estimate(
            p.loaded.model,
            text_ids,
            start_id,
            s.lengths,
            s.blocks,
            s.batch_tokens,
            bar.step,
            lambda length, sec: seconds.__setitem__(length, sec),
        )
    reporter.stage("bootstrapping the fit")
    fit = fit_with_ci(list(s.lengths), [x.mi_bits for x in summaries], s.bootstrap, s.seed)
    reporter.stop()
    protocol = _protocol(p, text_settings, s, int(text_ids.shape[0]), counts, max_positions)
    return MutualInfoResult(
        provenance("mutual-info", model=p.loaded.info, text=p.text, protocol=protocol),
        {**p.timings, "eval_s": bar.seconds},
        settings=dataclasses.asdict(s) | {"lengths": list(s.lengths)},
        lengths=tuple(_length_rows(summaries, fit, seconds)),
        fit=fit,
        blocks=tuple(_block_rows(summaries, p.stream.nbytes)),
    )

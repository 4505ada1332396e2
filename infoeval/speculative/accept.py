"""spec-accept: how well a draft q would draft for a target p, measured from both models' logits on every scored
position of a text (the windows of quantize-compare).

Per position and temperature: β = Σ min(p_T, q) (the probability that the draft's token is accepted), KL(p_T‖q),
TV, the entropies of p_T and q and the observed token's NLL under each, and whether the two top tokens agree.
Each temperature T is measured twice (once only at T = 1, where both coincide): with both models at T
(``both``: q = q_T, what speculative sampling at temperature T accepts) and with only the target at T
(``target``: q = q_1 unchanged). Each window is reduced a chunk of rows at a time; no (tokens × vocab)
tensor is made but the logits.
"""

from __future__ import annotations

import time

import numpy as np

from infoeval.errors import UsageError, counted
from infoeval.input.prepare import Reporter, prepare, progress
from infoeval.input.settings import ModelSettings, TextSettings, WindowSettings
from infoeval.measure.stats import LN2, mean_se, pearson, pinsker
from infoeval.speculative.accept_columns import AcceptColumns, evaluate_windows, key
from infoeval.speculative.drafts import DraftSettings, draft_for
from infoeval.speculative.results import GAMMAS, AcceptResult
from infoeval.speculative.theory import entropy_quartiles, expected_tokens_table, run_length_table, run_lengths


def parse_temperatures(spec: str | float, option: str = "--temperature") -> tuple[float, ...]:
    """'0.5,1,2' → (0.5, 1.0, 2.0); each T > 0 and finite, no repeats."""
    parts = [s.strip() for s in str(spec).split(",") if s.strip()]
    if not parts:
        raise UsageError(f"{option} is empty; give temperatures such as 0.5,1,2")
    temps = []
    for s in parts:
        try:
            t = float(s)
        except ValueError:
            raise UsageError(f"{option} '{s}' is not a number; give positive temperatures such as 0.5,1,2") from None
        if not (t > 0 and np.isfinite(t)):
            raise UsageError(f"{option} {s} is not allowed; temperatures must be positive and finite")
        if t in temps:
            raise UsageError(f"{option} lists {s} twice")
        temps.append(t)
    return tuple(temps)


def summarize(cols: AcceptColumns, t: float, mode: str) -> dict:
    """Aggregates of one condition (see ``metrics.ACCEPT_METRICS`` for each metric's definition)."""
    s = cols.stats[key(t, mode)]
    top1 = cols.base["top1"]
    beta, kl, tv = (s[k].astype(np.float64) for k in ("beta", "kl", "tv"))
    h_bits = s["entropy_p"].astype(np.float64) / LN2
    windows = cols.base["window"]
    alpha, alpha_se = mean_se(beta, windows)
    kl_mean, kl_se = mean_se(kl, windows)
    r, r_n = pearson(h_bits, beta)
    return {
        "temperature": t,
        "mode": mode,
        "tokens": int(beta.size),
        "alpha": alpha,
        "alpha_se": alpha_se,
        "kl_mean": kl_mean,
        "kl_se": kl_se,
        "tv_mean": float(tv.mean()),
        "pinsker": pinsker(tv, kl),
        "pearson_r": r,
        "pearson_n": r_n,
        "entropy_p_bits": float(h_bits.mean()),
        "entropy_q_bits": float(s["entropy_q"].astype(np.float64).mean() / LN2),
        "nll_p": float(s["nll_p"].astype(np.float64).mean()),
        "nll_q": float(s["nll_q"].astype(np.float64).mean()),
        "quartiles": entropy_quartiles(h_bits, beta, kl, top1, windows),
        "expected_tokens": expected_tokens_table(beta, GAMMAS, windows),
    }


def top1_summary(cols: AcceptColumns) -> dict:
    m = cols.base["top1"]
    a, a_se = mean_se(m.astype(np.float64), cols.base["window"])
    lengths = run_lengths(m, cols.base["position"])
    return {
        "top1": a,
        "top1_se": a_se,
        "runs": int(lengths.size),
        "run_mean": float(lengths.mean()) if lengths.size else float("nan"),
        "run_max": int(lengths.max()) if lengths.size else 0,
        "run_lengths": run_length_table(lengths, a),
    }


def spec_accept(
    model_settings: ModelSettings,
    text_settings: TextSettings,
    window_settings: WindowSettings,
    draft_settings: DraftSettings,
    temps: tuple[float, ...],
    reporter: Reporter | None = None,
) -> tuple[AcceptResult, AcceptColumns]:
    reporter = reporter or Reporter()
    draft_settings.check()  # before the slow load
    p = prepare(model_settings, text_settings, window_settings, reporter)
    reporter.stage("building the draft")
    t0 = time.perf_counter()
    draft = draft_for(p.loaded, draft_settings, model_settings, reporter.note)
    draft_s = time.perf_counter() - t0
    with progress(reporter, 2 * len(p.windows), f"{counted(len(p.windows), 'window')} × (target + draft)") as bar:
        cols = evaluate_windows(p, draft, temps, bar.step)
    result = AcceptResult(
        p.provenance("spec-accept", draft=draft.info),
        {**p.timings, "draft_s": draft_s, "eval_s": bar.seconds},
        notation="p = target, q = draft; β = Σ min(p, q) per position; α = mean β",
        temperatures=temps,
        conditions=tuple(summarize(cols, t, m) for t, m in cols.conditions),
        top1=top1_summary(cols),
    )
    return result, cols


POSITION_COLUMNS = [
    "window",
    "position",
    "token_id",
    "context",
    "temperature",
    "mode",
    "entropy_p_bits",
    "entropy_q_bits",
    "beta",
    "kl",
    "tv",
    "nll_p",
    "nll_q",
    "top1_match",
]


def positions_frame(cols: AcceptColumns):
    """Long format: one row per scored position and condition (T, mode)."""
    import pandas as pd

    frames = []
    for t, mode in cols.conditions:
        s = cols.stats[key(t, mode)]
        f = pd.DataFrame({k: cols.base[k] for k in ("window", "position", "token_id", "context")})
        f["temperature"] = t
        f["mode"] = mode
        f["entropy_p_bits"] = s["entropy_p"] / LN2
        f["entropy_q_bits"] = s["entropy_q"] / LN2
        for k in ("beta", "kl", "tv", "nll_p", "nll_q"):
            f[k] = s[k]
        f["top1_match"] = cols.base["top1"].astype(np.int8)
        frames.append(f)
    return pd.concat(frames, ignore_index=True)[POSITION_COLUMNS]


def plot_acceptance(result: dict, cols: AcceptColumns, path) -> None:
    """β against the target's entropy (bits) at T = 1 (both models), drawn by ``infoeval.output.plots``."""
    from pathlib import Path

    from infoeval.output.plots import plot_acceptance_by_entropy

    t, mode = (1.0, "both") if 1.0 in result["temperatures"] else cols.conditions[0]
    s = cols.stats[key(t, mode)]
    draft = result["provenance"]["draft"]
    name = {"model": draft.get("spec"), "scheme": draft.get("scheme"), "layers": f"first {draft.get('layers')} layers"}[
        draft["kind"]
    ]
    pv = result["provenance"]
    title = f"{pv['model']['spec']} vs draft {name} on {pv['text']['source']}, T = {t:g} ({mode})"
    plot_acceptance_by_entropy(s["entropy_p"].astype(np.float64) / LN2, s["beta"].astype(np.float64), title, Path(path))

"""distill: the terms of the distillation loss (Hinton et al. 2015) of a student q against a teacher p, measured
on every scored position of a text, at each temperature T.

    hard     H(y, q)      = −ln q(y)                        at T = 1, y the observed token
    soft     KL(p_T‖q_T)  with p_T = softmax(z_p / T), q_T = softmax(z_q / T)
    total    L = α·H(y, q) + (1 − α)·T²·KL(p_T‖q_T)
    gradient ∂KL(p_T‖q_T)/∂z_q = (q_T − p_T) / T

The gradient of the soft term shrinks like 1/T² at high T (q_T − p_T ≈ (z_q − z_p − mean)/(T·V) for large
T, and one more 1/T from the chain rule), which is why the soft term is multiplied by T²: ‖T²·∂KL/∂z_q‖ stays
of the same order across T, so changing T does not silently re-weight hard and soft terms. The teacher's
entropy and its tail mass (probability outside its top-1 token) show the "dark knowledge" T exposes.

Worked two-class example (T = 2): z_p = (2, 0), z_q = (0, 0): p_T = softmax(1, 0) = (0.7311, 0.2689),
q_T = (0.5, 0.5), KL = 0.7311 ln(1.4621) + 0.2689 ln(0.5379) = 0.1109 nats, T²·KL = 0.4438,
∂KL/∂z_q = ((0.5 − 0.7311)/2, (0.5 − 0.2689)/2) = (−0.1155, 0.1155).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from infoeval.errors import UsageError, counted, spell
from infoeval.input.prepare import Reporter, prepare, progress
from infoeval.input.settings import ModelSettings, TextSettings, WindowSettings
from infoeval.measure.infotheory import by_rows, chunk_rows, log_softmax_t, nll
from infoeval.measure.stats import LN2, mean_se
from infoeval.speculative.drafts import DraftSettings, draft_for
from infoeval.speculative.pairs import base_of, run_paired
from infoeval.speculative.results import DistillResult

TERMS = (
    "hard_ce",
    "kl",
    "t2_kl",
    "loss",
    "soft_ce",
    "teacher_entropy",
    "teacher_tail_mass",
    "grad_norm",
    "t2_grad_norm",
)
GRAD_CHECK_POSITIONS = 16


def kl_grad_closed_form(zp: torch.Tensor, zq: torch.Tensor, t: float) -> torch.Tensor:
    """∂KL(p_T‖q_T)/∂z_q = (q_T − p_T) / T, per row.

    >>> kl_grad_closed_form(torch.tensor([2.0, 0.0]), torch.zeros(2), 2.0)
    tensor([-0.1155,  0.1155])
    """
    return (log_softmax_t(zq, t).exp() - log_softmax_t(zp, t).exp()) / t


def kl_grad_autograd(zp: torch.Tensor, zq: torch.Tensor, t: float) -> torch.Tensor:
    """The same gradient by autograd through log_softmax: ∂/∂z_q of Σ_rows KL(p_T‖q_T) (rows are independent)."""
    with torch.inference_mode(False), torch.enable_grad():  # clones of inference tensors can enter autograd
        z = zq.detach().double().clone().requires_grad_(True)
        lp = torch.log_softmax(zp.detach().double().clone() / t, -1)
        lq = torch.log_softmax(z / t, -1)
        kl = (lp.exp() * (lp - lq)).sum()
        (grad,) = torch.autograd.grad(kl, z)
    return grad


def distill_terms(
    zp: torch.Tensor, zq: torch.Tensor, targets: torch.Tensor, t: float, alpha: float
) -> dict[str, torch.Tensor]:
    """Per-position terms at temperature ``t`` from teacher logits ``zp`` and student logits ``zq`` (n, V), in nats."""
    hard = nll(log_softmax_t(zq, 1.0), targets)
    lp, lq = log_softmax_t(zp, t), log_softmax_t(zq, t)
    p, q = lp.exp(), lq.exp()
    kl = torch.where(p > 0, p * (lp - lq), 0.0).sum(-1)
    h = -torch.where(p > 0, p * lp, 0.0).sum(-1)
    grad_norm = torch.linalg.vector_norm(q - p, dim=-1) / t
    t2 = t * t
    return {
        "hard_ce": hard,
        "kl": kl,
        "t2_kl": t2 * kl,
        "loss": alpha * hard + (1.0 - alpha) * t2 * kl,
        "soft_ce": h + kl,
        "teacher_entropy": h,
        "teacher_tail_mass": 1.0 - p.amax(-1),
        "grad_norm": grad_norm,
        "t2_grad_norm": t2 * grad_norm,
    }


@dataclass
class DistillColumns:
    base: dict[str, np.ndarray]  # window, position, token_id, context
    terms: dict[float, dict[str, np.ndarray]]  # per T


def _evaluate(p, student, temps, alpha, on_forward=None) -> tuple[DistillColumns, dict]:
    check = {"positions": 0, "max_abs_diff": 0.0, "max_abs_grad": 0.0}

    def terms(zp, zq, targets) -> dict:  # one chunk of rows, float32
        return {f"{t!r}/{k}": v for t in temps for k, v in distill_terms(zp, zq, targets, t, alpha).items()}

    def reduce_pair(rows, zp, zq, targets) -> dict:
        out = by_rows(zp.shape[0], lambda r: terms(zp[r].float(), zq[r].float(), targets[r]), chunk_rows(zp))
        if rows.start == 0:  # the closed-form gradient against autograd on the first positions
            for t in temps:
                _check_gradient(check, zp[:GRAD_CHECK_POSITIONS].float(), zq[:GRAD_CHECK_POSITIONS].float(), t)
        return out

    schema = {f"{t!r}/{k}": np.float32 for t in temps for k in TERMS}
    cols = run_paired(p, p.loaded.model, student, reduce_pair, schema, on_forward)
    return DistillColumns(base_of(cols), {t: {k: cols[f"{t!r}/{k}"] for k in TERMS} for t in temps}), check


def _check_gradient(check: dict, a: torch.Tensor, b: torch.Tensor, t: float) -> None:
    auto, closed = kl_grad_autograd(a, b, t), kl_grad_closed_form(a.double(), b.double(), t)
    check["max_abs_diff"] = max(check["max_abs_diff"], float((auto - closed).abs().max()))
    check["max_abs_grad"] = max(check["max_abs_grad"], float(auto.abs().max()))
    check["positions"] = int(a.shape[0])


def summarize(cols: DistillColumns, t: float, alpha: float) -> dict:
    c = cols.terms[t]
    row: dict = {"temperature": t, "alpha": alpha, "tokens": int(c["kl"].size)}
    for k in TERMS:
        m, se = mean_se(c[k], cols.base["window"])
        name = {"teacher_entropy": "teacher_entropy_bits"}.get(k, k)
        scale = 1 / LN2 if k == "teacher_entropy" else 1.0
        row[name], row[f"{name}_se"] = m * scale, se * scale
    for k in ("hard_ce", "kl", "t2_kl", "loss", "soft_ce"):
        row[f"{k}_bits"] = row[k] / LN2
    return row


def parse_alpha(alpha: float) -> float:
    if not (0.0 <= alpha <= 1.0 and math.isfinite(alpha)):
        raise UsageError(
            f"{spell('alpha')} {alpha} is not allowed; the weight of the hard loss must be between 0 and 1"
        )
    return float(alpha)


def distill(
    model_settings: ModelSettings,
    text_settings: TextSettings,
    window_settings: WindowSettings,
    draft_settings: DraftSettings,
    temps: tuple[float, ...],
    alpha: float,
    reporter: Reporter | None = None,
) -> tuple[DistillResult, DistillColumns]:
    reporter = reporter or Reporter()
    alpha = parse_alpha(alpha)
    draft_settings.check()
    p = prepare(model_settings, text_settings, window_settings, reporter)
    reporter.stage("building the student")
    student = draft_for(p.loaded, draft_settings, model_settings, reporter.note)
    with progress(reporter, 2 * len(p.windows), f"{counted(len(p.windows), 'window')} × (teacher + student)") as bar:
        cols, check = _evaluate(p, student, temps, alpha, bar.step)
    result = DistillResult(
        p.provenance("distill", student=student.info),
        {**p.timings, "eval_s": bar.seconds},
        notation="p = teacher, q = student; L = α·H(y, q) + (1 − α)·T²·KL(p_T‖q_T); nats unless _bits",
        alpha=alpha,
        temperatures=temps,
        rows=tuple(summarize(cols, t, alpha) for t in temps),
        grad_check=check,
    )
    return result, cols


def positions_frame(cols: DistillColumns):
    """Long format: one row per scored position and temperature."""
    import pandas as pd

    frames = []
    for t, c in cols.terms.items():
        f = pd.DataFrame(dict(cols.base))
        f["temperature"] = t
        for k in TERMS:
            f[k if k != "teacher_entropy" else "teacher_entropy_bits"] = c[k] / LN2 if k == "teacher_entropy" else c[k]
        frames.append(f)
    return pd.concat(frames, ignore_index=True)

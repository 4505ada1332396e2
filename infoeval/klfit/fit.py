"""Forward vs reverse KL: fit one discretized Gaussian q to a two-bump target p with Adam (pure torch).

The seed's experiment, on the grid x = 0 … N−1 (N = 100):

    p(x) ∝ Σ_k w_k · exp(−½((x − c_k)/s_k)²)           default 0.6·bump(25, 5) + 0.4·bump(70, 5)
    q(x) = softmax_x(−½((x − μ)/σ)²)                   μ and ln σ learned; σ₀ = 10
    forward  KL(p‖q) = Σ p (ln p − ln q)   mode covering: q spreads over both bumps
    reverse  KL(q‖p) = Σ q (ln q − ln p)   mode seeking: q settles on the bump it starts nearest

Adam (lr 0.5, 2000 steps) from μ₀ = 30 and μ₀ = 60 gives (centre μ, width σ, KL in nats):

    forward from 30 or 60   40.2  27.2  0.786
    reverse from 30         25.0   5.0  0.511
    reverse from 60         70.0   5.0  0.916

Forward KL with a Gaussian family matches moments: the fitted q has the mean and sd of p on the grid (43.0 and
22.6); its μ and σ differ from them only because q is cut off at the grid's ends. Everything is computed in
float64 and in log space (ln p by logsumexp), so a narrow bump never makes ln p = −∞.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from infoeval.errors import UsageError, spell
from infoeval.input.fields import comma_text, names, option
from infoeval.input.provenance import provenance
from infoeval.klfit.result import KLFitResult

DIRECTIONS = ("forward", "reverse")


@dataclass(frozen=True)
class Bump:
    weight: float
    centre: float
    width: float


@dataclass(frozen=True)
class KLFitSettings:
    """kl-fit's options, each declared here once (``input/fields.py``), with the seed's defaults."""

    target: tuple[Bump, ...] = option(
        (Bump(0.6, 25.0, 5.0), Bump(0.4, 70.0, 5.0)),
        help="Target p as bumps WEIGHT:CENTRE:WIDTH, comma-separated (normalized).",
        accepts=str,
        cli=str,
        parse=lambda text: parse_target(text),
        default_text="0.6:25:5,0.4:70:5",
    )
    support: int = option(100, help="Grid size N: x = 0 … N−1.")
    starts: tuple[float, ...] = option(
        (30.0, 60.0),
        help="Comma-separated starting centres μ₀.",
        accepts=str | Sequence[float],
        cli=str,
        parse=lambda value: _starts(value),
        default_text="30,60",
    )
    directions: tuple[str, ...] = option(
        DIRECTIONS,
        help="forward (KL(p‖q)), reverse (KL(q‖p)) or both, comma-separated.",
        accepts=str | Sequence[str],
        cli=str,
        parse=names,
        default_text=",".join(DIRECTIONS),
    )
    steps: int = option(2000, help="Adam steps.")
    lr: float = option(0.5, help="Adam learning rate.")
    sigma0: float = option(10.0, help="Starting width σ₀.")

    def __post_init__(self) -> None:
        check_settings(self)


def _starts(value) -> tuple[float, ...]:
    """--starts as typed ('30,60') or passed (numbers)."""
    items = value.split(",") if isinstance(value, str) else list(value)
    try:
        return tuple(float(v) for v in items if str(v).strip())
    except ValueError:
        raise UsageError(
            f"{spell('starts')} '{comma_text(value)}' is not a comma-separated list of numbers, e.g. 30,60"
        ) from None


def parse_target(text: str) -> tuple[Bump, ...]:
    """'0.6:25:5,0.4:70:5' → bumps (weight:centre:width); weights > 0 (normalized later), widths > 0."""
    bumps = []
    for part in (p.strip() for p in text.split(",")):
        fields = part.split(":")
        try:
            w, c, s = (float(f) for f in fields)
        except ValueError:
            raise UsageError(
                f"{spell('target')} '{text}': '{part}' is not WEIGHT:CENTRE:WIDTH, e.g. 0.6:25:5,0.4:70:5"
            ) from None
        if not (w > 0 and s > 0 and all(map(math.isfinite, (w, c, s)))):
            raise UsageError(f"{spell('target')} '{text}': '{part}' needs a positive weight and a positive width")
        bumps.append(Bump(w, c, s))
    return tuple(bumps)


def check_settings(s: KLFitSettings) -> None:
    if s.support < 2:
        raise UsageError(f"{spell('support')} {s.support} is too small; the grid needs at least 2 points")
    if not s.target:
        raise UsageError(f"{spell('target')} needs at least one bump")
    if not s.starts or not all(map(math.isfinite, s.starts)):
        raise UsageError(f"{spell('starts')} needs at least one finite starting centre, e.g. 30,60")
    bad = [d for d in s.directions if d not in DIRECTIONS]
    if bad or not s.directions:
        raise UsageError(
            f"{spell('directions')} '{','.join(s.directions)}' is not allowed; choose from {', '.join(DIRECTIONS)}"
        )
    if s.steps < 0:
        raise UsageError(f"{spell('steps')} {s.steps} is not allowed; it must be 0 or more")
    if not (s.lr > 0 and s.sigma0 > 0):
        raise UsageError(f"{spell('lr')} and {spell('sigma0')} must be positive")


def grid(support: int) -> torch.Tensor:
    return torch.arange(support, dtype=torch.float64)


def target_log_probs(x: torch.Tensor, bumps: Sequence[Bump]) -> torch.Tensor:
    """ln p(x) for the normalized mixture of bumps (weights are normalized over the grid, not in advance)."""
    terms = torch.stack([math.log(b.weight) - 0.5 * ((x - b.centre) / b.width) ** 2 for b in bumps])  # (K, N)
    unnorm = torch.logsumexp(terms, 0)
    return unnorm - torch.logsumexp(unnorm, 0)


def gaussian_log_probs(x: torch.Tensor, mu: torch.Tensor, log_sigma: torch.Tensor) -> torch.Tensor:
    """ln q(x) = log_softmax over the grid of −½((x − μ)/σ)²; μ, ln σ scalars → (N,), or (K,) → (K, N)."""
    z = (x - mu.unsqueeze(-1)) / log_sigma.exp().unsqueeze(-1)
    return torch.log_softmax(-0.5 * z**2, -1)


def kl(la: torch.Tensor, lb: torch.Tensor) -> torch.Tensor:
    """KL(a‖b) = Σ a (ln a − ln b) over the last axis, from log-probabilities; terms with a = 0 count as 0.

    Worked example: a = (½, ½), b = (0.9, 0.1): ½ ln(0.5/0.9) + ½ ln(0.5/0.1) = 0.5108 nats.
    """
    a = la.exp()
    return (a * torch.where(a > 0, la - lb, 0.0)).sum(-1)


@dataclass(frozen=True)
class Fit:
    direction: str
    start: float
    centre: float
    width: float
    kl: float  # the minimized divergence
    kl_forward: float
    kl_reverse: float
    q_mean: float
    q_sd: float
    log_q: torch.Tensor  # (N,)


def fit_gaussians(lp: torch.Tensor, x: torch.Tensor, runs: Sequence[tuple[str, float]], s: KLFitSettings) -> list[Fit]:
    """Adam on (μ, ln σ) from (start, ln σ₀) for ``s.steps`` steps, one fit per (direction, start) in ``runs``.

    All fits are optimized together as vectors, minimizing the sum of their divergences: each divergence
    depends only on its own (μ_k, σ_k) and Adam's update is elementwise, so every fit follows exactly the
    trajectory it would follow alone (one optimizer loop instead of one per fit).
    """
    forward = torch.tensor([d == "forward" for d, _ in runs])
    mu = torch.tensor([float(m0) for _, m0 in runs], dtype=torch.float64, requires_grad=True)
    log_sigma = torch.full((len(runs),), math.log(s.sigma0), dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([mu, log_sigma], lr=s.lr)

    def divergences() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        lq = gaussian_log_probs(x, mu, log_sigma)  # (K, N)
        kf, kr = kl(lp, lq), kl(lq, lp)  # (K,) each
        return torch.where(forward, kf, kr), kf, kr

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # (K, N) tensors are tiny: extra threads only add start-up and contention
    try:
        for _ in range(s.steps):
            opt.zero_grad()
            divergences()[0].sum().backward()
            opt.step()
    finally:
        torch.set_num_threads(threads)
    mu, log_sigma = mu.detach(), log_sigma.detach()
    with torch.no_grad():
        objective, kf, kr = divergences()
        lq = gaussian_log_probs(x, mu, log_sigma)
        q = lq.exp()
        mean = (q * x).sum(-1)
        sd = (q * (x - mean.unsqueeze(-1)) ** 2).sum(-1).clamp_min(0).sqrt()
    return [
        Fit(
            d,
            float(m0),
            float(mu[k]),
            float(log_sigma[k].exp()),
            float(objective[k]),
            float(kf[k]),
            float(kr[k]),
            float(mean[k]),
            float(sd[k]),
            lq[k].detach(),
        )
        for k, (d, m0) in enumerate(runs)
    ]


def run_kl_fit(s: KLFitSettings) -> tuple[torch.Tensor, torch.Tensor, list[Fit]]:
    """The grid, ln p, and one fit per (direction, start), directions outermost."""
    check_settings(s)
    x = grid(s.support)
    lp = target_log_probs(x, s.target)
    return x, lp, fit_gaussians(lp, x, [(d, m0) for d in s.directions for m0 in s.starts], s)


def kl_fit_result(s: KLFitSettings) -> KLFitResult:
    """Run the experiment: the target, the fits with their q, the settings and provenance."""
    t0 = time.perf_counter()
    x, lp, fits = run_kl_fit(s)
    seconds = time.perf_counter() - t0
    fit_keys = ("direction", "start", "centre", "width", "kl", "kl_forward", "kl_reverse", "q_mean", "q_sd")
    return KLFitResult(
        provenance("kl-fit", dtype="float64", device="cpu"),
        {"fit_s": seconds},
        settings={
            "target": [vars(b) for b in s.target],
            "support": s.support,
            "starts": list(s.starts),
            "directions": list(s.directions),
            "steps": s.steps,
            "lr": s.lr,
            "sigma0": s.sigma0,
            "optimizer": "Adam",
            "q": "softmax over x = 0…support−1 of −½((x − μ)/σ)², μ and ln σ learned",
        },
        x=tuple(x.tolist()),
        p=tuple(lp.exp().tolist()),
        fits=tuple({k: getattr(f, k) for k in fit_keys} | {"q": f.log_q.exp().tolist()} for f in fits),
    )

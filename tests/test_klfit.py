"""kl-fit: the seed's six figures, the maths under them, and the command."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch

from infoeval.errors import UsageError
from infoeval.klfit.fit import (
    Bump,
    KLFitSettings,
    check_settings,
    gaussian_log_probs,
    grid,
    kl,
    parse_target,
    run_kl_fit,
    target_log_probs,
)

# The seed's printed results: (direction, start) -> (centre, width, KL) to the printed precision.
SEED = {
    ("forward", 30.0): ("40.2", "27.2", "0.786"),
    ("forward", 60.0): ("40.2", "27.2", "0.786"),
    ("reverse", 30.0): ("25.0", "5.0", "0.511"),
    ("reverse", 60.0): ("70.0", "5.0", "0.916"),
}


@pytest.fixture(scope="module")
def seed_run():
    return run_kl_fit(KLFitSettings())


def test_reproduces_the_seed_figures(seed_run):
    _, _, fits = seed_run
    assert [(f.direction, f.start) for f in fits] == list(SEED)
    for f in fits:
        assert (f"{f.centre:.1f}", f"{f.width:.1f}", f"{f.kl:.3f}") == SEED[(f.direction, f.start)], f


def test_the_target_is_the_seeds_mixture():
    x = grid(100)
    direct = 0.6 * np.exp(-0.5 * ((np.arange(100) - 25) / 5) ** 2) + 0.4 * np.exp(
        -0.5 * ((np.arange(100) - 70) / 5) ** 2
    )
    direct /= direct.sum()
    lp = target_log_probs(x, KLFitSettings().target)
    np.testing.assert_allclose(lp.exp().numpy(), direct, rtol=1e-12, atol=0)


def test_kl_worked_example_and_zero_on_equal():
    a = torch.tensor([0.5, 0.5], dtype=torch.float64).log()
    b = torch.tensor([0.9, 0.1], dtype=torch.float64).log()
    assert float(kl(a, b)) == pytest.approx(0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1), rel=1e-12)
    assert float(kl(a, a)) == 0.0


def test_forward_fit_matches_the_targets_moments(seed_run):
    """At the forward-KL optimum of an exponential family, E_q[x] = E_p[x] and E_q[x²] = E_p[x²] on the grid."""
    x, lp, fits = seed_run
    p = lp.exp()
    mean = float((p * x).sum())
    sd = math.sqrt(float((p * (x - mean) ** 2).sum()))
    for f in fits:
        if f.direction == "forward":
            assert f.q_mean == pytest.approx(mean, abs=1e-3) and f.q_sd == pytest.approx(sd, abs=1e-3)
    assert mean == pytest.approx(0.6 * 25 + 0.4 * 70, abs=1e-3)  # the bumps lie well inside the grid


def test_reverse_fit_is_a_stationary_point(seed_run):
    """The gradient of KL(q‖p) in (μ, ln σ) vanishes at each reverse fit (central finite differences)."""
    x, lp, fits = seed_run
    for f in fits:
        if f.direction != "reverse":
            continue

        def loss(mu, log_sigma):
            return float(
                kl(
                    gaussian_log_probs(
                        x, torch.tensor(mu, dtype=torch.float64), torch.tensor(log_sigma, dtype=torch.float64)
                    ),
                    lp,
                )
            )

        h, ls = 1e-4, math.log(f.width)
        g_mu = (loss(f.centre + h, ls) - loss(f.centre - h, ls)) / (2 * h)
        g_ls = (loss(f.centre, ls + h) - loss(f.centre, ls - h)) / (2 * h)
        assert abs(g_mu) < 1e-3 and abs(g_ls) < 1e-3, (g_mu, g_ls)
        assert f.kl == pytest.approx(loss(f.centre, ls), rel=1e-9)


def test_narrow_bumps_keep_reverse_kl_finite():
    """ln p is computed by logsumexp, so grid points far from every bump have finite (very negative) ln p."""
    s = KLFitSettings(target=(Bump(1.0, 10.0, 0.3), Bump(1.0, 80.0, 0.3)), starts=(50.0,), steps=20)
    x, lp, fits = run_kl_fit(s)
    assert torch.isfinite(lp).all()
    assert all(math.isfinite(f.kl_forward) and math.isfinite(f.kl_reverse) for f in fits)


def test_q_and_p_are_distributions(seed_run):
    x, lp, fits = seed_run
    assert float(lp.exp().sum()) == pytest.approx(1.0, abs=1e-12)
    for f in fits:
        assert float(f.log_q.exp().sum()) == pytest.approx(1.0, abs=1e-12)


def test_parse_target():
    assert parse_target("0.6:25:5, 0.4:70:5") == (Bump(0.6, 25.0, 5.0), Bump(0.4, 70.0, 5.0))
    for bad in ("0.6:25", "a:b:c", "0:25:5", "0.5:25:-1", "0.5:25:nan"):
        with pytest.raises(UsageError):
            parse_target(bad)


@pytest.mark.parametrize(
    "changes",
    [{"support": 1}, {"starts": ()}, {"directions": ("sideways",)}, {"steps": -1}, {"lr": 0.0}, {"sigma0": -1.0}],
)
def test_bad_settings_are_usage_errors(changes):
    with pytest.raises(UsageError):
        check_settings(KLFitSettings(**changes))


@pytest.mark.slow  # a command-line subprocess
def test_command_prints_and_writes_the_seed_figures(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "INFOEVAL_DEBUG"}
    proc = subprocess.run(
        [sys.executable, "-m", "infoeval", "kl-fit", "--json", tmp_path / "r.json", "--csv", tmp_path / "r.csv"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    for centre, width, value in set(SEED.values()):
        assert f"{centre} │ {width:>7} │ {value}" in proc.stdout, proc.stdout
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["schema"].startswith("infoeval/kl-fit/") and result["provenance"]["command"] == "kl-fit"
    assert (
        result["settings"]["steps"] == 2000 and result["settings"]["lr"] == 0.5 and result["settings"]["sigma0"] == 10
    )
    assert len(result["x"]) == len(result["p"]) == 100 and all(len(f["q"]) == 100 for f in result["fits"])
    frame = pd.read_csv(tmp_path / "r.csv")
    got = {(r.direction, r.start): (f"{r.centre:.1f}", f"{r.width:.1f}", f"{r.kl:.3f}") for r in frame.itertuples()}
    assert got == SEED


@pytest.mark.slow
def test_command_rejects_a_bad_target_in_one_line():
    proc = subprocess.run(
        [sys.executable, "-m", "infoeval", "kl-fit", "--target", "0.6:25"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "WEIGHT:CENTRE:WIDTH" in proc.stderr

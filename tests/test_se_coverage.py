"""The standard errors' batches, on real windows (issue 51, step 0). ``tests/data/se_windows.npz`` holds 64 windows
of SmolLM2-135M on WikiText-2 (ctx 512; ``scripts/se_windows.py`` makes it): per position its window, and per
variant its KL, top-1 agreement and Δ NLL. Sixteen windows drawn at random (with replacement) are one run's 8,192
positions, as the default run has. Over thousands of such runs the 95 % intervals mean ± t(G−1)·SE, with batches
of whole windows, cover the pool's mean 93–97 % of the time; batches of ⌊√n⌋ = 90 positions inside the windows
(the SE of schema 3) cover less: a window's positions are correlated further than 90 apart."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from infoeval.measure.stats import se, se_blocks, t_quantile

POOL = Path(__file__).resolve().parent / "data" / "se_windows.npz"
SERIES = (
    "int4-g128/kl",
    "int8-channel/kl",
    "int4-g128/top1",
    "int8-channel/top1",
    "int4-g128/dnll",
    "int8-channel/dnll",
)
RUNS, WINDOWS, LENGTH = 4000, 16, 512


@pytest.fixture(scope="module")
def pools() -> dict[str, np.ndarray]:
    """Each series as [window, position] (the pool's 64 whole windows of 512)."""
    data = np.load(POOL)
    windows = data["window"]
    ids = [w for w in np.unique(windows) if (windows == w).sum() == LENGTH]
    assert len(ids) == 64
    return {k: np.stack([data[k][windows == w].astype(np.float64) for w in ids]) for k in SERIES}


@pytest.mark.parametrize("key", SERIES)
def test_intervals_on_batches_of_whole_windows_cover_95_percent(pools, key):
    pool, labels = pools[key], np.repeat(np.arange(WINDOWS), LENGTH)  # a window drawn twice is two windows
    truth = pool.mean()
    runs = np.random.default_rng(51).integers(0, len(pool), (RUNS, WINDOWS))
    # one run's SE through stats.se on its positions: the batches are its windows (16 of them, t with 15 df)
    for run in runs[:25]:
        x = pool[run].ravel()
        assert se_blocks(x.size, labels) == {"se_block": LENGTH, "se_blocks": WINDOWS}
        assert se(x, labels) == pytest.approx(pool[run].mean(axis=1).std(ddof=1) / np.sqrt(WINDOWS), rel=1e-9)
    means = pool.mean(axis=1)[runs]  # so every run's SE is sd(its window means)/√16, computed at once
    half = t_quantile(0.975, WINDOWS - 1) * means.std(axis=1, ddof=1) / np.sqrt(WINDOWS)
    coverage = float(np.mean(np.abs(means.mean(axis=1) - truth) <= half))
    assert 0.93 <= coverage <= 0.97, coverage


def test_batches_inside_the_windows_cover_less(pools):
    """The schema-3 SE (⌊√n⌋-position blocks, t with 90 df) on the same runs: well under 95 % for int4-g128's KL
    and top-1 (about 80 %), and never above the window batches'."""
    labels = np.repeat(np.arange(WINDOWS), LENGTH)
    runs = np.random.default_rng(51).integers(0, 64, (400, WINDOWS))
    for key in ("int4-g128/kl", "int4-g128/top1", "int8-channel/kl"):
        pool, truth = pools[key], pools[key].mean()
        hits = {"windows": 0, "root n": 0}
        for run in runs:
            x = pool[run].ravel()
            hits["windows"] += abs(x.mean() - truth) <= t_quantile(0.975, WINDOWS - 1) * se(x, labels)
            hits["root n"] += abs(x.mean() - truth) <= t_quantile(0.975, se_blocks(x.size)["se_blocks"] - 1) * se(x)
        assert hits["root n"] <= hits["windows"], (key, hits)
        if key.startswith("int4"):
            assert hits["root n"] / len(runs) < 0.88 < 0.93 <= hits["windows"] / len(runs), (key, hits)

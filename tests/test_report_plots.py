"""The page's plots: the series behind them against brute-force counts, and the SVG they make (well-formed,
small, nothing outside the page, deterministic, the gate's verdicts in its limits plot)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import numpy as np
import pandas as pd
import pytest

from infoeval.report import plots
from infoeval.report.series import binned_stats, ecdf_points, group_means, log_histogram

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture
def x():
    rng = np.random.default_rng(0)
    return np.concatenate([rng.lognormal(-4, 2, 997), [0.0, 0.0, 0.5, 0.5, 0.5]])  # zeros and ties


def test_ecdf_points_are_the_empirical_cdf(x):
    v, f = ecdf_points(x, points=64)
    assert v[0] == x.min() and v[-1] == x.max() and f[-1] == 1.0 and len(v) <= 64
    np.testing.assert_array_equal(f, [(x <= t).mean() for t in v])
    assert np.all(np.diff(v) >= 0) and np.all(np.diff(f) >= 0)
    v, f = ecdf_points([3.0, 1.0], points=256)
    assert v.tolist() == [1.0, 3.0] and f.tolist() == [0.5, 1.0]


def test_log_histogram_counts_every_value_once(x):
    edges, share = log_histogram(x, bins=30)
    assert len(edges) == 31 and share.sum() == pytest.approx(1.0)
    assert edges[0] == x[x > 1e-6].min() and edges[-1] == pytest.approx(x.max())
    clipped = np.clip(x, edges[0], edges[-1])
    brute = [
        ((clipped >= a) & ((clipped < b) | (i == 29 and clipped == b))).sum()
        for i, (a, b) in enumerate(zip(edges[:-1], edges[1:]))
    ]
    np.testing.assert_allclose(share * len(x), brute)


def test_binned_stats_are_means_in_quantile_bins(x):
    rng = np.random.default_rng(1)
    y = rng.normal(size=len(x))
    s = binned_stats(x, y, bins=10)
    edges = np.unique(np.quantile(x, np.linspace(0, 1, 11)))
    which = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, len(edges) - 2)
    for j, b in enumerate(np.unique(which)):
        sel = which == b
        assert (
            s["count"][j] == sel.sum()
            and s["x"][j] == pytest.approx(x[sel].mean())
            and s["mean"][j] == pytest.approx(y[sel].mean())
        )
        assert s["p90"][j] == pytest.approx(np.quantile(y[sel], 0.9))
    assert s["count"].sum() == len(x)


def test_group_means_equal_pandas():
    rng = np.random.default_rng(2)
    g, y = rng.integers(0, 7, 500), rng.normal(size=500)
    ids, means = group_means(g, y)
    expected = pd.Series(y).groupby(g).mean()
    np.testing.assert_array_equal(ids, expected.index)
    np.testing.assert_allclose(means, expected.to_numpy())


def _section(kind: str, n: int = 400) -> dict:
    rng = np.random.default_rng(3)
    entropy = rng.uniform(0, 6, n)
    variants = (
        {}
        if kind == "compress-bits"
        else {
            name: {"kl": (scale * entropy * rng.lognormal(0, 1, n)).tolist()}
            for name, scale in (("int4-g128", 0.05), ("int8-channel", 0.001))
        }
    )
    if kind == "gate":
        variants = {"cand int4": variants["int4-g128"]}
    sec = {
        "kind": kind,
        "n": n,
        "variants": variants,
        "ref": {"nll": rng.exponential(2, n).tolist(), "entropy": entropy.tolist()},
        "window": (np.arange(n) // 64).tolist(),
        "context": (np.arange(n) % 64 + 1).tolist(),
    }
    if kind == "gate":
        sec["gate"] = {
            "verdicts": [
                {
                    "limit": "max_kl_mean",
                    "metric": "kl_mean",
                    "side": "max",
                    "threshold": 0.05,
                    "value": 0.03,
                    "bound": 0.04,
                    "judged": "95% one-sided bound",
                    "passed": True,
                },
                {
                    "limit": "max_kl_p99",
                    "metric": "kl_p99",
                    "side": "max",
                    "threshold": 0.5,
                    "value": 0.9,
                    "bound": 0.9,
                    "judged": "point estimate",
                    "passed": False,
                },
                {
                    "limit": "min_top1",
                    "metric": "top1",
                    "side": "min",
                    "threshold": 0.9,
                    "value": 0.95,
                    "bound": 0.93,
                    "judged": "95% one-sided bound",
                    "passed": True,
                },
            ]
        }
    return sec


@pytest.mark.parametrize(
    ("kind", "names"),
    [
        ("quantize-compare", ["distribution", "entropy", "along"]),
        ("compress-bits", ["distribution", "entropy", "along"]),
        ("gate", ["limits", "distribution", "entropy", "along"]),
    ],
)
def test_section_plots_are_small_well_formed_svg(kind, names):
    pytest.importorskip("matplotlib")
    sec = _section(kind)
    drawn = plots.section_plots(sec, 0)
    assert [p["name"] for p in drawn] == names
    for p in drawn:
        root = ET.fromstring(p["svg"])  # well-formed after compaction
        assert root.tag == f"{SVG}svg" and len(p["svg"]) < 80_000
        assert not re.search(r"""(?:href|src)\s*=\s*["'](?!#)""", p["svg"])  # only links inside the figure
        assert "<metadata" not in p["svg"] and "<!--" not in p["svg"]
        assert not re.search(r'\sd="[^"]*\d\.\d\d', p["svg"])  # coordinates to 0.1 pt
    assert drawn == plots.section_plots(sec, 0)  # deterministic
    if kind == "gate":
        texts = "".join(ET.fromstring(drawn[0]["svg"]).itertext())
        assert texts.count("PASS") == 2 and texts.count("FAIL") == 1 and "max_kl_p99" in texts
        assert "gate: P99 ≤ 0.5" in "".join(ET.fromstring(drawn[1]["svg"]).itertext())
    ids = [re.findall(r'id="([^"]+)"', p["svg"]) for p in drawn]
    assert not set(ids[0]) & set(ids[-1])  # figures on one page do not share ids


def test_compact_svg_keeps_labels_and_rounds_coordinates():
    raw = (
        '<?xml version="1.0"?>\n<!DOCTYPE svg>\n<svg '
        'xmlns="http://www.w3.org/2000/svg"><metadata><x>http://example.org</x></metadata>\n'
        '<!-- a comment -->\n <g id="figure_1">\n  <path d="M 12.345678 9.87654 \nL 1.04 2.96" x="3.14159"/>\n'
        '  <text><tspan x="0.123456">0.0025</tspan></text>\n </g>\n</svg>\n'
    )
    out = plots.compact_svg(raw)
    assert (
        out == '<svg xmlns="http://www.w3.org/2000/svg"><g><path d="M 12.3 9.9 L 1 3" x="3.1"/><text><tspan '
        'x="0.1">0.0025</tspan></text></g></svg>'
    )


def test_without_matplotlib_the_page_says_how_to_get_plots(monkeypatch):
    from infoeval.report.page import render

    monkeypatch.setattr(plots, "available", lambda: False)
    page = render([_section("compress-bits")])
    assert plots.MISSING in page and '"plots":[]' in page


@pytest.mark.parametrize("values", [[0, 1, 255], [0, 256, 65535], [-1, 5], [0, 70000], [2**31 - 1, -(2**31)]])
def test_packed_integers_round_trip_in_the_smallest_type(values):
    from infoeval.report.packed import pack_ints, unpack

    packed = pack_ints(values)
    assert unpack(packed).tolist() == values
    lo, hi = min(values), max(values)
    assert packed["dtype"] == ("u8" if lo >= 0 and hi < 256 else "u16" if lo >= 0 and hi < 65536 else "i32")


def test_packed_floats_are_the_float32_values():
    from infoeval.report.packed import pack_floats, unpack

    x = np.random.default_rng(4).lognormal(-5, 3, 1000)
    np.testing.assert_array_equal(unpack(pack_floats(x)), x.astype(np.float32))
    with pytest.raises(ValueError, match="int32"):
        from infoeval.report.packed import pack_ints

        pack_ints([2**31])


def test_packed_doctest():
    import doctest

    from infoeval.report import packed

    assert doctest.testmod(packed, raise_on_error=False).failed == 0

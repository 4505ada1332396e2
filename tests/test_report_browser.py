"""The report page in a real browser (headless Chromium driven by selenium through Debian's chromedriver): no
network request, one span per scored position, the tooltip's numbers equal the positions table's, colour monotone
in the value, the selectors switch variant and column, a screenshot that is not blank; and bad input exits 2.

Chromium comes from Debian's packages (`apt-get install chromium chromium-driver`, as .ci/run does); without
it the browser tests skip with one line."""

from __future__ import annotations

import io
import json
import re
import shutil

import numpy as np
import pandas as pd
import pytest
from cli_run import run_cli

from infoeval.report.page import CSP

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,1000",
)


def _cli(args, cwd):
    return run_cli(args, cwd=cwd)


@pytest.fixture(scope="module")
def run(tmp_path_factory, tiny_llama_dir, tiny_text):
    """A quantize-compare run with --html: its folder, its page and a page made again by `infoeval report`."""
    d = tmp_path_factory.mktemp("report")
    (d / "text.txt").write_text(tiny_text, encoding="utf-8")
    r = _cli(
        [
            "quantize-compare",
            tiny_llama_dir,
            "--text",
            d / "text.txt",
            "--ctx",
            32,
            "--max-tokens",
            300,
            "--schemes",
            "int4-g32,int8-channel",
            "--out-dir",
            d / "run",
            "--html",
            d / "page.html",
            "-q",
        ],
        d,
    )
    assert r.returncode == 0, r.stderr
    r = _cli(["report", d / "run", "-o", d / "again.html"], d)
    assert r.returncode == 0, r.stderr
    return d


def _js_fmt(x: float) -> str:
    """The page's number format (page.js fmt) of a number the page holds as float32 (exact decimal ties cannot
    occur at 4 digits for a float32, so Python's rounding and JavaScript's agree)."""
    x = float(np.float32(x))
    if abs(x) >= 1e4 or (x != 0 and abs(x) < 1e-3):
        mantissa, exp = f"{x:.3e}".split("e")
        return f"{mantissa}e{int(exp):+d}"
    return f"{x:.4f}"


def test_the_page_is_self_contained(run):
    page = (run / "page.html").read_text(encoding="utf-8")
    assert CSP in page and "default-src 'none'" in page
    assert not re.search(r"""(src|href|action)\s*=\s*["']?\s*(https?:|//)""", page, re.IGNORECASE)
    assert not re.search(r"@import|url\(\s*['\"]?(https?:|//)", page)
    again = (run / "again.html").read_text(encoding="utf-8")

    # the page from the run folder holds the same data (the title names the run, the rest is equal)
    def grab(text):
        return json.loads(
            re.search(r'<script type="application/json" id="data">(.*?)</script>', text, re.S)
            .group(1)
            .replace("<\\/", "</")
        )  # noqa: E731

    a, b = grab(page), grab(again)
    for sec in (a, b):
        sec["sections"][0].pop("title")
    assert a == b


@pytest.fixture(scope="module")
def driver():
    if not (CHROMIUM and DRIVER):
        pytest.skip("no Chromium/ChromeDriver here: apt-get install chromium chromium-driver")
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (the test extra)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    d = webdriver.Chrome(service=Service(DRIVER), options=options)
    yield d
    d.quit()


def _open(driver, path):
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(path.as_uri())
    WebDriverWait(driver, 20).until(lambda d: d.execute_script("return document.body.dataset.ready") == "1")


def _hover(driver, span):
    from selenium.webdriver.common.action_chains import ActionChains

    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", span)
    ActionChains(driver).move_to_element(span).perform()
    return driver.find_element("id", "tip")


def _rgb(style: str) -> tuple[int, ...]:
    return tuple(int(v) for v in re.findall(r"\d+", style)[:3])


def test_in_the_browser(run, driver):
    from selenium.webdriver.support.ui import Select

    frame = pd.read_csv(run / "run" / "positions.csv")
    _open(driver, run / "page.html")
    # no request but the page itself
    urls = [
        json.loads(e["message"])["message"].get("params", {}).get("request", {}).get("url")
        for e in driver.get_log("performance")
    ]
    assert {u for u in urls if u} <= {(run / "page.html").as_uri()}
    first = frame[frame["variant"] == "int4-g32"].sort_values("position").reset_index(drop=True)
    spans = driver.find_elements("css selector", "#run-0 .text .t")
    assert len(spans) == len(first) == 300
    for i in (0, 17, int(first["kl"].idxmax()), 299):
        tip = _hover(driver, spans[i])
        assert tip.get_attribute("data-i") == str(i) and tip.get_attribute("data-scheme") == "int4-g32"
        cells = {c.get_attribute("data-k"): c.text for c in tip.find_elements("css selector", "td[data-k]")}
        row = first.loc[i]
        assert (
            cells["kl"] == _js_fmt(row["kl"])
            and cells["dp"] == _js_fmt(row["dp"])
            and cells["nll"] == _js_fmt(row["nll"])
        )
        for role, prefix in (("reference", "ref_"), ("int4-g32", "")):
            rows = tip.find_elements("css selector", f'table.top[data-role="{role}"] tr')[1:]
            got = [(r.find_elements("tag name", "td")[1].text, r.find_elements("tag name", "td")[2].text) for r in rows]
            assert got == [
                (str(int(row[f"{prefix}top{j}_id"])), _js_fmt(row[f"{prefix}top{j}_p"])) for j in range(1, 6)
            ]
    # colour: the larger the KL, the deeper the red (green and blue channels never rise)
    greens = [_rgb(s.value_of_css_property("background-color"))[1] for s in spans]
    order = np.argsort(first["kl"].to_numpy(), kind="stable")
    assert all(a >= b for a, b in zip(np.array(greens)[order][:-1], np.array(greens)[order][1:]))
    assert len(set(greens)) > 10
    # the selectors: another variant, then another column
    Select(driver.find_element("css selector", "#run-0 select.scheme")).select_by_visible_text("int8-channel")
    span = driver.find_elements("css selector", "#run-0 .text .t")[17]
    tip = _hover(driver, span)
    other = frame[frame["variant"] == "int8-channel"].sort_values("position").reset_index(drop=True).loc[17]
    assert tip.get_attribute("data-scheme") == "int8-channel" and tip.find_element(
        "css selector", 'td[data-k="kl"]'
    ).text == _js_fmt(other["kl"])
    before = [
        s.value_of_css_property("background-color") for s in driver.find_elements("css selector", "#run-0 .text .t")
    ]
    Select(driver.find_element("css selector", "#run-0 select.column")).select_by_value("dp")
    after = [
        s.value_of_css_property("background-color") for s in driver.find_elements("css selector", "#run-0 .text .t")
    ]
    assert before != after and any(_rgb(c)[2] > _rgb(c)[0] for c in after)  # Δp < 0 is blue
    # a screenshot that is not blank
    from PIL import Image

    image = Image.open(io.BytesIO(driver.get_screenshot_as_png())).convert("RGB")
    assert len(set(image.getdata())) > 50


@pytest.mark.parametrize(
    "case", ["empty folder", "missing", "schema version", "other command", "no positions", "cut row", "not a table"]
)
def test_bad_input_exits_2_and_writes_nothing(run, tmp_path, case):
    target = tmp_path / "bad"
    if case == "empty folder":
        target.mkdir()
    elif case != "missing":
        shutil.copytree(run / "run", target)
        data = json.loads((target / "result.json").read_text())
        if case == "schema version":
            data["schema"] = "infoeval/quantize-compare/99"
        elif case == "other command":
            data["schema"] = "infoeval/spec-accept/3"
        (target / "result.json").write_text(json.dumps(data))
        if case == "no positions":
            (target / "positions.csv").unlink()
        if case == "cut row":  # the last line cut short, as a copy stopped half-way leaves it
            raw = (target / "positions.csv").read_bytes()
            (target / "positions.csv").write_bytes(raw[: raw.rstrip(b"\n").rfind(b",") - 3])
        if case == "not a table":
            (target / "positions.csv").write_bytes(b'"unclosed\x00\xff\n1,2\n')
    r = _cli(["report", run / "run", target, "-o", tmp_path / "out.html"], tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert len([line for line in r.stderr.splitlines() if line.strip()]) == 1, r.stderr
    assert not (tmp_path / "out.html").exists()
    if case in ("cut row", "not a table"):
        assert (
            "is truncated: its last row lacks" if case == "cut row" else "cannot be read as a positions"
        ) in r.stderr


def test_several_runs_in_the_browser(report_runs, driver, tmp_path):
    """quantize-compare, compress-bits and gate runs on one page: the comparison table, the gate's verdicts at the
    top of its section, compress-bits' reference-only view, and the tooltips' numbers equal each positions table."""
    from selenium.webdriver.support.ui import Select

    page = tmp_path / "all.html"
    r = _cli(["report", report_runs / "qc", report_runs / "cb", report_runs / "gate", "-o", page], tmp_path)
    assert r.returncode == 0, r.stderr
    _open(driver, page)
    assert len(driver.find_elements("css selector", "#comparison table.comparison tr")) == 1 + 4
    gate = json.loads((report_runs / "gate" / "result.json").read_text())
    badge = driver.find_element("css selector", "#run-2 .verdict").text
    assert badge == ("gate PASSED" if gate["passed"] else "gate FAILED")
    cells = [
        [td.text for td in tr.find_elements("tag name", "td")]
        for tr in driver.find_elements("css selector", "#run-2 table.verdicts tr")[1:]
    ]
    assert [(c[0], c[-1]) for c in cells] == [(v["limit"], "PASS" if v["passed"] else "FAIL") for v in gate["verdicts"]]
    # compress-bits: no variant, the reference's NLL and entropy only
    assert not driver.find_element("css selector", "#run-1 select.scheme").is_displayed()
    options = [
        o.get_attribute("value") for o in Select(driver.find_element("css selector", "#run-1 select.column")).options
    ]
    assert options == ["nll_ref", "entropy"]
    cb = pd.read_csv(report_runs / "cb" / "positions.csv")
    spans = driver.find_elements("css selector", "#run-1 .text .t")
    assert len(spans) == len(cb)
    for i in (3, int(cb["nll_ref"].idxmax())):
        tip = _hover(driver, spans[i])
        assert tip.find_element("css selector", 'td[data-k="nll_ref"]').text == _js_fmt(cb.loc[i, "nll_ref"])
        assert tip.find_element("css selector", 'td[data-k="entropy"]').text == _js_fmt(cb.loc[i, "entropy_ref"])
        ids = [
            tr.find_elements("tag name", "td")[1].text
            for tr in tip.find_elements("css selector", 'table.top[data-role="reference"] tr')[1:]
        ]
        assert ids == [str(int(cb.loc[i, f"ref_top{j}_id"])) for j in range(1, 6)]
    # the worst positions ranked by Δp: the largest drop in the probability of the token that came
    Select(driver.find_element("css selector", "#run-0 .worst select.rank")).select_by_value("dp")
    qc = pd.read_csv(report_runs / "qc" / "positions.csv")
    cells = driver.find_elements("css selector", "#run-0 .worst tr")[1].find_elements("tag name", "td")
    assert cells[2].text == _js_fmt(qc[qc["variant"] == "int4-g32"]["dp"].min())

    # each section's plots, drawn (inline SVG with a size), the gate's limits first
    def figures(i):
        return [
            f.get_attribute("data-plot") for f in driver.find_elements("css selector", f"#run-{i} figure[data-plot]")
        ]  # noqa: E731

    sections = [figures(i) for i in range(3)]
    plain, gate = ["distribution", "entropy", "along"], ["limits", "distribution", "entropy", "along"]
    assert sorted(sections, key=len) == sorted(
        [plain + ["frontier", "confidence"], plain, gate], key=len
    )  # two variants: their views too
    for svg in driver.find_elements("css selector", "figure[data-plot] svg"):
        assert svg.size["width"] > 300 and svg.size["height"] > 100
    # the gate's candidate
    g = pd.read_csv(report_runs / "gate" / "positions.csv")
    spans = driver.find_elements("css selector", "#run-2 .text .t")
    tip = _hover(driver, spans[int(g["kl"].idxmax())])
    assert tip.find_element("css selector", 'td[data-k="kl"]').text == _js_fmt(g["kl"].max())


def test_the_views_of_many_variants_in_the_browser(driver, tiny_llama_dir, tiny_text, tmp_path):
    """--baseline with four variants: the page's frontier chart (a point per variant and figure, its <title> the
    variant on hover, the frontier's line), the paired verdicts' table and KL by confidence, drawn from the result."""
    (tmp_path / "text.txt").write_text(tiny_text, encoding="utf-8")
    r = _cli(
        [
            "quantize-compare",
            tiny_llama_dir,
            "--text",
            tmp_path / "text.txt",
            "--ctx",
            32,
            "--max-tokens",
            300,
            "--baseline",
            "int4-g32",
            "--schemes",
            "int8-channel,int4-g32,int3-g64,int4-channel",
            "--json",
            tmp_path / "r.json",
            "--html",
            tmp_path / "page.html",
            "-q",
        ],
        tmp_path,
    )
    assert r.returncode == 0, r.stderr
    result = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    _open(driver, tmp_path / "page.html")
    points = driver.find_elements("css selector", 'figure[data-plot="frontier"] svg g.point')
    assert len(points) == 2 * len(result["variants"]) and all(p.is_displayed() and p.size["width"] > 0 for p in points)
    titles = {
        p.get_attribute("data-variant"): driver.execute_script(
            "return arguments[0].querySelector('title').textContent", p
        )
        for p in points
    }
    assert set(titles) == {v["name"] for v in result["variants"]} and all(
        t.startswith(f"{name}: ") for name, t in titles.items()
    )
    on_frontier = {
        p.get_attribute("data-variant")
        for p in points
        if p.get_attribute("data-figure") == "kl_mean"
        and "(on the frontier)" in driver.execute_script("return arguments[0].querySelector('title').textContent", p)
    }
    assert on_frontier == set(result["frontier"]["kl_mean"])
    rows = driver.find_elements("css selector", 'figure[data-plot="verdicts"] table.paired tbody tr')
    assert [row.get_attribute("data-variant") for row in rows] == list(result["paired"]["variants"])
    worse = rows[[row.get_attribute("data-variant") for row in rows].index("int3-g64")].find_element(
        "css selector", 'td[data-metric="kl_mean"]'
    )
    assert "worse" in worse.text and "worse" in worse.get_attribute("class")
    buckets = driver.find_elements("css selector", 'figure[data-plot="confidence"] table.confidence tbody tr')
    assert len(buckets) == len(result["by_confidence"]["counts"])

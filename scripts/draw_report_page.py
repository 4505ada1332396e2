#!/usr/bin/env python3
"""Screenshot the report page of a default run into docs/images/report-page.png, with the real CLI and Chromium.

Runs `infoeval quantize-compare --max-tokens 2048 --html PAGE` (the built-in SmolLM2-135M, the Python docs, the
default schemes), hovers a token with a large KL in headless Chromium (selenium and Debian's chromedriver) so
that the tooltip with both models' top-5 shows, and saves the window. Needs `apt-get install chromium
chromium-driver` and the test extra (selenium). A minute on CPU.

    python scripts/draw_report_page.py [--out docs/images/report-page.png]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1200,1000",
    "--hide-scrollbars",
)


def screenshot(page: Path, out: Path) -> None:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in FLAGS:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    try:
        driver.get(page.as_uri())
        WebDriverWait(driver, 30).until(lambda d: d.execute_script("return document.body.dataset.ready") == "1")
        driver.execute_script(
            "document.querySelector('#run-0 select.scheme').value = 'int4-g128';"
            "document.querySelector('#run-0 select.scheme').dispatchEvent(new Event('change'))"
        )
        spans = driver.find_elements("css selector", "#run-0 .text .t")
        ActionChains(driver).move_to_element(spans[40]).perform()  # a token where int4-g128 wants another one
        out.write_bytes(driver.get_screenshot_as_png())
    finally:
        driver.quit()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images" / "report-page.png")
    args = parser.parse_args()
    out = args.out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    exe = shutil.which("infoeval")
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "page.html"
        command = [
            *([exe] if exe else [sys.executable, "-m", "infoeval"]),
            "quantize-compare",
            "--max-tokens",
            "2048",
            "--html",
            str(page),
            "--out-dir",
            tmp,
            "-q",
        ]
        print("$", " ".join(command), flush=True)
        rc = subprocess.call(command, cwd=ROOT, stdout=subprocess.DEVNULL)
        if rc == 0:
            screenshot(page, out)
            print(f"wrote {out}")
    return rc


if __name__ == "__main__":
    sys.exit(main())

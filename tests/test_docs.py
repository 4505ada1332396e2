"""The documentation site: ``mkdocs build --strict`` passes (a broken link, a missing anchor or image, or a page
left out of the nav fails it, as shown on broken copies), every page is in the nav once, every command has a
page and a README table row with a link, and the README stays a short front door. No model is loaded."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _build(root: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(root / "mkdocs.yml"), "-d", str(site)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ | {"NO_MKDOCS_2_WARNING": "1"},
    )


def _nav_pages(nav):
    for item in nav:
        if isinstance(item, str):
            yield item
        else:
            for value in item.values():
                yield from ([value] if isinstance(value, str) else _nav_pages(value))


def _commands() -> list[str]:
    import typer

    from infoeval.cli import app

    return list(typer.main.get_command(app).commands)


def test_mkdocs_builds_strict(tmp_path):
    proc = _build(ROOT, tmp_path / "site")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert (tmp_path / "site" / "reference" / "cli.html").is_file() and (
        tmp_path / "site" / "images" / "default-run.png"
    ).is_file()


@pytest.mark.parametrize("breakage", ["a broken link", "a missing anchor", "a missing image", "a page not in the nav"])
def test_a_broken_site_fails_the_strict_build(tmp_path, breakage):
    shutil.copytree(DOCS, tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    page = tmp_path / "docs" / "gates.md"
    extra = {
        "a broken link": "[gone](no-such-page.md)",
        "a missing anchor": "[gone](compare.md#no-such-heading)",
        "a missing image": "![gone](images/no-such.png)",
    }
    if breakage == "a page not in the nav":
        (tmp_path / "docs" / "orphan.md").write_text("# Orphan\n", encoding="utf-8")
    else:
        page.write_text(page.read_text(encoding="utf-8") + f"\n{extra[breakage]}\n", encoding="utf-8")
    proc = _build(tmp_path, tmp_path / "site")
    assert proc.returncode != 0, f"{breakage}: the strict build passed"


def test_every_page_is_in_the_nav_once():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    assert config["strict"] is True and config["theme"]["name"] == "material"
    listed = list(_nav_pages(config["nav"]))
    on_disk = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert sorted(listed) == on_disk and len(set(listed)) == len(listed)
    assert listed[:2] == ["index.md", "getting-started.md"]


def test_every_command_has_a_page_and_a_readme_row_with_a_link():
    pages = "\n".join(p.read_text(encoding="utf-8") for p in DOCS.glob("*.md"))
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = [line for line in readme.splitlines() if line.startswith("| `")]
    link = re.compile(r"\]\((docs/[^)#\s]+\.md)\)")
    for name in _commands():
        assert f"`{name}`" in pages or f"infoeval {name}" in pages, f"no docs page mentions {name}"
        mine = [r for r in rows if r.startswith(f"| `{name}` |")]
        assert mine, f"{name} has no row in the README's command table"
        targets = link.findall(mine[0])
        assert targets and all((ROOT / t).is_file() for t in targets), f"{name}: README row without a working docs link"


def test_the_readme_is_a_short_front_door():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250
    assert not re.search(r"20[0-9]{2}-[0-9]{2}-[0-9]{2}|\b[0-9a-f]{7,40}\b", readme)  # no dates, no commit hashes
    assert "](docs/images/default-run.png)" in readme and (DOCS / "images" / "default-run.png").is_file()
    assert "mkdocs serve" in readme


def test_the_docs_name_the_schema_versions_infoeval_reads():
    """Wherever the docs say which result schemas `infoeval.load` reads ("schema versions 1 to N"), N is today's
    (python-api.md and architecture.md still said 1 to 3 after version 4)."""
    from infoeval.output.results import SCHEMA_VERSION

    said = re.compile(r"schemas?(?: versions?)?[^.]{0,60}?\b1 to (\d+)", re.S)
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    found = {
        (page.name, int(m[1]))
        for page in pages
        if page.name != "design-notes.md"
        for m in said.finditer(page.read_text())
    }
    assert {"python-api.md", "architecture.md", "metrics.md"} <= {name for name, _ in found}
    assert all(n == SCHEMA_VERSION for _, n in found), sorted(found)

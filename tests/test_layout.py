"""The architecture's rules, checked on the source: one forward stage, small modules and functions, no comments
about work items, a package layout that tools do not mistake for tests."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "infoeval"
SOURCES = sorted(PACKAGE.rglob("*.py"))
MAX_MODULE_LINES = 300
MAX_FUNCTION_LINES = 60


def _rel(p: Path) -> str:
    return str(p.relative_to(PACKAGE.parent))


def test_the_forward_pass_lives_in_the_engine_only():
    hits = {_rel(p) for p in SOURCES if re.search(r"logits_to_keep|model\(input_ids", p.read_text(encoding="utf-8"))}
    assert hits == {"infoeval/engine/__init__.py"}


def test_no_module_over_300_lines():
    long = {_rel(p): n for p in SOURCES if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert not long, long


def test_no_function_over_60_lines():
    long = {}
    for p in SOURCES:
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long[f"{_rel(p)}:{node.lineno} {node.name}"] = n
    assert not long, long


def test_no_comment_speaks_of_work_items():
    pattern = re.compile(r"\b(issue|issues)\s*#?\d+|later issue|\(issue", re.IGNORECASE)
    hits = [f"{_rel(p)}:{i}" for p in SOURCES for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
            if pattern.search(line)]  # fmt: skip
    assert not hits, hits


def test_no_package_named_like_a_test_folder_or_a_stdlib_module():
    names = {p.name for p in PACKAGE.rglob("*") if p.is_dir() and p.name != "__pycache__"} | {p.stem for p in SOURCES}
    assert not names & {"spec", "specs", "test", "tests", "math", "types", "random", "statistics"}, names


def test_one_ln2():
    hits = [_rel(p) for p in SOURCES if re.search(r"^LN2\s*=", p.read_text(encoding="utf-8"), re.MULTILINE)]
    assert hits == ["infoeval/measure/stats.py"]

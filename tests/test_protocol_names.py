"""No protocol is told apart by its name outside its registry (issue 54): every comparison in the source whose
operands hold a registered protocol's name (``==``, ``!=``, ``in``, a ``match`` case) is a dispatch site that
belongs in the protocol's own module (``infoeval/input/protocols/``), as a class attribute or a method."""

from __future__ import annotations

import ast
from pathlib import Path

from infoeval.input import protocols

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("infoeval", "benchmarks", "scripts")
REGISTRY_DIR = ROOT / "infoeval" / "input" / "protocols"
# Names that mean something else where they are compared (with the reason).
OTHER_MEANING = {"infoeval/models/shipped.py": "'gptq' there is a checkpoint's quant_method, not a window protocol"}


def _constants(node: ast.AST) -> set[str]:
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def name_comparisons(path: Path, names: set[str]) -> list[str]:
    """'file:line compares [names]' of each comparison or match case in ``path`` whose operands hold ``names``."""
    sites = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
        elif isinstance(node, ast.match_case):
            operands = [node.pattern]
        else:
            continue
        hits = set().union(*(_constants(o) for o in operands)) & names
        if hits:
            line = node.pattern.lineno if isinstance(node, ast.match_case) else node.lineno
            sites.append(f"{path.name}:{line} compares {sorted(hits)}")
    return sites


def test_no_protocol_name_is_compared_outside_the_registry():
    names = set(protocols.REGISTRY)
    sources = [
        p
        for folder in SCANNED
        for p in sorted((ROOT / folder).rglob("*.py"))
        if not p.is_relative_to(REGISTRY_DIR) and str(p.relative_to(ROOT)) not in OTHER_MEANING
    ]
    assert len(sources) > 150
    sites = [f"{p.relative_to(ROOT).parent}/{site}" for p in sources for site in name_comparisons(p, names)]
    assert not sites, "\n".join(sites)


def test_the_check_finds_a_comparison_a_membership_and_a_match_case(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "def f(p, q):\n"
        "    if p.name == 'lm-eval':\n"
        "        return 1\n"
        "    ok = q == 'default'\n"
        "    if p in ('gptq', 'x'):\n"
        "        return 2\n"
        "    match p:\n"
        "        case 'llama.cpp':\n"
        "            return 3\n"
    )
    sites = name_comparisons(bad, set(protocols.REGISTRY))
    assert [s.split(":", 1)[1] for s in sites] == [
        "2 compares ['lm-eval']",
        "5 compares ['gptq']",
        "8 compares ['llama.cpp']",
    ]

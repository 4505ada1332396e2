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
    assert hits == {"infoeval/engine/forward.py"}


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
    hits = [
        f"{_rel(p)}:{i}"
        for p in SOURCES
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)
    ]
    assert not hits, hits


def test_no_package_named_like_a_test_folder_or_a_stdlib_module():
    names = {p.name for p in PACKAGE.rglob("*") if p.is_dir() and p.name != "__pycache__"} | {p.stem for p in SOURCES}
    assert not names & {"spec", "specs", "test", "tests", "math", "types", "random", "statistics"}, names


def test_one_ln2():
    hits = [_rel(p) for p in SOURCES if re.search(r"^LN2\s*=", p.read_text(encoding="utf-8"), re.MULTILINE)]
    assert hits == ["infoeval/measure/stats.py"]


# ---- stages: the tree shows the data flow ------------------------------------------------------------------
# In data-flow order. A module may import from its own stage and from stages before it, never from a later one
# (module-level and function-level imports alike). ``infoeval`` itself (``__version__``) is open to all.
STAGES: list[tuple[str, set[str]]] = [
    ("core", {"errors", "distributed", "heap", "switches"}),  # failures and exit codes; ranks; the process's allocator
    ("models", {"models"}),  # a model and its tokenizer loaded, and what they are recorded as
    ("input", {"input"}),  # options and settings, text → tokens (the model's tokenizer) → windows, provenance
    ("quant", {"quant"}),  # the variants made of the loaded model: schemes, methods, recipes, checkpoints
    ("engine", {"engine"}),  # the one window loop: batches, columns, roles, logits, caches
    ("measure", {"measure"}),  # per-position information theory, aggregates, SEs, the metric registry
    ("output", {"output", "schemas"}),  # results, tables, llama.cpp's block, plots; the results' JSON Schemas
    (
        "commands",
        {
            "codec",
            "comparison",
            "gating",
            "klfit",
            "mixing",
            "mutual_information",
            "report",
            "sensitivities",
            "speculative",
        },
    ),
    ("api", {"api"}),  # the library's functions over the commands' pipelines
    ("cli", {"cli", "__main__"}),
]
LOOSE_MODULES = {"__init__", "__main__", "errors", "distributed", "heap", "switches"}  # at most 6
PACKAGES = set().union(*(units for _, units in STAGES)) - {m for m in LOOSE_MODULES}


def _unit(module: str) -> str:
    """The stage unit of a dotted module name: its top-level package or loose module under ``infoeval``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "infoeval"


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, imported infoeval module) of every import in a source file, at any depth."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.level == 0
            and node.module.split(".")[0] == "infoeval"
        ):
            names = [f"infoeval.{a.name}" for a in node.names] if node.module == "infoeval" else [node.module]
            out += [(node.lineno, n) for n in names]
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "infoeval"]
    return out


def stage_violations(sources: list[Path], root: Path = PACKAGE.parent) -> list[str]:
    """Every import of a later stage, as 'file:line imports module (stage a → stage b)'; ``root`` holds the
    ``infoeval`` folder of the sources."""
    rank = {unit: i for i, (_, units) in enumerate(STAGES) for unit in units}
    bad = []
    for p in sources:
        rel = p.relative_to(root)
        own = _unit(".".join(rel.with_suffix("").parts))
        for line, module in _imports(p):
            other = _unit(module)
            if other in rank and own in rank and rank[other] > rank[own]:
                bad.append(f"{rel}:{line} imports {module} ({STAGES[rank[own]][0]} → {STAGES[rank[other]][0]})")
    return bad


def test_a_stage_imports_only_from_stages_before_it():
    assert not stage_violations(SOURCES), "\n".join(stage_violations(SOURCES))


def test_every_unit_has_a_stage_and_the_top_level_holds_few_modules():
    loose = {p.stem for p in PACKAGE.glob("*.py")}
    assert loose == LOOSE_MODULES and len(loose) <= 6, loose
    packages = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert packages == PACKAGES, packages ^ PACKAGES
    staged = set().union(*(units for _, units in STAGES))
    assert (loose | packages) - {"__init__"} <= staged


def test_the_stage_check_catches_a_later_import(tmp_path):
    # a deliberate bad import in a measure module (beside a good one and a lazy bad one): measure may import the
    # input stage, not the output stage
    bad = tmp_path / "infoeval" / "measure" / "probe.py"
    bad.parent.mkdir(parents=True)
    bad.write_text(
        "from infoeval.output.results import Result\nfrom infoeval.input import text\n\n\n"
        "def f():\n    from infoeval import comparison\n",
        encoding="utf-8",
    )
    assert stage_violations([bad], tmp_path) == [
        "infoeval/measure/probe.py:1 imports infoeval.output.results (measure → output)",
        "infoeval/measure/probe.py:6 imports infoeval.comparison (measure → commands)",
    ]


# ---- no import circles: between modules, and between the packages of one stage -------------------------------
def _module_name(p: Path, root: Path) -> str:
    return ".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__")


def import_graph(sources: list[Path], root: Path = PACKAGE.parent) -> dict[str, set[str]]:
    """{module: the infoeval modules it imports} (at any depth, TYPE_CHECKING too; ``from pkg import sub`` is an
    import of the submodule). ``infoeval`` itself is left out: its ``__version__`` is open to all and it
    re-exports the API lazily, when first asked (PEP 562)."""
    names = {_module_name(p, root) for p in sources}
    graph = {}
    for p in sources:
        own, out = _module_name(p, root), set()
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                out |= {
                    f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in names else node.module for a in node.names
                }
            elif isinstance(node, ast.Import):
                out |= {a.name for a in node.names}
        graph[own] = {m for m in out if m in names and m not in (own, "infoeval")}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm, iteratively), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            node, edges = work[-1]
            nxt = next((w for w in edges if w not in index or w in stack), None)
            if nxt is not None and nxt not in index:
                index[nxt] = low[nxt] = len(index)
                stack.append(nxt)
                work.append((nxt, iter(sorted(graph[nxt]))))
                continue
            if nxt is not None:
                low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                part = stack[stack.index(node) :]
                del stack[stack.index(node) :]
                if len(part) > 1:
                    found.append(sorted(part))
    return found


def test_no_import_circle_between_modules():
    assert not circles(import_graph(SOURCES)), circles(import_graph(SOURCES))


def test_no_import_circle_between_packages():
    # the stage order forbids circles between stages; this catches one between two command families
    units: dict[str, set[str]] = {}
    for module, imported in import_graph(SOURCES).items():
        units.setdefault(_unit(module), set()).update(_unit(m) for m in imported if _unit(m) != _unit(module))
    assert not circles(units), circles(units)


def test_the_circle_check_finds_a_circle(tmp_path):
    pkg = tmp_path / "infoeval" / "measure"
    pkg.mkdir(parents=True)
    (pkg / "a.py").write_text("from infoeval.measure.b import f\n", encoding="utf-8")
    (pkg / "b.py").write_text("def f():\n    from infoeval.measure import c\n", encoding="utf-8")
    (pkg / "c.py").write_text("from infoeval.measure import a\nfrom infoeval import __version__\n", encoding="utf-8")
    (pkg / "d.py").write_text("from infoeval.measure import a\n", encoding="utf-8")
    graph = import_graph(sorted(pkg.glob("*.py")), tmp_path)
    assert graph["infoeval.measure.d"] == {"infoeval.measure.a"}
    assert circles(graph) == [["infoeval.measure.a", "infoeval.measure.b", "infoeval.measure.c"]]

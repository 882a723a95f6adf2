"""The package's floors hold: no import circle, no import from a floor to one above it, one vocabulary.

docs/internals.md draws the floors; these tests read the imports and the
text of the package and fail where the code leaves the picture.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from prunestore import model
from prunestore.sql import rows

PACKAGE = Path(model.__file__).resolve().parent
MODULES = {
    ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__"): path
    for path in PACKAGE.rglob("*.py")
    if "migrations" not in path.parts
}

# From the ground up: a module may import its own floor and the floors below it, never one above.
FLOORS = [
    {"prunestore.errors", "prunestore.text", "prunestore.frozen", "prunestore.clock"},
    {"prunestore.prices"},
    {"prunestore.model", "prunestore.policy"},
    {
        "prunestore.prune",
        "prunestore.results",
        "prunestore.jsonl",
        "prunestore.formats",
        "prunestore.tokens",
    },
    {"prunestore.engine"},
    {"prunestore.sql"},
    {
        "prunestore.audit",
        "prunestore.appending",
        "prunestore.views",
        "prunestore.catalog",
        "prunestore.erasure",
        "prunestore.lifecycle",
        "prunestore.livecache",
        "prunestore.queries",
        "prunestore.recall",
        "prunestore.summarizing",
        "prunestore.whatif",
    },
    {"prunestore.store_reads", "prunestore.store"},
    {"prunestore.aio", "prunestore.importer", "prunestore.showcase", "prunestore.web", "prunestore.integrations"},
    {"prunestore", "prunestore.cli", "prunestore.__main__"},
]


def floor_of(module: str) -> int:
    for level, names in enumerate(FLOORS):
        if any(module == name or module.startswith(name + ".") for name in names if name != "prunestore"):
            return level
    if module == "prunestore":
        return len(FLOORS) - 1
    raise AssertionError(f"{module} stands on no floor: add it to FLOORS and to docs/internals.md")


def imports_of(module: str) -> set[str]:
    """The prunestore modules `module` imports, at any depth of its code (a lazy import counts too)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [target] if node.module else []  # `from . import x` imports x, not the package's face
            names += [f"{target}.{alias.name}" for alias in node.names]
            found.update(name for name in names if name in MODULES)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in MODULES)
    found.discard(module)
    return found


GRAPH = {module: imports_of(module) for module in MODULES}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_imports_a_floor_above_its_own(module):
    upward = sorted(target for target in GRAPH[module] if floor_of(target) > floor_of(module))
    assert not upward, f"{module} (floor {floor_of(module)}) imports from higher floors: {upward}"


def test_no_import_circle():
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(GRAPH[module]):
            if target == "prunestore" or module == "prunestore":
                continue  # the package's face re-exports; nothing inside imports it but the commands
            if state.get(target) == 1:
                circle = path[path.index(target) :] + [target]
                raise AssertionError("import circle: " + " -> ".join(circle))
            if target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(GRAPH):
        if module not in state:
            visit(module, [module])


def test_the_engine_does_no_io():
    for module, targets in GRAPH.items():
        if module.startswith("prunestore.engine"):
            assert not [t for t in targets if t.startswith("prunestore.sql")], module
            text = MODULES[module].read_text()
            assert "sqlalchemy" not in text and "psycopg" not in text, module


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_is_over_450_lines(module):
    assert len(MODULES[module].read_text().splitlines()) <= 450, module


# -- one vocabulary ----------------------------------------------------------------

VERDICT_NAMES = "|".join(model.VERDICTS)
# Shapes the old copies of a verdict rule had: a set of verdicts spelled out in SQL or Python, the restored rule.
COPIES = {
    "a verdict set in SQL text": re.compile(rf"IN \('({VERDICT_NAMES})'"),
    "a verdict set spelled in Python": re.compile(rf"""\(["']({VERDICT_NAMES})["'], ["']({VERDICT_NAMES})["']"""),
    "a set of verdict constants": re.compile(r"\((KEPT|RESTORED|PENDING|DUPLICATE|EVICTED|EXPIRED|SUPERSEDED), "),
    "the restored rule": re.compile(r"== RESTORED or|verdict == EVICTED and base"),
}


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m != "prunestore.model"))
def test_each_verdict_rule_is_defined_once_in_the_model(module):
    text = MODULES[module].read_text()
    found = {what: pattern.search(text).group(0) for what, pattern in COPIES.items() if pattern.search(text)}
    assert not found, f"{module} spells out what prunestore.model defines: {found}"


def test_the_sql_sets_are_the_models():
    assert rows.IN_PROMPT == f"verdict IN {rows.sql_set(model.LIVE_VERDICTS)}"
    assert rows.sql_set(model.SURVIVING_VERDICTS) in rows.LIVE_AFTER.text
    assert rows.sql_set(model.PASS_1_SURVIVORS) in rows.EXPIRING.text


def test_templates_word_no_verdict_themselves():
    """The web view renders the explanation's causes; their words are written once, in `Explanation.causes`."""
    for template in (PACKAGE / "web" / "templates").glob("*.html"):
        text = template.read_text()
        for words in ("(same tool key)", "duplicate of", "expired after", "restored: it defines", "evicted to stay"):
            assert words not in text, (template.name, words)


# -- rows are read by name -----------------------------------------------------------

POSITIONAL = re.compile(r"\b(row|rows\[0\]|r|found|tail|point)\[-?\d")


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("prunestore")))
def test_rows_are_read_by_position_only_in_the_row_module(module):
    if module in ("prunestore.sql.rows", "prunestore.sql.driver"):  # the decoders; the driver's own `scalar`
        return
    lines = [line.strip() for line in MODULES[module].read_text().splitlines() if POSITIONAL.search(line)]
    assert not lines, f"{module} reads rows by position (decode them in prunestore.sql.rows): {lines}"


# -- __all__ says what a public module offers; internal modules have none -------------

PUBLIC = {
    "prunestore",
    "prunestore.aio",
    "prunestore.store",
    "prunestore.errors",
    "prunestore.model",
    "prunestore.policy",
    "prunestore.results",
    "prunestore.prune",
    "prunestore.text",
    "prunestore.tokens",
    "prunestore.prices",
    "prunestore.whatif",
    "prunestore.frozen",
    "prunestore.jsonl",
    "prunestore.formats",
    "prunestore.cli",
    "prunestore.web",
    "prunestore.sql.db",
    "prunestore.sql.partitions",
    "prunestore.showcase.workloads",
    "prunestore.showcase.costs",
    "prunestore.integrations.langchain",
    "prunestore.integrations.langchain_agents",
    "prunestore.integrations.openai_agents",
    "prunestore.integrations.openai_chat",
    "prunestore.integrations.openai_responses",
    "prunestore.integrations.anthropic_messages",
    "prunestore.integrations.pydantic_ai",
}


@pytest.mark.parametrize("module", sorted(m for m in MODULES if not m.endswith("__main__")))
def test_all_is_true_in_public_modules_and_absent_in_internal_ones(module):
    tree = ast.parse(MODULES[module].read_text())
    listed = [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
    ]
    if module not in PUBLIC:
        assert not listed, f"{module} is internal: it needs no __all__"
        return
    assert len(listed) == 1, f"{module} is public: its __all__ says what it offers"
    names = ast.literal_eval(listed[0])
    defined = {
        name
        for node in tree.body
        for name in (
            [node.name]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            else [
                n.id
                for t in getattr(node, "targets", [getattr(node, "target", None)])
                for n in ast.walk(t)  # a name, or the names a tuple assigns
                if isinstance(n, ast.Name)
            ]
            if isinstance(node, (ast.Assign, ast.AnnAssign))
            else [a.asname or a.name for a in node.names]
            if isinstance(node, (ast.Import, ast.ImportFrom))
            else []
        )
    }
    assert sorted(set(names) - defined) == [], f"{module}.__all__ names what it does not define"

"""The layering of the flat top-level modules, read from their source with ast.

Scripts (run as ``python X.py``) sit on top of libraries: a library never imports a
script, scripts never import each other, and there is no import cycle. Every import of a
project module is at the top of its module, where the graph is plain to see: a library
defers none, and a script may defer only third-party imports (an optional dependency, or
a heavy one that only some commands need). Tests may import anything.
"""

import ast
import glob
import os
import sys

import pytest

from helpers import ROOT

SCRIPTS = {"prepro", "train", "eval", "translate", "export", "average_checkpoints", "plot_logs"}


def parse_modules(folder):
    """{module name: ast} of every *.py directly in folder."""
    trees = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.py"))):
        with open(path, encoding="utf-8") as f:
            trees[os.path.basename(path)[:-3]] = ast.parse(f.read(), filename=path)
    return trees


TREES = parse_modules(ROOT)
PROJECT = set(TREES)
LIBRARIES = PROJECT - SCRIPTS


def imported(node):
    """Top-level names of the modules an import statement (or a call of
    importlib.import_module / __import__ with a constant name) imports."""
    if isinstance(node, ast.Import):
        return [alias.name.split(".")[0] for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        return [node.module.split(".")[0]] if node.level == 0 and node.module else []
    if (
        isinstance(node, ast.Call)
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name in ("import_module", "__import__"):
            return [node.args[0].value.split(".")[0]]
    return []


def imports(tree):
    """[(line, module)] of every import anywhere in the tree."""
    return sorted((node.lineno, name) for node in ast.walk(tree) for name in imported(node))


def deferred_imports(tree):
    """[(line, module)] of the imports inside a function body (methods, nested functions,
    lambdas included)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            for inner in ast.walk(node):
                found.update((inner.lineno, name) for name in imported(inner))
    return sorted(found)


def import_graph(trees):
    """{module: {project modules it imports}}."""
    return {name: {m for _, m in imports(tree) if m in trees} for name, tree in trees.items()}


def find_cycle(graph):
    """One cycle of the graph as [a, b, ..., a], or None."""
    state, path = {}, []

    def visit(node):
        state[node] = "open"
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        path.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def where(module, line, what):
    return f"{module}.py:{line}: {what}"


# ---------------------------------------------------------------------------------------
# the checks themselves, on small examples
# ---------------------------------------------------------------------------------------
def test_checks_find_what_they_look_for():
    tree = ast.parse(
        "import os\nfrom a.b import c\n\n\nclass K:\n    def m(self):\n"
        "        import b\n        return lambda: importlib.import_module('d.e')"
        "\n\n\ndef f():\n    def g():\n        from e import x\n"
    )
    assert imports(tree) == [(1, "os"), (2, "a"), (7, "b"), (8, "d"), (13, "e")]
    assert deferred_imports(tree) == [(7, "b"), (8, "d"), (13, "e")]
    assert import_graph({"m": tree, "b": ast.parse("x = 1"), "e": ast.parse("import m")}) == {
        "m": {"b", "e"},
        "b": set(),
        "e": {"m"},
    }
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"d"}, "d": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"a"}}) == ["a", "a"]


def test_the_modules_are_found():
    assert SCRIPTS <= PROJECT, f"scripts missing from {ROOT}: {sorted(SCRIPTS - PROJECT)}"
    assert {
        "data_load",
        "greedy_search",
        "beam_search",
        "translator",
        "metrics",
        "devices",
        "fast_ops",
        "files",
        "hparams",
        "model",
        "modules",
        "summaries",
        "weighted",
    } <= LIBRARIES
    graph = import_graph(TREES)
    assert {"dev_evaluation", "devices", "trainer"} <= graph["train"] and "model" in graph[
        "trainer"
    ]


# ---------------------------------------------------------------------------------------
# the project's modules
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("module", sorted(LIBRARIES))
def test_libraries_never_import_a_script(module):
    bad = [
        where(module, line, f"imports the script {name}")
        for line, name in imports(TREES[module])
        if name in SCRIPTS
    ]
    assert not bad, "a library must not import a script:\n" + "\n".join(bad)


@pytest.mark.parametrize("module", sorted(SCRIPTS))
def test_scripts_never_import_each_other(module):
    bad = [
        where(module, line, f"imports the script {name}")
        for line, name in imports(TREES[module])
        if name in SCRIPTS and name != module
    ]
    assert not bad, (
        "scripts never import each other (move the shared code into a library):\n" + "\n".join(bad)
    )


def test_no_import_cycles():
    cycle = find_cycle(import_graph(TREES))
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


@pytest.mark.parametrize("module", sorted(PROJECT))
def test_no_deferred_imports_of_project_modules(module):
    """Libraries defer no import of a project module; scripts defer only third-party
    imports (neither project modules nor the standard library)."""
    bad = []
    for line, name in deferred_imports(TREES[module]):
        if name in PROJECT:
            bad.append(where(module, line, f"imports the project module {name} in a function"))
        elif module in SCRIPTS and name in sys.stdlib_module_names:
            bad.append(where(module, line, f"imports the standard module {name} in a function"))
    assert not bad, "import it at the top of the module:\n" + "\n".join(bad)

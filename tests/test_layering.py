"""The layering of the project, read from its source with ast.

The library is one package, ``transformer_tf2``, with subpackages by job in an order
(:data:`ORDER`, bottom first, as CONTRIBUTING.md draws it): a module imports only from its
own subpackage and those below it, so decoding imports nothing of training, data nothing
of the models and utils nothing of the rest. The package's top-level modules (its Python
API) sit above every subpackage. At the root sit the scripts (run as ``python X.py``) and
the seed's modules: the package never imports them, scripts never import each other, and
there is no import cycle. Every import of a project module is at the top of its module,
where the graph is plain to see: a library module defers none, and a script may defer
only third-party imports (an optional dependency, or a heavy one that only some commands
need). Tests and bench/ may import anything.
"""

import ast
import glob
import importlib
import os
import shutil
import subprocess
import sys

import pytest

import scripts_of
from helpers import ROOT

PACKAGE = "transformer_tf2"
# the subpackages, bottom first: each imports only from itself and those before it
ORDER = (
    "utils",  # errors, atomic files, devices and precision
    "config",  # the settings (hparams), their checks, the scripts' command line
    "kernels",  # the C++ ops beside their loader, the fast rewrites of standard ops
    "data",  # vocabularies, encoding, batches, corpora
    "layers",  # the paper's layers, positions, document context, the loss and schedule
    "models",  # the Transformer and its variants, checkpoints and loading a run
    "decoding",  # greedy, sampling, beam, documents, the Translator, scoring, ensembles
    "training",  # the train step, its state, budget, EMA, summaries, fine-tuning
    "evaluation",  # BLEU, and the dev evaluation of a training run
    "export",  # a trained run as a CTranslate2 model
    "api",  # the top-level module api.py: the Python API (Translator)
    "serving",  # the HTTP server: its batcher, its engines, its page
)
# (importing subpackage, module it may not import although it lies below)
FORBIDDEN = (("training", f"{PACKAGE}.decoding.translator"),)


def parse_tree(folder, prefix=""):
    """{dotted module name: ast} of every *.py in folder and its packages below."""
    trees = {}
    for path in sorted(glob.glob(os.path.join(folder, "**", "*.py"), recursive=True)):
        rel = os.path.relpath(path, folder)[:-3].split(os.sep)
        if rel[-1] == "__init__":
            rel = rel[:-1]
        with open(path, encoding="utf-8") as f:
            trees[".".join([prefix, *rel] if prefix else rel)] = ast.parse(f.read(), path)
    return trees


def parse_project(root):
    """{name: ast} of the root's modules (by bare name) and the package's (dotted)."""
    trees = {}
    for path in sorted(glob.glob(os.path.join(root, "*.py"))):
        with open(path, encoding="utf-8") as f:
            trees[os.path.basename(path)[:-3]] = ast.parse(f.read(), path)
    trees.update(parse_tree(os.path.join(root, PACKAGE), PACKAGE))
    return trees


TREES = parse_project(ROOT)
SCRIPTS = set(scripts_of.scripts(ROOT))
ROOT_MODULES = {name for name in TREES if "." not in name and name != PACKAGE}
LIBRARY = set(TREES) - ROOT_MODULES


def imported(node):
    """Full names of the modules an import statement (or a call of
    importlib.import_module / __import__ with a constant name) imports: ``from a.b import
    c`` gives both a.b.c and a.b (c may be a module or a name in a.b)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        if node.level or not node.module:
            return []
        return [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    if (
        isinstance(node, ast.Call)
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name in ("import_module", "__import__"):
            return [node.args[0].value]
    return []


def resolve(name, known):
    """The longest module of ``known`` that ``name`` is or lies in, or None."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        if ".".join(parts[:i]) in known:
            return ".".join(parts[:i])
    return None


def imports(tree, known=None):
    """[(line, module)] of every import anywhere in the tree: the project modules of
    ``known`` it names where given (a package's __init__ only where nothing deeper is
    named), else the top-level names."""
    found = set()
    for node in ast.walk(tree):
        names = imported(node)
        if known is None:
            found.update((node.lineno, n.split(".")[0]) for n in names)
            continue
        hits = {resolve(n, known) for n in names} - {None}
        deeper = {h for h in hits if any(o.startswith(h + ".") for o in hits)}
        found.update((node.lineno, h) for h in hits - deeper)
    return sorted(found)


def deferred_imports(tree, known=None):
    """[(line, module)] of the imports inside a function body (methods, nested functions,
    lambdas included)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            found.update(imports(node, known))
    return sorted(found)


def import_graph(trees):
    """{module: {project modules it imports}}."""
    known = set(trees)
    return {
        name: {m for _, m in imports(tree, known) if m != name and not name.startswith(m + ".")}
        for name, tree in trees.items()
    }


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


def subpackage(module):
    """The layer of a package module: its subpackage (``transformer_tf2.data.data_load``
    -> data), or the top-level module's name where ORDER places it (``api``); None for
    the package's __init__ and any top-level module ORDER does not place."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in ORDER) else None


def order_violations(trees, order=ORDER, forbidden=FORBIDDEN):
    """Lines 'module:line: imports X' where a package module imports a subpackage above
    its own in ``order``, one of ``forbidden``, or the package's top level."""
    bad, known = [], set(trees)
    for module, tree in sorted(trees.items()):
        own = subpackage(module)
        if not module.startswith(PACKAGE + ".") or own is None:
            continue
        for line, name in imports(tree, known):
            if not name.startswith(PACKAGE + "."):
                continue
            other = subpackage(name)
            if other is None:
                bad.append(f"{module}:{line}: imports the package's top level {name}")
            elif other not in order or order.index(other) > order.index(own):
                bad.append(f"{module}:{line}: imports {name} ({other} lies above {own})")
            elif any(own == who and name == what for who, what in forbidden):
                bad.append(f"{module}:{line}: imports {name} ({own} may not)")
    return bad


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


def test_the_order_check_catches_a_planted_import_of_training_from_decoding():
    """The project's own trees pass; the same trees with decoding importing training, data
    importing the models, utils importing config, training importing the Translator or
    the models importing the server fail, each at its line."""
    assert order_violations(TREES) == []
    planted = {
        f"{PACKAGE}.decoding.greedy_search": f"from {PACKAGE}.training import trainer",
        f"{PACKAGE}.data.data_load": f"import {PACKAGE}.models.model",
        f"{PACKAGE}.utils.files": f"from {PACKAGE}.config.hparams import UserError",
        f"{PACKAGE}.training.trainer": f"from {PACKAGE}.decoding import translator",
        f"{PACKAGE}.models.model": f"from {PACKAGE}.serving import app",
    }
    for module, line in planted.items():
        trees = dict(TREES)
        trees[module] = ast.parse(line)
        found = order_violations(trees)
        assert len(found) == 1 and found[0].startswith(f"{module}:1: imports"), (line, found)


def test_the_package_layout_is_the_documented_one():
    """Every subpackage has its place in ORDER and CONTRIBUTING.md shows that order; the
    scripts and the seed's modules are the root's only modules."""
    folders = {
        name
        for name in os.listdir(os.path.join(ROOT, PACKAGE))
        if os.path.isfile(os.path.join(ROOT, PACKAGE, name, "__init__.py"))
    }
    modules = {n[:-3] for n in os.listdir(os.path.join(ROOT, PACKAGE)) if n.endswith(".py")}
    assert folders | (modules - {"__init__"}) == set(ORDER)
    with open(os.path.join(ROOT, "CONTRIBUTING.md"), encoding="utf-8") as f:
        contributing = f.read()
    drawing = contributing.split("## The layout")[1].split("```")[1]
    drawn = [line.split()[0] for line in drawing.splitlines() if line.strip()]
    names = [n.rstrip("/").removesuffix(".py") for n in drawn]
    assert [n for n in names if n in ORDER] == list(reversed(ORDER))
    seed = {"hparams", "data_load", "modules"}
    assert ROOT_MODULES == SCRIPTS | seed, sorted(ROOT_MODULES ^ (SCRIPTS | seed))
    assert {"train", "eval", "prepro", "translate", "export"} <= SCRIPTS


def test_the_modules_are_found():
    assert {
        f"{PACKAGE}.data.data_load",
        f"{PACKAGE}.decoding.greedy_search",
        f"{PACKAGE}.decoding.translator",
        f"{PACKAGE}.models.model",
        f"{PACKAGE}.layers.modules",
        f"{PACKAGE}.training.trainer",
        f"{PACKAGE}.api",
    } <= LIBRARY
    graph = import_graph(TREES)
    assert f"{PACKAGE}.training.trainer" in graph["train"]
    assert f"{PACKAGE}.models.model" in graph[f"{PACKAGE}.training.trainer"]


# ---------------------------------------------------------------------------------------
# the project's modules
# ---------------------------------------------------------------------------------------
def test_subpackages_import_only_those_below_them():
    bad = order_violations(TREES)
    assert not bad, "imports against the order of CONTRIBUTING.md:\n" + "\n".join(bad)


@pytest.mark.parametrize("module", sorted(LIBRARY))
def test_the_package_never_imports_the_root(module):
    bad = [
        f"{module}:{line}: imports the root module {name}"
        for line, name in imports(TREES[module])
        if name in ROOT_MODULES
    ]
    assert not bad, "the package must not import a script or a root module:\n" + "\n".join(bad)


@pytest.mark.parametrize("module", sorted(SCRIPTS))
def test_scripts_never_import_each_other(module):
    bad = [
        f"{module}.py:{line}: imports the root module {name}"
        for line, name in imports(TREES[module])
        if name in ROOT_MODULES and name != module
    ]
    assert not bad, (
        "scripts import the package, never each other or the seed's modules (move the shared "
        "code into the package):\n" + "\n".join(bad)
    )


def test_no_import_cycles():
    cycle = find_cycle(import_graph(TREES))
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


@pytest.mark.parametrize("module", sorted(TREES))
def test_no_deferred_imports_of_project_modules(module):
    """Library modules defer no import of a project module; scripts defer only
    third-party imports (neither project modules nor the standard library). The
    package's __init__ is the exception: its API names load on first use (no TensorFlow
    at ``import transformer_tf2``)."""
    if module == PACKAGE:
        return
    bad = []
    for line, name in deferred_imports(TREES[module]):
        if name in ROOT_MODULES or name == PACKAGE:
            bad.append(f"{module}:{line}: imports the project module {name} in a function")
        elif module in SCRIPTS and name in sys.stdlib_module_names:
            bad.append(f"{module}:{line}: imports the standard module {name} in a function")
    assert not bad, "import it at the top of the module:\n" + "\n".join(bad)


@pytest.mark.slow
def test_a_planted_import_in_a_copy_of_the_package_fails_this_file(tmp_path):
    """A copy of the project with decoding importing training fails the order test."""
    for name in ("tests", "demo", PACKAGE):
        shutil.copytree(os.path.join(ROOT, name), tmp_path / name)
    for name in os.listdir(ROOT):
        if name.endswith((".py", ".md", ".cfg", ".toml")):
            shutil.copy(os.path.join(ROOT, name), tmp_path / name)
    target = tmp_path / PACKAGE / "decoding" / "beam_search.py"
    source = target.read_text().replace(
        "from __future__ import annotations\n",
        f"from __future__ import annotations\n\nfrom {PACKAGE}.training import budget  # planted\n",
        1,
    )
    target.write_text(source)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "tests/test_layering.py", "-k", "below"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert run.returncode == 1, run.stdout[-2000:]
    assert f"{PACKAGE}.decoding.beam_search:" in run.stdout
    assert "training lies above decoding" in run.stdout


@pytest.mark.parametrize("face", ["modules", "data_load"])
def test_the_seeds_modules_are_the_packages_face(face):
    """The root modules.py and data_load.py hold a docstring and imports from the package,
    nothing else: each name is the package's own object (``modules.EncoderLayer is
    transformer_tf2.layers.modules.EncoderLayer``). No test or benchmark imports them, so a
    test that patches a function patches the package module that runs it."""
    tree = TREES[face]
    body = tree.body[1:] if ast.get_docstring(tree) else tree.body
    assert body and all(
        isinstance(n, ast.ImportFrom) and n.module.startswith(PACKAGE + ".") for n in body
    )
    module = importlib.import_module(face)
    for node in body:
        source = importlib.import_module(node.module)
        for alias in node.names:
            assert getattr(module, alias.asname or alias.name) is getattr(source, alias.name)
    users = []
    for folder in ("tests", "bench"):
        for name, tree in parse_tree(os.path.join(ROOT, folder)).items():
            users += [f"{folder}/{name}.py:{line}" for line, m in imports(tree) if m == face]
    assert users == []


def code_lines(node, source_lines) -> int:
    """Lines of ``node`` that hold code: not blank, not a comment, not a docstring."""
    docs = set()
    for inner in ast.walk(node):
        body = getattr(inner, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            if isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                docs.update(range(body[0].lineno, body[0].end_lineno + 1))
    return sum(
        1
        for n in range(node.lineno, node.end_lineno + 1)
        if n not in docs
        and source_lines[n - 1].strip()
        and not source_lines[n - 1].strip().startswith("#")
    )


def test_no_module_over_600_lines_and_no_class_over_300_code_lines():
    """A module past 600 lines or a class past 300 code lines holds two concepts: split it
    by job (CONTRIBUTING.md)."""
    long_modules, long_classes = [], []
    paths = glob.glob(os.path.join(ROOT, "*.py"))
    paths += glob.glob(os.path.join(ROOT, PACKAGE, "**", "*.py"), recursive=True)
    for path in paths:
        with open(path, encoding="utf-8") as f:
            source = f.read()
        lines = source.splitlines()
        if len(lines) > 600:
            long_modules.append(f"{os.path.relpath(path, ROOT)}: {len(lines)} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ClassDef) and code_lines(node, lines) > 300:
                long_classes.append(f"{os.path.relpath(path, ROOT)}: class {node.name}")
    assert long_modules == [] and long_classes == []
    tree = ast.parse(
        "class A:\n    '''Doc.'''\n\n    # note\n    x = 1\n\n    def f(self):\n        return 2\n"
    )
    assert (
        code_lines(
            tree.body[0],
            [
                "class A:",
                "    '''Doc.'''",
                "",
                "    # note",
                "    x = 1",
                "",
                "    def f(self):",
                "        return 2",
            ],
        )
        == 4
    )


def reached(graph, start):
    """Every module ``start`` imports, directly or through others."""
    seen, todo = set(), [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_prepro_reaches_no_model_code():
    """prepro.py builds vocabularies and encodes corpora: it imports nothing of the layers,
    the models, decoding or training, directly or through another module (the checks of a
    model's settings live in config: config/families.py)."""
    modules = reached(import_graph(TREES), "prepro")
    layers = {subpackage(m) for m in modules if m.startswith(PACKAGE + ".")}
    assert {"config", "data", "utils"} <= layers
    assert layers.isdisjoint({"layers", "models", "decoding", "training", "evaluation"}), layers
    # the same reading finds train.py's model code
    assert {"layers", "models", "training"} <= {
        subpackage(m) for m in reached(import_graph(TREES), "train")
    }

"""The Python programs that tests and benchmarks keep in strings (run as ``python -c``, or
written to a file and run): each compiles, and every module it imports exists. Code in a
string is read by no linter and imported by no test until it runs, so a moved or deleted
module would otherwise leave it stale unseen.

A program is a string that parses as Python and imports something: a module-level
constant (``FULL_DISK = r'''...'''``), a variable named like one (``code = "..."``) or
the string after ``"-c"`` in a command list. An import in the handler of an ImportError is
a fallback (for a checkout from before the package) and is not required to exist.
"""

import ast
import glob
import importlib.util
import os

import pytest

from helpers import ROOT

FOLDERS = ("tests", "bench")


def programs(path: str) -> list[tuple[int, str]]:
    """(line, source) of each program kept in a string in the file at ``path``."""
    with open(path, encoding="utf-8") as f:
        return programs_in(f.read())


# names of the variables that hold a program, besides module-level constants
PROGRAM_NAMES = ("code", "program", "script", "source_code")


def programs_in(text: str) -> list[tuple[int, str]]:
    """(line, source) of each program kept in a string of the Python source ``text``: the
    string value of a module-level UPPER_CASE constant or of a variable named in
    :data:`PROGRAM_NAMES`, or the string after ``"-c"`` in a list, that parses as Python
    and imports something."""
    tree = ast.parse(text)
    candidates = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            names = [getattr(t, "id", "") for t in node.targets]
            top = node in tree.body
            if any((top and n.isupper()) or n in PROGRAM_NAMES for n in names):
                candidates.append(node.value)
        if isinstance(node, ast.List):
            for before, after in zip(node.elts, node.elts[1:]):
                if isinstance(before, ast.Constant) and before.value == "-c":
                    candidates.append(after)
    found = []
    for node in candidates:
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            continue
        try:
            parsed = ast.parse(node.value)
        except SyntaxError:
            continue
        if any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in ast.walk(parsed)):
            found.append((node.lineno, node.value))
    return sorted(set(found))


def required_imports(source: str) -> list[tuple[int, str]]:
    """(line, module) of each absolute import of ``source`` but the fallbacks: those in
    the handler of an ImportError."""
    tree = ast.parse(source)
    optional = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ExceptHandler) and node.type is not None:
            if "ImportError" in ast.unparse(node.type):
                optional.update(id(n) for n in ast.walk(node))
    out = []
    for node in ast.walk(tree):
        if id(node) in optional:
            continue
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
            out += [(node.lineno, f"{node.module}.{a.name}") for a in node.names if a.name != "*"]
    return out


def exists(module: str) -> bool:
    """Whether ``module`` can be imported (a ``from a import b`` name that is no module is
    fine where ``a`` exists: it is checked as ``a``)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def missing(source: str) -> list[str]:
    """The modules ``source`` imports that do not exist, 'line: name' each."""
    bad = []
    for line, name in required_imports(source):
        parent = name.rpartition(".")[0]
        if exists(name):
            continue
        if parent and any(name.startswith(m + ".") for _, m in required_imports(source)):
            if exists(parent):  # from parent import a name that is not a module
                continue
        bad.append(f"{line}: {name}")
    return bad


FILES = sorted(p for folder in FOLDERS for p in glob.glob(os.path.join(ROOT, folder, "*.py")))
PROGRAMS = [
    pytest.param(path, line, source, id=f"{os.path.relpath(path, ROOT)}:{line}")
    for path in FILES
    for line, source in programs(path)
]


def test_the_check_finds_stale_and_broken_programs():
    stale = "import json\nimport decoding\nfrom transformer_tf2.models import checkpoints\n"
    assert missing(stale) == ["2: decoding"]
    fallback = "try:\n    from transformer_tf2.config import hparams\nexcept ImportError:\n"
    assert missing(fallback + "    import hparams\n") == []
    assert missing("from transformer_tf2.config.hparams import UserError, nothing_here\n") == []
    assert missing("from transformer_tf2.nowhere import x\n") == [
        "1: transformer_tf2.nowhere",
        "1: transformer_tf2.nowhere.x",
    ]
    source = '"""Doc: import nothing."""\nPROGRAM = r"""\nimport sys\nimport nowhere_at_all\n"""\n'
    assert programs_in(source) == [(2, "\nimport sys\nimport nowhere_at_all\n")]
    assert missing(programs_in(source)[0][1]) == ["3: nowhere_at_all"]
    assert programs_in('x = "import os"\nast.parse("import os")\n') == []
    assert programs_in('run(["python", "-c", "import os"])\ncode = "import sys"\n') == [
        (1, "import os"),
        (2, "import sys"),
    ]


def test_the_programs_are_found():
    """The known programs are seen: a change in how they are written must not hide
    them from this check."""
    where = {os.path.relpath(p.values[0], ROOT) for p in PROGRAMS}
    assert {"bench/onednn.py", "bench/startup.py", "tests/test_faults.py"} <= where
    assert len(PROGRAMS) >= 15


@pytest.mark.parametrize("path,line,source", PROGRAMS)
def test_a_program_in_a_string_compiles_and_imports_what_exists(path, line, source):
    compile(source, f"{path}:{line}", "exec")
    assert missing(source) == [], (
        f"{os.path.relpath(path, ROOT)}:{line} imports modules that do not exist"
    )

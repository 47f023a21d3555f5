"""The scripts of a checkout and their parsers, read from their sources without running
them and without TensorFlow (tests that check --help, the docs' commands and the layering;
helpers.py loads TensorFlow, and some of these run in processes that must not)."""

from __future__ import annotations

import argparse
import ast
import os
import re

from transformer_tf2.config import cli, hparams

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def scripts(folder: str = ROOT) -> tuple[str, ...]:
    """The scripts in ``folder``: its modules that declare ``SCRIPT = cli.Script(...)``
    (each before it imports TensorFlow), by name, in alphabetical order."""
    found = []
    for entry in sorted(os.listdir(folder)):
        if entry.endswith(".py"):
            with open(os.path.join(folder, entry), encoding="utf-8") as f:
                if re.search(r"^SCRIPT = cli\.Script\(", f.read(), re.M):
                    found.append(entry[:-3])
    return tuple(found)


# the top-level scripts, each declaring its SCRIPT before it imports TensorFlow
SCRIPTS = scripts()


def script_of(name: str, folder: str = ROOT) -> cli.Script:
    """The :class:`cli.Script` that ``folder/NAME.py`` declares, read from its source: its
    docstring, the assignments above its ``SCRIPT = cli.Script(...)`` (the constants it
    may name) and that statement run alone, so that nothing the script imports after it
    (TensorFlow) loads."""
    path = os.path.join(folder, f"{name}.py")
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    header = []
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            header.append(node)
        targets = node.targets if isinstance(node, ast.Assign) else []
        if [getattr(t, "id", "") for t in targets] == ["SCRIPT"]:
            namespace = {"cli": cli, "hparams": hparams}
            namespace["__doc__"] = ast.get_docstring(tree, clean=False)
            exec(compile(ast.Module(header, []), path, "exec"), namespace)
            return namespace["SCRIPT"]
    raise ValueError(f"{path} declares no SCRIPT = cli.Script(...)")


def parser(name: str, preset: str = "demo") -> argparse.ArgumentParser:
    """The parser of the script ``name`` (the one its ``--help`` prints, with ``preset``'s
    defaults), built without TensorFlow. To check a command line, ``cli.parse_args`` with
    ``script=script_of(name)`` also names an unknown option's closest match."""
    script = script_of(name)
    options = {"verbose": (False, cli.VERBOSE_HELP), **script.options}
    user = cli.user_values()
    base = hparams.preset(preset, user)
    return cli.build_parser(script, base, options, cli.sources(preset, (), user))

"""Config owns the checks of a set of settings: the tables of config/families.py agree with
the registries they name (positions.REGISTRY, model.VARIANTS), registering a family without
its row fails, and no module writes into config (read from the source with ast, and at run
time: config's tables and choices are the same in a process that imported config alone).
"""

import ast
import glob
import importlib
import json
import os
import subprocess
import sys
import textwrap

import pytest

import config_state
from helpers import ROOT
from transformer_tf2.config import families, hparams
from transformer_tf2.layers import positions
from transformer_tf2.models.model import VARIANTS

PACKAGE = "transformer_tf2"
# methods that change a list, dict or set in place
MUTATORS = {
    "append", "extend", "insert", "update", "setdefault", "pop", "popitem", "remove",
    "clear", "add", "discard", "__setitem__", "__delitem__",
}  # fmt: skip


def test_the_position_table_is_the_registry_in_its_order():
    assert list(families.POSITIONS) == list(positions.REGISTRY)
    assert list(hparams.CHOICES["position"]) == list(positions.REGISTRY)
    for name, family in positions.REGISTRY.items():
        assert families.POSITIONS[name].relative == family.relative, name
    assert families.relative_names() == ["shaw", "t5", "xl", "alibi", "alibi_dir", "rotary"]


def test_the_model_type_table_is_the_variants():
    assert list(families.MODEL_TYPES) == list(VARIANTS) == list(hparams.CHOICES["model_type"])
    for name, variant in VARIANTS.items():
        assert families.MODEL_TYPES[name].document_memory == variant.document_memory, name
    assert [n for n, t in families.MODEL_TYPES.items() if not t.document_memory] == ["universal"]


def test_a_family_without_its_row_or_with_another_kind_is_refused():
    class Nowhere(positions.Encoding):
        name, relative = "nowhere", True

    class Relative(positions.Encoding):
        name, relative = "learned", True  # config says learned is absolute

    before = dict(positions.REGISTRY)
    with pytest.raises(ValueError, match="'nowhere' .*needs its row in .*families.py POSITIONS"):
        positions.register(Nowhere)
    with pytest.raises(ValueError, match="'learned' \\(relative=True\\) needs its row"):
        positions.register(Relative)
    assert positions.REGISTRY == before


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"position": "xl", "d_model": 9, "num_heads": 1}, "position=xl needs an even d_model"),
        ({"position": "alibi_dir", "num_heads": 1}, "it needs num_heads >= 2; got 1"),
        ({"position": "rotary", "d_model": 12, "num_heads": 4}, r"\(12 / 4\) must be even"),
        ({"position": "learned", "position_add_absolute": True}, "is absolute already"),
        ({"position": "sinusoid", "memory_sentences": 1}, "position=sinusoid is absolute"),
        ({"model_type": "universal", "target_memory_sentences": 2}, "has no document memory"),
        ({"memory_sentences": 1, "key_mask_defect": True}, "the memory is padded"),
    ],
)
def test_each_family_and_memory_check_runs_in_apply(overrides, message):
    with pytest.raises(hparams.UserError, match=message):
        hparams.apply(hparams.Hparams(), overrides)


def test_the_checks_pass_what_a_model_can_run():
    for name in families.POSITIONS:
        hp = hparams.apply(hparams.Hparams(), {"position": name})
        assert hp.position == name
    hp = hparams.apply(hparams.Hparams(), {"position": "t5", "memory_sentences": 2})
    assert hp.memory_sentences == 2
    relative = hparams.apply(hparams.Hparams(), {"position": "shaw", "position_add_absolute": 1})
    assert relative.position_add_absolute is True


# ------------------------------------------------------------------ no writes into config
def config_names(tree: ast.Module) -> set[str]:
    """The names a module binds to config's modules or to what they hold: ``from
    transformer_tf2.config import hparams`` (hparams), ``import transformer_tf2.config.x
    as y`` (y), ``from transformer_tf2.config.hparams import CHOICES`` (CHOICES)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(f"{PACKAGE}.config"):
            names.update(a.asname or a.name for a in node.names)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith(f"{PACKAGE}.config"):
                    names.add(a.asname or a.name.split(".")[0])
    return names


def root_name(node: ast.AST) -> str | None:
    """The name at the bottom of ``a.b[c].d``, or None."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def writes_into_config(source: str) -> list[str]:
    """The statements of a module (not one of config's own) that change config: an
    assignment to or deletion of an attribute or item of a config name, an in-place
    method (append, update, ...) called on one, or setattr on one; as 'line: code'."""
    tree = ast.parse(source)
    names = config_names(tree)
    found = []
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        hit = any(
            isinstance(t, (ast.Attribute, ast.Subscript)) and root_name(t) in names for t in targets
        )
        if isinstance(node, ast.Call):
            func = node.func
            hit = (
                isinstance(func, ast.Attribute)
                and func.attr in MUTATORS
                and root_name(func.value) in names
                and isinstance(func.value, (ast.Attribute, ast.Subscript))
            ) or (
                isinstance(func, ast.Name)
                and func.id in ("setattr", "delattr")
                and bool(node.args)
                and root_name(node.args[0]) in names
            )
        if hit:
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def project_modules() -> list[str]:
    paths = glob.glob(os.path.join(ROOT, "*.py"))
    paths += glob.glob(os.path.join(ROOT, PACKAGE, "**", "*.py"), recursive=True)
    config = os.path.join(ROOT, PACKAGE, "config") + os.sep
    return sorted(p for p in paths if not p.startswith(config))


def test_no_module_writes_into_config():
    paths = project_modules()
    assert len(paths) > 60
    found = {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            writes = writes_into_config(f.read())
        if writes:
            found[os.path.relpath(path, ROOT)] = writes
    assert found == {}


PLANTED = {
    "hparams.CHECKS.append(check)": "from transformer_tf2.config import hparams",
    "hparams.CHOICES['position'] = REGISTRY.keys()": "from transformer_tf2.config import hparams",
    "families.POSITIONS.update(extra)": "from transformer_tf2.config import families",
    "families.POSITIONS['mine'] = row": "from transformer_tf2.config import families",
    "CHOICES['norm'] += ('rms',)": "from transformer_tf2.config.hparams import CHOICES",
    "c.hparams.MODEL_KEYS = ()": "import transformer_tf2.config as c",
    "setattr(hparams, 'PRESETS', {})": "from transformer_tf2.config import hparams",
    "del families.MODEL_TYPES['universal']": "from transformer_tf2.config import families",
}


@pytest.mark.parametrize("statement", list(PLANTED))
def test_a_planted_write_into_config_is_found(statement):
    """Each planted statement is found, on its line, in a module whose other lines only
    read config or change objects of their own."""
    clean = textwrap.dedent(
        f"""
        {PLANTED[statement]}
        import collections

        REGISTRY = {{}}
        seen = collections.Counter()
        seen.update(["x"])
        REGISTRY["mine"] = families.check
        hp = hparams.apply(hparams.Hparams(), {{"position": CHOICES["position"][0]}})
        """
    )
    assert writes_into_config(clean) == []
    planted = clean + f"\n\ndef later():\n    pass\n\n\n{statement}\n"
    line = planted.rstrip().count("\n") + 1
    code = ast.unparse(ast.parse(statement).body[0])
    assert writes_into_config(planted) == [f"{line}: {code}"]


def test_importing_every_module_leaves_config_as_config_alone_makes_it():
    """Config's tables, choices and ranges in this process, after every module of the
    package is imported, equal those of a fresh process that imported config alone."""
    modules = glob.glob(os.path.join(ROOT, PACKAGE, "**", "*.py"), recursive=True)
    for path in modules:
        name = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".").removesuffix(".__init__")
        importlib.import_module(name)
    assert len(modules) > 60
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [sys.executable, os.path.join(ROOT, "tests", "config_state.py")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == config_state.state()

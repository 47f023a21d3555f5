"""The command line of every script: options parsed with argparse from the Hparams dataclass,
a ``--help`` that explains them, and a start that answers before TensorFlow loads.

A script declares a :class:`Script` and calls :func:`start` before it imports TensorFlow::

    SCRIPT = cli.Script("eval", __doc__, fields=("logdir", "decoding"), options={...})
    if __name__ == "__main__":
        cli.start(SCRIPT)  # --help and option errors answer here, in well under a second
    import tensorflow as tf

then parses for real in its ``main`` with :func:`parse_args`. Nothing here imports TensorFlow.

The help text of a hyperparameter and its --help section come from its declaration in
hparams.py (``hparams.setting``), the preset lines from presets.DESCRIPTIONS. The quiet start
(TensorFlow's CPU-only start-up lines filtered) is utils/quiet_start.py.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import difflib
import functools
import os
import platform
import re
import sys
import textwrap
from typing import Any

from transformer_tf2.config import hparams, presets
from transformer_tf2.config.hparams import UserError
from transformer_tf2.utils import files, quiet_start

# oneDNN, TensorFlow's optimized x86 CPU kernels: TensorFlow turns them on by itself only
# on some CPUs (it reads the variable once, at its import). On, unless the user chose.
ONEDNN_VARIABLE = "TF_ENABLE_ONEDNN_OPTS"


def default_onednn(environ=os.environ, machine: str = "") -> None:
    """Set TF_ENABLE_ONEDNN_OPTS=1 on an x86 CPU where the variable is unset."""
    if (machine or platform.machine()).lower() in ("x86_64", "amd64", "i686", "x86"):
        environ.setdefault(ONEDNN_VARIABLE, "1")


default_onednn()  # every script imports cli before TensorFlow

# what eval.py, translate.py and export.py list: the decoding hyperparameters
DECODING_FIELDS = ("logdir",) + hparams.DECODE_KEYS
# export.py's: a SavedModel's search (sampling, streams and batches are a decoder's)
EXPORT_FIELDS = ("logdir", "beam_size", "length_penalty", "max_len_extra", "max_len")
DECODING_NOTE = (
    "The model's settings come from <logdir>/hparams.json (the run's own), and so do the "
    "decoding settings below, unless hparams.py or the command line sets them: each "
    "value shown is the one that will run, with where it comes from."
)
RUN_SOURCE = "the run's hparams.json"
VERBOSE_HELP = "show TensorFlow's own start-up log lines (hidden by default on a CPU-only machine)"

# ---------------------------------------------------------------------------------------
# What hparams.py says about its fields and presets


@dataclasses.dataclass(frozen=True)
class FieldDocs:
    help: dict[str, str]  # field -> its --help text
    sections: dict[str, list[str]]  # section name -> its fields, in declaration order
    titles: dict[str, str]  # section name -> its heading, e.g. "model (paper section 3)"
    presets: dict[str, str]  # preset -> its description


@functools.lru_cache(maxsize=None)
def field_docs(cls: type = hparams.Hparams) -> FieldDocs:
    """What ``--help`` says of the fields of ``cls`` (a dataclass declared with
    hparams.setting, Hparams by default), read from their declarations: each field's help
    text, the sections in the order of their first fields, and the presets' descriptions."""
    sections = hparams.sections(cls)
    return FieldDocs(
        help={f.name: f.metadata["help"] for f in dataclasses.fields(cls)},
        sections=sections,
        titles={name: hparams.SECTIONS[name] for name in sections},
        presets=dict(presets.DESCRIPTIONS),
    )


# ---------------------------------------------------------------------------------------
# Parsing


@dataclasses.dataclass(frozen=True)
class Script:
    """What a script tells its ``--help``.

    ``fields`` names the hyperparameters it uses, as hparams.py sections ("model") or single
    fields ("logdir"); every other hyperparameter is still accepted, and listed by
    ``--help`` only under "other". ``options`` maps the script's own options to
    ``(default, help)``; ``note`` is printed after the description. ``reads_run``: the
    script decodes a trained run (``--logdir``): its decoding settings start from the
    run's hparams.json (:func:`parse_args`).
    """

    name: str
    doc: str
    fields: tuple[str, ...] = ()
    options: dict[str, tuple[Any, str]] = dataclasses.field(default_factory=dict)
    note: str = ""
    # the options that name a text file the script reads: checked before TensorFlow loads
    text_inputs: tuple[str, ...] = ()
    reads_run: bool = False


class _Parser(argparse.ArgumentParser):
    """argparse, with errors raised as the project's one-line UserError."""

    def error(self, message):
        missing = re.fullmatch(r"argument --(\w+): expected one argument", message)
        if missing:
            raise UserError(f"--{missing.group(1)} needs a value")
        raise UserError(message)


def _normalize(argv: list[str]) -> list[str]:
    """``--d-model=x`` -> ``--d_model=x``: dashes in option names (never in values)."""
    out = []
    for arg in argv:
        if arg.startswith("--"):
            key, eq, value = arg[2:].partition("=")
            arg = "--" + key.replace("-", "_") + eq + value
        out.append(arg)
    return out


def _metavar(value: Any) -> str:
    return {bool: "BOOL", int: "INT", float: "FLOAT"}.get(type(value), "STR")


def _help(text: str, value: Any, source: str = "") -> str:
    """``text`` with the value this command would use and, given ``source``, where it
    comes from: ``(default: 'xl', from hparams.py)``, ``(default: 8000, from preset
    multi30k)`` or ``(this command: 512, from the command line)``."""
    if "(default:" not in text:
        shown = str(value).lower() if isinstance(value, bool) else repr(value)
        if source == "the command line":
            text = f"{text} (this command: {shown}, from the command line)"
        else:
            text = f"{text} (default: {shown}{', from ' + source if source else ''})"
    return text.replace("%", "%%").strip()


def sources(preset: str, given, user=()) -> dict[str, str]:
    """Where each hyperparameter's value comes from: the command line (``given``), the
    preset ``preset`` (the fields it sets), the user's hparams.py (the fields of ``user``
    it sets) or the declared default ("": ``--help`` then shows the value alone)."""
    return {
        name: "the command line"
        if name in given
        else f"preset {preset}"
        if name in hparams.PRESETS.get(preset, {})
        else "hparams.py"
        if name in user
        else ""
        for name in hparams.FIELDS
    }


# the user's file of settings, beside the scripts: plain assignments (``d_model = 256``)
# the folder the package sits in: in a checkout, the repository root, where the scripts are
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
USER_FILE = "hparams.py"


def user_values(folder: str | None = None) -> dict[str, Any]:
    """The settings that the user's ``hparams.py`` in ``folder`` (default: the folder the
    package sits in, a checkout's root) assigns, by name; {} where there is none. Names
    starting with "_" are the file's own; any other name must be a setting, or it is one
    UserError line naming the file and the line."""
    path = os.path.join(ROOT if folder is None else folder, USER_FILE)
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        source = f.read()
    try:
        tree = ast.parse(source, path)
    except SyntaxError as e:
        raise UserError(f"{path}, line {e.lineno}: {e.msg}; fix the line or remove it") from None
    values: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        targets = node.targets if isinstance(node, ast.Assign) else []
        names = [getattr(t, "id", None) for t in targets]
        if len(names) != 1 or names[0] is None:
            raise UserError(
                f"{path}, line {node.lineno}: only plain assignments of settings belong "
                f"here (name = value), e.g. d_model = 256"
            )
        name = names[0]
        if name.startswith("_"):
            continue
        if name not in hparams.FIELDS:
            raise UserError(
                f"{path}, line {node.lineno}: unknown setting '{name}'{hparams.suggest(name)}"
            )
        try:
            values[name] = ast.literal_eval(node.value)
        except ValueError:
            raise UserError(
                f"{path}, line {node.lineno}: {name} must be a plain value (a number, a "
                f"string, True or False)"
            ) from None
    return values


def _add(group, name: str, default: Any, text: str, hidden: bool = False, source: str = "") -> None:
    kwargs: dict[str, Any] = dict(dest=name, default=argparse.SUPPRESS, metavar=_metavar(default))
    if isinstance(default, bool):  # a bare --name means true
        kwargs.update(nargs="?", const="true")
    if name in hparams.CHOICES:
        kwargs["metavar"] = "{" + ",".join(hparams.CHOICES[name]) + "}"
    group.add_argument(
        f"--{name}", help=argparse.SUPPRESS if hidden else _help(text, default, source), **kwargs
    )


def _description(script: Script | None) -> str:
    if script is None:
        return ""
    paragraphs = script.doc.strip().split("\n\n")
    text = paragraphs[0]
    if len(paragraphs) > 1 and paragraphs[1].startswith("    "):  # the usage examples
        text += "\n\n" + paragraphs[1]
    return text + ("\n\n" + textwrap.fill(script.note, 88) if script.note else "")


def build_parser(
    script: Script | None,
    base: hparams.Hparams,
    options: dict[str, tuple[Any, str]],
    origin: dict[str, str] | None = None,
    add_help: bool = True,
) -> argparse.ArgumentParser:
    """The full parser: the script's options, then the hyperparameters by section (with the
    values of ``base``: the preset's, and the command line's where ``--help`` shows them,
    each with its :func:`sources` entry in ``origin``), then the presets in the epilog."""
    docs = field_docs()
    wanted = set()
    for name in script.fields if script else tuple(docs.sections):
        wanted.update(docs.sections.get(name, [name]))
    preset_lines = "\n".join(f"  {name:<18} {text}" for name, text in docs.presets.items())
    origin = origin or {}
    parser = _Parser(
        add_help=add_help,
        prog=f"python {script.name}.py" if script else None,
        usage="%(prog)s [--preset NAME] [--name value ...]",
        description=_description(script),
        epilog=f"presets (--preset NAME):\n{preset_lines}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    own = parser.add_argument_group(f"{script.name if script else 'script'} options")
    own.add_argument(
        "--preset",
        default=argparse.SUPPRESS,
        metavar="NAME",
        help="start from a named preset (listed below) (default: demo)",
    )
    for name, (default, text) in options.items():
        _add(own, name, default, text)
    for section, names in docs.sections.items():
        if any(n in wanted for n in names):
            group = parser.add_argument_group(f"hyperparameters: {docs.titles[section]}")
        for name in names:
            hidden = name not in wanted
            _add(
                parser if hidden else group,
                name,
                getattr(base, name),
                docs.help[name],
                hidden,
                origin.get(name, ""),
            )
    if script is not None and set(hparams.FIELDS) - wanted:
        parser.add_argument_group(
            "other hyperparameters",
            f"The other fields of hparams.py are accepted too; {script.name}.py does not use them.",
        )
    # the original's flag: --sinusoid false means position=learned
    parser.add_argument("--sinusoid", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return parser


def _convert_option(key: str, default: Any, value: str) -> Any:
    if isinstance(default, bool):
        return hparams.to_bool(key, value)
    if isinstance(default, (int, float)):
        try:
            return type(default)(value)
        except ValueError:
            raise UserError(f"--{key} expects {type(default).__name__}, got {value!r}") from None
    return value


def parse_args(
    argv: list[str] | None = None,
    extra: dict[str, Any] | None = None,
    script: Script | None = None,
) -> tuple[hparams.Hparams, dict[str, Any]]:
    """Parse ``--preset NAME`` and ``--key value`` / ``--key=value`` options.

    Two phases: the preset is read first, so that ``--preset multi30k --help`` shows the
    preset's values as defaults. ``extra`` (or ``script.options``) maps the script's own
    options to their defaults; their values come back in the second return value, with
    ``'_preset'`` (the preset name) and ``'_set'`` (the hyperparameters given explicitly).
    Raises UserError for an unknown option (with the closest name), a missing value, a
    wrong type or a value out of range.
    """
    argv = _normalize(list(sys.argv[1:] if argv is None else argv))
    options = {k: (v, "") for k, v in (extra or {}).items()}
    if script is not None:
        options.update(script.options)
        options.setdefault("verbose", (False, VERBOSE_HELP))
    first = _Parser(add_help=False, allow_abbrev=False)
    first.add_argument("--preset", default="demo")
    name = first.parse_known_args(argv)[0].preset
    user = user_values()
    base = hparams.preset(name, user)
    saved: dict[str, Any] = {}
    if script is not None and script.reads_run:
        quiet = build_parser(script, base, options, add_help=False).parse_known_args(argv)[0]
        runs = getattr(quiet, "ensemble", "") or getattr(quiet, "logdir", base.logdir)
        saved = {k: v for k, v in run_values(str(runs).split(",")[0]).items() if k not in user}
        base = hparams.apply(base, saved)
    shown, origin = base, None
    if "-h" in argv or "--help" in argv:  # the command line's own values, with their source
        quiet = build_parser(script, base, options, add_help=False).parse_known_args(argv)[0]
        given = {k: v for k, v in vars(quiet).items() if k in hparams.FIELDS}
        origin = sources(name, given, user)
        origin.update({k: RUN_SOURCE for k in saved if k not in given})
        try:
            shown = hparams.apply(base, given)
        except UserError:  # a bad value: the parse below reports it
            pass
    namespace, rest = build_parser(script, shown, options, origin).parse_known_args(argv)
    for arg in rest:
        if arg.startswith("--"):
            key = arg[2:].partition("=")[0]
            known = [*hparams.FIELDS, *options, "preset", "sinusoid"]
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"did you mean --{close[0]}?" if close else "see --help for the list"
            raise UserError(f"unknown option --{key}; {hint}")
        raise UserError(f"unexpected argument '{arg}': options look like --name value")
    given = vars(namespace)
    overrides = {k: v for k, v in given.items() if k in hparams.FIELDS or k == "sinusoid"}
    hp = hparams.apply(base, overrides)
    opts = {
        k: _convert_option(k, default, given[k]) if k in given else default
        for k, (default, _) in options.items()
    }
    opts["_preset"] = name
    opts["_set"] = set(overrides) - {"sinusoid"} | (
        {"position"} if "sinusoid" in overrides else set()
    )
    if script is not None and script.reads_run:  # yours over the run's, as the command line's
        opts["_set"] |= {k for k in user if k in hparams.DECODE_KEYS}
    return hp, opts


def run_values(logdir: str) -> dict[str, Any]:
    """The decoding settings saved with the run in ``logdir``: {} where it has no
    hparams.json, or one that does not read (the script's load then says why)."""
    path = os.path.join(logdir, "hparams.json")
    if not os.path.isfile(path):
        return {}
    try:
        saved = hparams.load(path)
    except UserError:
        return {}
    return {k: getattr(saved, k) for k in hparams.DECODE_KEYS}


def ensemble_runs(opts: dict, who: str) -> list[str] | None:
    """The logdirs of ``--ensemble A,B,...`` (None when not given): each named once, and
    not beside ``--logdir``, each a one-line UserError."""
    if not opts.get("ensemble"):
        return None
    runs = [d.strip() for d in opts["ensemble"].split(",")]
    if not all(runs) or len(set(runs)) != len(runs):
        raise UserError(
            f"{who}: --ensemble takes distinct run folders separated by commas; got "
            f"{opts['ensemble']!r}"
        )
    if "logdir" in opts["_set"]:
        raise UserError(f"{who}: --ensemble names every run: drop --logdir")
    return runs


def start(script: Script, argv: list[str] | None = None) -> None:
    """What a script does before it imports TensorFlow: answer ``--help``, option errors and
    faults of the text files it will read (``script.text_inputs``: missing, a folder, not
    UTF-8), each one line with exit status 2; then, unless ``--verbose``, hide TensorFlow's
    INFO logs and, on a machine without an NVIDIA device, its CPU-only start-up lines."""
    try:
        _, opts = parse_args(argv, script=script)
        for key in script.text_inputs:
            if opts.get(key):
                files.check_text(opts[key])
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    if opts["verbose"]:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "0")
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if not quiet_start.gpu_present() and hasattr(os, "fork"):
        quiet_start.quiet_stderr()


def run_main(main) -> None:
    """Run a script's main(), turning UserError into one line on stderr and its exit
    status (2, or the error's own)."""
    try:
        main()
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(e.status)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)

"""What the benchmarks share. ``import common`` first: it puts the project's root (or,
with :func:`use_tree`, another checkout) on the import path, so that a benchmark imports
the package (transformer_tf2) as the scripts do; nothing here loads TensorFlow."""

import json
import os
import shlex
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
RESULT = "RESULT "  # the line a child prints its result on: RESULT {json}
PACKAGE = "transformer_tf2"


def use_tree(path: str) -> None:
    """Import the project from the checkout at ``path`` (``--tree``, ``--baseline_tree``)
    instead of this one: first on the import path, and the project modules imported so
    far forgotten so that they load again from there."""
    sys.path.insert(0, os.path.abspath(path))
    for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
        del sys.modules[name]


def emit(result) -> None:
    """A child's answer to :func:`run_child`: one ``RESULT {json}`` line on stdout."""
    print(RESULT + json.dumps(result), flush=True)


def run_child(command: list[str], who: str, cwd: str = ROOT, env=None, check: bool = True):
    """Runs ``command`` (a child that calls :func:`emit`) and returns its last result. A
    failed child ends the benchmark in one line with the tail of its stderr, or, with
    ``check=False``, prints that and returns None."""
    proc = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    lines = [x for x in proc.stdout.splitlines() if x.startswith(RESULT)]
    if proc.returncode == 0 and lines:
        return json.loads(lines[-1][len(RESULT) :])
    message = f"{who}: a child failed (exit {proc.returncode}): {proc.stderr[-2000:]}"
    if check:
        sys.exit(message)
    print(message)
    return None


def median(values) -> float:
    return float(statistics.median(values))


def interleaved(k: int, a, b) -> tuple:
    """The order of pair ``k`` (0, 1, ...): a b, b a, a b, ..., so that a drift of the
    machine's speed over the run favours neither side."""
    return (a, b) if k % 2 == 0 else (b, a)


def check_plan(who: str, path: str, plan: dict, fresh: dict | None = None) -> dict:
    """The plan guard of a resumable benchmark: ``path`` records the settings of its first
    run (``plan``, with ``fresh`` beside it); a later run whose settings differ is refused,
    as its figures would not compare. Returns what ``path`` holds."""
    from transformer_tf2.utils import files

    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            held = json.load(f)
        differ = [k for k in plan if held.get(k) != plan[k]]
        if differ:
            sys.exit(
                f"{who}: {path} holds another plan (its {', '.join(differ)} differ); "
                "pass another --out or the same options"
            )
        return held
    held = {**plan, **(fresh or {})}
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    files.atomic_write(path, json.dumps(held, indent=1) + "\n")
    return held


def run_logged(who: str, command: list[str], log: str, cwd: str = ROOT) -> None:
    """Runs one stage (prepro.py, train.py, eval.py) in ``cwd``, appending a ``$ command``
    line and its output to ``log``. A failure ends the benchmark in one line that names
    the script, its exit status and the log; the same benchmark command again resumes."""
    with open(log, "a", encoding="utf-8") as f:
        f.write("$ " + shlex.join(command) + "\n")
        f.flush()
        code = subprocess.call(command, stdout=f, stderr=subprocess.STDOUT, cwd=cwd)
    if code:
        sys.exit(f"{who}: {os.path.basename(command[1])} failed (exit {code}); see {log}")


def hparams_parser(options: dict, preset: str = "demo"):
    """The parser of a benchmark that takes the hyperparameters (cli.parse_args with
    ``extra=options``), built without TensorFlow."""
    from transformer_tf2.config import cli, hparams

    return cli.build_parser(None, hparams.preset(preset), {k: (v, "") for k, v in options.items()})

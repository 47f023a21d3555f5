"""The docs stay true: every command of README.md, CONTRIBUTING.md and docs/*.md (in a
fenced bash block, or inline code in a table or prose) names a script that exists and
options its parser accepts, every repository path it names exists, every relative link
resolves, no page or code comment cites a commit hash, and the Examples of the public
layers' docstrings run. Besides: a script that decodes a trained run (eval.py,
translate.py, export.py, serve.py) is given no setting it would ignore, no command names
a path outside the repository, a run name (``--logdir``) is trained by one command per
page, and every link to an entry of docs/journal.md names one that exists. The commands
of the guides that run in seconds run in test_doc_examples.py."""

from __future__ import annotations

import ast
import doctest
import glob
import importlib
import io
import os
import re
import shlex
import subprocess
import tokenize

import pytest

import scripts_of
from transformer_tf2.config import hparams

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = ["README.md", "CONTRIBUTING.md"] + sorted(
    os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md"))
)
# options whose value is a path the command writes, not one that must exist
OUTPUTS = {"--out", "--export_dir", "--logdir", "--prepro_dir", "--data_dir", "--evaldir"}
OUTPUTS |= {"--attention", "--input", "--archive", "--test_src", "--test_ref", "--ckpt"}
OUTPUTS |= {"--contrastive", "--tree", "--old_tree", "--baseline_tree", "--space"}
# folders of the repository whose files a command may name
TRACKED = ("figures/", "bench/", "demo/", "docs/", "tests/")
# a commit hash: 7 to 12 hexadecimal characters with both a letter and a digit
HASH = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,12}\b")
LINK = re.compile(r"\]\(([^)\s]+)\)")
# a fenced block of any language, and an inline code span (within a paragraph)
FENCE = re.compile(r"^[ \t]*```.*?^[ \t]*```[ \t]*$", re.M | re.S)
SPAN = re.compile(r"(?<!`)(`+)(?!`)((?:(?!\n[ \t]*\n).)+?)(?<!`)\1(?!`)", re.S)
# a script named by a placeholder (`python SCRIPT.py`), not by its name
PLACEHOLDER = re.compile(r"[A-Z_]+\.py")
# the record of how the choices were found, whose entries the guides cite by anchor
JOURNAL = "docs/journal.md"


def bash_blocks(text: str) -> list[str]:
    """The logical lines of the fenced ```bash blocks of a Markdown text (a line ending in
    a backslash joined with the next)."""
    lines, block = [], None
    for line in text.splitlines():
        if block is None:
            if line.strip() == "```bash":
                block = []
            continue
        if line.strip() == "```":
            lines += "\n".join(block).replace("\\\n", " ").splitlines()
            block = None
            continue
        block.append(line)
    return lines


def inline_code(text: str) -> list[str]:
    """The inline code spans of a Markdown text outside its fenced blocks, in tables and
    prose (a span broken over lines joined with a space)."""
    return [" ".join(m.group(2).split()) for m in SPAN.finditer(FENCE.sub("", text))]


def commands(line: str) -> list[list[str]]:
    """Each ``python SCRIPT.py args...`` of a shell line, as [SCRIPT.py, args...]; the
    rest of the line (pipes, ``&&``, ``time (...)``, comments) is passed over, and the
    brackets of an optional argument (``[--beam_size 4]``) are dropped."""
    try:
        words = shlex.split(line, comments=True)
    except ValueError:  # an unbalanced quote spread over lines of a for loop
        words = line.split("#")[0].split()
    out, current = [], None
    for word in words:
        word = word.strip("()[]")
        if word in ("&&", "||", "|", ";", "") or word.endswith(";"):
            current = None
            continue
        if current is not None:
            current.append(word)
        elif word in ("python", "python3"):
            current = []
            out.append(current)
    return [c for c in out if c and c[0].endswith(".py") and not PLACEHOLDER.fullmatch(c[0])]


def known_options(script: str) -> set[str] | None:
    """The option strings of a script's parser, built without running it (None: the
    script has no parser this test knows how to build)."""
    name = os.path.splitext(os.path.basename(script))[0]
    folder = os.path.dirname(script)
    if folder == "" and name in scripts_of.SCRIPTS:
        return set(scripts_of.parser(name)._option_string_actions)
    if folder in ("bench", "demo"):
        module = importlib.import_module(name if folder == "bench" else f"demo.{name}")
        return set(module.parser()._option_string_actions)
    return None


def check_command(argv: list[str], where: str) -> list[str]:
    script, args = argv[0], argv[1:]
    if not os.path.isfile(os.path.join(ROOT, script)):
        return [f"{where}: {script} does not exist"]
    known = known_options(script)
    if known is None:
        return [f"{where}: {script} has no parser to check its options against"]
    problems, previous = [], ""
    for arg in args:
        if arg.startswith("--") and " " not in arg:  # not a quoted value ("--a 1 --b 2")
            flag = arg.split("=")[0]
            if flag not in known:
                problems.append(f"{where}: {script} has no option {flag}")
        elif arg.startswith(TRACKED) and previous not in OUTPUTS:
            path = arg.split("*")[0]
            if not os.path.exists(os.path.join(ROOT, path)):
                problems.append(f"{where}: {script} names {arg}, which does not exist")
        previous = arg
    return problems


def ignored_settings(argv: list[str]) -> list[str]:
    """The settings a command gives a script that decodes a trained run but that it would
    ignore (it reads them from the run's hparams.json: the data and prepro folders, the
    training settings): what checkpoints.load_run warns of."""
    name = os.path.splitext(argv[0])[0]
    if name not in scripts_of.SCRIPTS or not scripts_of.script_of(name).reads_run:
        return []
    used = set(hparams.DECODE_KEYS) | set(hparams.MODEL_KEYS) | {"logdir"}
    keys = [a[2:].split("=")[0] for a in argv[1:] if a.startswith("--") and " " not in a]
    return [k for k in keys if k in hparams.FIELDS and k not in used]


def outside_paths(line: str) -> list[str]:
    """The words of a shell line that name a path above the repository (``../x``)."""
    return [w for w in re.split(r"[\s=]+", line) if w.startswith("../") or "/../" in w]


def runs_trained_twice(lines: list[str]) -> list[str]:
    """The ``--logdir`` of a page's train.py commands that two different commands write:
    a run name must name one run (a rerun of the same command resumes it)."""
    seen: dict[str, set] = {}
    for line in lines:
        for argv in commands(line):
            if argv[0] == "train.py" and "--logdir" in argv[:-1]:
                logdir = argv[argv.index("--logdir") + 1]
                seen.setdefault(logdir, set()).add(" ".join(argv[1:]))
    return sorted(logdir for logdir, argvs in seen.items() if len(argvs) > 1)


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to
    hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of a Markdown text's headings (outside fenced blocks); a repeated
    heading's gets -1, -2, ... as on GitHub."""
    found, count = set(), {}
    for line in FENCE.sub("", text).splitlines():
        heading = re.match(r"#{1,6} (.+)", line)
        if heading:
            name = slug(heading.group(1))
            n = count.get(name, 0)
            count[name] = n + 1
            found.add(name if n == 0 else f"{name}-{n}")
    return found


def page_problems(page: str, text: str) -> list[str]:
    problems = []
    lines = bash_blocks(text) + inline_code(text)
    for line in lines:
        for argv in commands(line):
            problems += check_command(argv, page)
            problems += [
                f"{page}: {argv[0]} ignores --{key} (the run's hparams.json has it)"
                for key in ignored_settings(argv)
            ]
        problems += [f"{page}: {w} is outside the repository" for w in outside_paths(line)]
    problems += [f"{page}: two commands train {r}" for r in runs_trained_twice(lines)]
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = os.path.normpath(os.path.join(ROOT, os.path.dirname(page), target.split("#")[0]))
        if not os.path.exists(path):
            problems.append(f"{page}: the link {target} resolves to nothing")
        elif path == os.path.join(ROOT, JOURNAL) and "#" in target:
            if target.split("#", 1)[1] not in anchors(read(JOURNAL)):
                problems.append(f"{page}: the link {target} names no entry of the journal")
        elif path.endswith(".md") and "#" in target:
            if target.split("#", 1)[1] not in anchors(read(os.path.relpath(path, ROOT))):
                problems.append(f"{page}: the link {target} names no heading of its page")
    problems += [f"{page}: commit hash {h}" for h in HASH.findall(text)]
    return problems + unlabelled_figures(page, text)


# a CPU named as `lscpu` names it, and a date
CPU = re.compile(r"(Intel|AMD)[^|]*?CPU family \d+, model \d+")
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")


def unlabelled_figures(page: str, text: str) -> list[str]:
    """The figures of README.md's results table and of docs/results.md that do not say
    where and when they were measured: each row of the README's table names a CPU model
    (its CPU family and model) and a date, and each section of results.md names a CPU
    model, a date and a command of this repository."""
    problems = []
    if page == "README.md":
        table = text.split("## What it does, measured", 1)[1].split("\n\n", 2)[1]
        rows = [r for r in table.splitlines() if r.startswith("|")][2:]
        for row in rows:
            what = row.split("|")[1].strip()
            if not CPU.search(row):
                problems.append(f"{page}: the row '{what}' names no CPU family and model")
            if not DATE.search(row):
                problems.append(f"{page}: the row '{what}' names no date")
    if page == "docs/results.md":
        for section in re.split(r"(?m)^## ", text)[1:]:
            title = section.splitlines()[0]
            body = section.replace("\n", " ")
            for name, found in (
                ("CPU family and model", CPU.search(body)),
                ("date", DATE.search(body)),
                ("command", re.search(r"python [\w/]+\.py", body)),
            ):
                if not found:
                    problems.append(f"{page}: the section '{title}' names no {name}")
    return problems


def read(page: str) -> str:
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        return f.read()


@pytest.mark.slow
def test_every_command_option_path_and_link_of_the_docs_is_real():
    problems = [p for page in PAGES for p in page_problems(page, read(page))]
    assert problems == []
    assert len(PAGES) >= 20  # README, CONTRIBUTING and the eighteen pages of docs/
    assert {"docs/journal.md", "docs/batches.md", "docs/gpu.md"} <= set(PAGES)
    assert {"docs/platform.md", "docs/sharing.md"} <= set(PAGES)


def test_a_misspelt_flag_a_missing_script_or_path_and_a_dead_link_are_caught():
    text = read("README.md").replace(
        "multi30k --max_minutes 30\n", "multi30k --max_minutez 30\n", 1
    )
    text += "\n```bash\npython tarin.py\npython plot_logs.py --logdir log/x figures/none.png\n```\n"
    text += "[gone](docs/nowhere.md) and a hash 1a2b3c4d\n"
    assert page_problems("README.md", text) == [
        "README.md: train.py has no option --max_minutez",
        "README.md: tarin.py does not exist",
        "README.md: plot_logs.py names figures/none.png, which does not exist",
        "README.md: the link docs/nowhere.md resolves to nothing",
        "README.md: commit hash 1a2b3c4d",
    ]


def test_a_misspelt_flag_in_inline_code_of_a_table_or_of_prose_is_caught():
    """The README's results table names its commands in inline code: a misspelt flag
    there (an optional one in brackets too) fails as one in a bash block does, and so
    does one in a command that prose breaks over two lines; a placeholder script
    (`python SCRIPT.py`) and the commands of fenced blocks of other languages are not
    read."""
    text = read("README.md")
    row = "`python train.py --preset multi30k --max_minutes 30 --logdir log/m30k_30min_1129`,"
    row += " then `python eval.py --logdir log/m30k_30min_1129 [--beam_size 4]`"
    assert row in text
    planted = row.replace("--max_minutes", "--max_minutez").replace("--beam_size", "--beam_sise")
    text = text.replace(row, planted)
    text += (
        "\nA SavedModel (`python export.py --logdir\nlog/demo --export_dri out`), or\n"
        "`python SCRIPT.py`.\n\n```\npython train.py --not_read 1\n```\n"
    )
    assert page_problems("README.md", text) == [
        "README.md: train.py has no option --max_minutez",
        "README.md: eval.py has no option --beam_sise",
        "README.md: export.py has no option --export_dri",
    ]


def test_commands_are_found_in_pipes_chains_and_continued_lines():
    text = (
        "```bash\n"
        "pip install -e . && python prepro.py && python train.py --num_epochs 2\n"
        "printf 'a\\n' |\n  python translate.py --logdir log/demo   # a comment --nope\n"
        "time (python eval.py \\\n  --beam_size 4)\n"
        "```\n"
    )
    found = [argv for line in bash_blocks(text) for argv in commands(line)]
    assert found == [
        ["prepro.py"],
        ["train.py", "--num_epochs", "2"],
        ["translate.py", "--logdir", "log/demo"],
        ["eval.py", "--beam_size", "4"],
    ]


def comments_of(path: str) -> str:
    """The comments and docstrings of a Python file."""
    with open(path, encoding="utf-8") as f:
        source = f.read()
    parts = [
        tok.string
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            parts.append(ast.get_docstring(node, clean=False) or "")
    return "\n".join(parts)


@pytest.mark.slow
def test_no_code_comment_cites_a_commit_hash():
    files = [
        p
        for pattern in (
            "*.py",
            "transformer_tf2/*.py",
            "transformer_tf2/*/*.py",
            "bench/*.py",
            "demo/*.py",
            "tests/*.py",
        )
        for p in glob.glob(os.path.join(ROOT, pattern))
    ]
    assert len(files) > 50
    found = {os.path.relpath(p, ROOT): HASH.findall(comments_of(p)) for p in files}
    assert {p: h for p, h in found.items() if h} == {}
    with open(
        os.path.join(ROOT, "transformer_tf2", "kernels", "native_ops.cc"), encoding="utf-8"
    ) as f:
        assert HASH.findall(f.read()) == []


EXAMPLES = [
    ("transformer_tf2.layers.attention", "MultiHeadAttention"),
    ("transformer_tf2.layers.modules", "EncoderLayer"),
    ("transformer_tf2.layers.modules", "DecoderLayer"),
    ("transformer_tf2.models.model", "Transformer"),
    ("transformer_tf2.decoding.translator", "Translator"),
]


@pytest.mark.slow
@pytest.mark.parametrize("module,name", EXAMPLES)
def test_docstring_examples_of_the_public_layers_run(module, name):
    obj = getattr(importlib.import_module(module), name)
    doc = obj.__doc__ or ""
    assert "Example" in doc and ">>>" in doc and "References" in doc and "Args" in doc
    finder = doctest.DocTestFinder(recurse=False)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = finder.find(obj, name, globs={})
    assert sum(len(t.examples) for t in tests) >= 3
    for test in tests:
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0


def test_ignored_settings_outside_paths_reused_run_names_and_dead_journal_anchors_are_caught():
    """eval.py reads its data from the run, so --prepro_dir or --data_dir on it would be
    ignored; ../shared/... exists only on one machine; two train.py commands writing one
    logdir make one run name mean two runs; a journal anchor must name an entry."""
    text = (
        "```bash\n"
        "python eval.py --logdir log/x --prepro_dir prepro/x --beam_size 4\n"
        "python translate.py --data_dir=data/x --logdir log/x --precision float32\n"
        "python prepro.py --preset multi30k --data_dir ../shared/data/multi30k\n"
        "python train.py --max_steps 700 --logdir log/s\n"
        "python train.py --max_steps 1200 --logdir log/s\n"
        "python train.py --max_steps 3000 --logdir log/t\n"
        "python train.py --max_steps 3000 --logdir log/t\n"
        "```\n"
        "[stage 9](journal.md#2026-11-26-stage-9), [gone](journal.md#2026-11-26-stage-10)\n"
        "[speed](results.md#decoding-speed), [old](results.md#todays-code-end-to-end)\n"
    )
    assert page_problems("docs/x.md", text) == [
        "docs/x.md: eval.py ignores --prepro_dir (the run's hparams.json has it)",
        "docs/x.md: translate.py ignores --data_dir (the run's hparams.json has it)",
        "docs/x.md: ../shared/data/multi30k is outside the repository",
        "docs/x.md: two commands train log/s",
        "docs/x.md: the link journal.md#2026-11-26-stage-10 names no entry of the journal",
        "docs/x.md: the link results.md#todays-code-end-to-end names no heading of its page",
    ]
    assert slug("2026-11-25: the A/B at 30 minutes") == "2026-11-25-the-ab-at-30-minutes"
    assert slug("Until 2026-11-28: the final evaluation inside max_minutes") == (
        "until-2026-11-28-the-final-evaluation-inside-max_minutes"
    )
    assert anchors("# A\n## B: c\n```\n# not a heading\n```\n## B: c\n") == {"a", "b-c", "b-c-1"}


def test_a_results_row_or_section_without_its_cpu_or_date_is_caught():
    """The README's results table names the CPU model and the date on every row, and
    every section of docs/results.md names them with a command: a row or a section that
    drops one is caught."""
    readme = read("README.md")
    assert unlabelled_figures("README.md", readme) == []
    row = next(
        r
        for r in readme.split("## What it does, measured", 1)[1].splitlines()
        if r.startswith("| Multi30k")
    )
    bare = re.sub(r"CPU family \d+, model \d+", "AMX", row)
    bare = DATE.sub("today", bare)
    what = row.split("|")[1].strip()
    assert unlabelled_figures("README.md", readme.replace(row, bare)) == [
        f"README.md: the row '{what}' names no CPU family and model",
        f"README.md: the row '{what}' names no date",
    ]
    results = read("docs/results.md")
    assert unlabelled_figures("docs/results.md", results) == []
    planted = results + "\n## A figure from nowhere\n\nIt ran fast on some machine.\n"
    assert unlabelled_figures("docs/results.md", planted) == [
        f"docs/results.md: the section 'A figure from nowhere' names no {name}"
        for name in ("CPU family and model", "date", "command")
    ]


def ci_readme_command(pattern: str, readme: str) -> str:
    """What .ci/run's ``readme_command PATTERN`` picks from the README at ``readme``."""
    with open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8") as f:
        (function,) = re.findall(r"^readme_command\(\) \{.*?^\}\n", f.read(), re.M | re.S)
    folder = os.path.dirname(readme)
    ran = subprocess.run(
        ["bash", "-c", f'{function}readme_command "$1"', "ci", pattern],
        cwd=folder,
        capture_output=True,
        text=True,
        check=True,
    )
    return ran.stdout.strip()


def test_ci_runs_the_readmes_two_commands_as_written(tmp_path):
    """The README's first command makes and activates a virtual environment, installs and
    runs the demo end to end; .ci/run reads that line and the test command from the README
    (so CI runs them as written), and would fail on a README without them."""
    first_block = bash_blocks(read("README.md"))[0]
    assert first_block.startswith("python3 -m venv .venv && . .venv/bin/activate && pip install")
    assert [argv[0] for argv in commands(first_block)] == ["prepro.py", "train.py", "eval.py"]
    with open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8") as f:
        ci = f.read()
    (first, tests) = re.findall(r"^\w+=\$\(readme_command '(.*)'\)$", ci, re.M)
    readme = os.path.join(ROOT, "README.md")
    assert ci_readme_command(first, readme) == first_block
    tested = ci_readme_command(tests, readme)
    assert tested == 'pip install -e ".[dev]" && python -m pytest -q'
    assert tested in bash_blocks(read("README.md"))
    assert 'eval "$install_and_demo"' in ci and 'eval "$run_tests"' in ci
    (tmp_path / "README.md").write_text("```bash\npip install -e .\n```\n", encoding="utf-8")
    assert ci_readme_command(first, str(tmp_path / "README.md")) == ""

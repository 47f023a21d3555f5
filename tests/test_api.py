"""The Python API (transformer_tf2.Translator, docs/api.md): the page's examples run, the
API gives what translate.py prints, a mistake is one UserError, and the wheel installed
in a fresh environment translates from a folder outside the repository."""

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import venv

import pytest

import transformer_tf2
import translate
from helpers import ROOT
from transformer_tf2 import Hypothesis, Translator, UserError, api
from transformer_tf2.config import hparams

PAGE = os.path.join(ROOT, "docs", "api.md")


def python_blocks(path: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return re.findall(r"```python\n(.*?)```", f.read(), re.S)


@pytest.fixture(scope="module")
def engine(quick_run):
    return Translator.from_run(quick_run[0].logdir)


@pytest.mark.slow
def test_the_examples_of_the_api_page_run(quick_run):
    """Every python block of docs/api.md runs on a trained run (its log/demo replaced by
    the run's folder) and prints what the page says it prints."""
    blocks = python_blocks(PAGE)
    assert len(blocks) == 5
    printed = []
    for block in blocks:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(block.replace('"log/demo"', repr(quick_run[0].logdir)), {})
        printed.append(out.getvalue().splitlines())
    two, one = printed[0]
    assert two.startswith("['") and len(eval(two)) == 2 and not one.startswith("[")
    assert len(printed[1]) == 3 + 1 + 1  # 3 n-best lines, the alignment, the forced line
    assert re.fullmatch(r"-?\d+\.\d{3}  .*", printed[1][0])
    assert re.search(r"\| (\d+-\d+ ?)+$", printed[1][3])
    assert eval(printed[1][4])[0].startswith("The woman")
    assert len(eval(printed[2][0])) == 3
    assert len(printed[3]) == 2 and float(eval(printed[3][0])[0]) < 0
    assert (
        len(printed[4]) == 1
        and printed[4][0].startswith("refused: ")
        and "beam_size" in printed[4][0]
    )


@pytest.mark.slow
def test_the_api_translates_as_translate_py_prints(quick_run, engine):
    """One decoding path: the API's translations are translate.py's output lines; its
    n-best lists are the beam's, best first; a score is the scorer's sum."""
    lines = ["Die Frau liest ein Buch.", "", "Der Hund schläft."]
    assert engine.translate(lines) == translate.translate_lines(engine, lines)
    assert engine.translate(lines)[1] == "" and engine.translate_batch(lines)[1] == []
    assert engine.translate(lines[0]) == engine.translate(lines)[0]
    greedy = engine.translate_batch(lines[:1])[0]
    assert len(greedy) == 1 and isinstance(greedy[0], Hypothesis) and greedy[0].score is None
    beam = Translator.from_run(quick_run[0].logdir, beam_size=3, max_len=8)
    assert beam.settings["beam_size"] == 3 and beam.settings["max_len"] == 8
    best = beam.translate_batch(lines[:1], n_best=3)[0]
    assert len(best) == 3 and [h.score for h in best] == sorted((h.score for h in best))[::-1]
    assert beam.translate(lines[:1]) == [best[0].text]
    assert all(h.runaway for h in best if len(h.text.split()) >= 8)
    scores = engine.score(lines[:1], ["The woman reads a book."], tokens=True)
    logp = engine.decoder.score_ids(
        engine.tok.encode_src(lines[:1]), engine.tok.encode_tgt(["The woman reads a book."])
    )[0]
    assert scores[0].score == pytest.approx(float(logp.sum()))
    assert scores[0].tokens[-1][0] == "</S>" and len(scores[0].tokens) == len(logp)
    assert engine.score(lines[:1], ["The woman reads a book."]) == [scores[0].score]


@pytest.mark.slow
def test_a_mistake_is_one_user_error_never_an_exit(quick_run, engine, tmp_path):
    logdir = quick_run[0].logdir
    cases = [
        (lambda: Translator.from_run(str(tmp_path)), "not found"),
        (lambda: Translator.from_run(logdir, beam_sise=4), "unknown option beam_sise"),
        (lambda: Translator.from_run(logdir, beam_size=0), "beam_size"),
        (lambda: Translator.from_run([]), "needs a run folder"),
        (lambda: engine.translate_batch(["a"], n_best=2), "n_best 2 needs a beam_size"),
        (lambda: engine.translate_batch(["a"], n_best=0), "n_best must be an integer"),
        (lambda: engine.translate_batch("a b"), "a list of strings, not one string"),
        (lambda: engine.translate_batch(["a", 3]), r"sentences\[1\] is a int"),
        (lambda: engine.translate(["a", "b"], prefixes=["x"]), "1 prefixes for 2 sentences"),
        (lambda: engine.score(["a"], ["x", "y"]), "2 targets for 1 sentences"),
    ]
    for call, message in cases:
        with pytest.raises(UserError, match=message):
            call()


@pytest.mark.slow
def test_the_wheel_installed_in_a_fresh_environment_translates_from_outside(quick_run, tmp_path):
    """``pip wheel .`` ships the package (the kernels' source too); installed into a new
    virtual environment, it is what a program in a folder outside the repository
    imports, and its Translator translates the run as this checkout does."""
    source = tmp_path / "source"  # built from a copy: the build writes build/ beside it
    shutil.copytree(os.path.join(ROOT, "transformer_tf2"), source / "transformer_tf2")
    for name in ("setup.cfg", "pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(os.path.join(ROOT, name), source / name)
    wheels = tmp_path / "wheels"
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(wheels),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stderr[-2000:]
    (wheel,) = wheels.glob("transformer_tf2-*.whl")
    env = tmp_path / "env"
    venv.EnvBuilder(with_pip=False).create(env)
    python = str(env / "bin" / "python")
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # The new environment sees the packages of the one running the tests (TensorFlow,
    # sentencepiece, ...), after its own: a .pth file names their folders. (A venv made
    # with system_site_packages from inside a venv would see the base interpreter's.)
    theirs = [p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages")]
    with open(os.path.join(site, "tests-environment.pth"), "w", encoding="utf-8") as f:
        f.write("".join(f"{p}\n" for p in theirs))
    install = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-index",
            "--target",
            site,
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stderr[-2000:]
    assert os.path.isfile(os.path.join(site, "transformer_tf2", "kernels", "native_ops.cc"))
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    program = (
        "import json, sys\n"
        "import transformer_tf2\n"
        "from transformer_tf2 import Translator\n"
        "t = Translator.from_run(sys.argv[1])\n"
        "print(json.dumps([transformer_tf2.__file__, t.translate(['Die Frau liest ein Buch.'])]))\n"
    )
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    ran = subprocess.run(
        [python, "-c", program, quick_run[0].logdir],
        cwd=outside,
        capture_output=True,
        text=True,
        timeout=300,
        env=clean,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    where, got = json.loads(ran.stdout.strip().splitlines()[-1])
    assert where.startswith(site), where
    assert got == Translator.from_run(quick_run[0].logdir).translate(["Die Frau liest ein Buch."])


def test_importing_the_package_loads_no_tensorflow():
    """``import transformer_tf2`` (every script does, before --help) loads no TensorFlow;
    its API names load on first use."""
    code = (
        "import sys, transformer_tf2\n"
        "from transformer_tf2.config import cli, hparams\n"
        "assert 'tensorflow' not in sys.modules, 'tensorflow loaded'\n"
        "print(transformer_tf2.__version__)\n"
    )
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.strip() == transformer_tf2.__version__
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        transformer_tf2.Nope  # noqa: B018


def test_the_options_of_from_run_are_the_decoding_settings():
    assert set(api.OPTIONS) == set(hparams.DECODE_KEYS) - {"results_dir"}

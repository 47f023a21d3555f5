"""translate.py: stdin, empty and overlong lines, n-best, the attention plot."""

import subprocess
import sys

import pytest

import checkpoints
import hparams
import translate
from helpers import ROOT


def test_translate_lines_empty_and_overlong(quick_run, capsys):
    """Empty lines stay empty; an overlong line is truncated with a warning, no crash."""
    hp, _ = quick_run
    hp, tok, model, _ = checkpoints.load_run(hp.logdir, {})
    long_line = " ".join(["Der Hund schläft."] * 400)
    lines = ["Die Frau liest ein Buch.", "", long_line, ""]
    out = translate.translate_lines(model, tok, hp, lines)
    assert len(out) == 4 and out[1] == "" and out[3] == ""
    assert "line 3" in capsys.readouterr().err
    # the same sentence alone gives the same translation (batching does not leak)
    assert translate.translate_lines(model, tok, hp, lines[:1]) == out[:1]
    nbest = translate.translate_lines(
        model, tok, hparams.apply(hp, {"beam_size": 3}), lines[:2], n_best=3
    )
    assert len(nbest) == 6 and nbest[0].startswith("1\t") and nbest[2].startswith("3\t")


def test_plot_attention(quick_run, tmp_path):
    """The attention plot of one sentence is a PNG; the translation it returns is the
    greedy one of translate_lines."""
    hp, _ = quick_run
    hp, tok, model, _ = checkpoints.load_run(hp.logdir, {})
    png = tmp_path / "attn.png"
    sentence = "Die Frau liest ein Buch."
    text = translate.plot_attention(model, tok, sentence, str(png), hp.max_len_extra)
    assert [text] == translate.translate_lines(model, tok, hp, [sentence])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 2000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["attn.png"]


@pytest.mark.slow
def test_translate_cli_stdin(run):
    hp, _, _ = run
    proc = subprocess.run(
        [sys.executable, "translate.py", "--logdir", hp.logdir],
        input="Die Frau liest ein Buch.\n\nDer Hund schläft.\n",
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.split("\n")
    assert len(lines) == 4 and lines[1] == "" and lines[3] == ""
    hp2, tok, model, _ = checkpoints.load_run(hp.logdir, {})
    expected = translate.translate_lines(
        model, tok, hp2, ["Die Frau liest ein Buch.", "", "Der Hund schläft."]
    )
    assert lines[:3] == expected


@pytest.mark.slow
def test_attention_png(run, tmp_path):
    hp, _, _ = run
    png = tmp_path / "attn.png"
    proc = subprocess.run(
        [sys.executable, "translate.py", "--logdir", hp.logdir, "--attention", str(png)],
        input="Die Frau liest ein Buch.\n",
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 2000

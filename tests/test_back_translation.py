"""docs/back_translation.md runs as written, at toy size: its bash block, line by line, on
a stand-in for data/multi30k made of the demo corpus (300 pairs), with the models shrunk
and the step counts cut. It checks what each step says it does: the reverse model reads
English and writes German, the synthetic German has a line per English line, the joined
corpus holds the real and the synthetic pairs, and both forward runs evaluate."""

import gzip
import json
import os
import re
import shutil
import subprocess

import pytest

from helpers import ROOT

PAGE = os.path.join(ROOT, "docs", "back_translation.md")
# the sizes cut, and no attention figures (seconds of each train.py that nothing reads)
TINY = (
    "--vocab_size 200 --d_model 16 --d_ff 32 --num_blocks 1 --num_heads 2 "
    "--attention_layers none "
    "--dev_bleu_sents 20 --max_len 10 --precision float32 --average 1"
)


def recipe() -> list[str]:
    with open(PAGE, encoding="utf-8") as f:
        (block,) = re.findall(r"```bash\n(.*?)```", f.read(), re.S)
    return [line for line in block.splitlines() if line.strip() and not line.startswith("#")]


def toy(line: str) -> str:
    """The recipe's line at toy size: 150 pairs a half, tiny models, a few steps."""
    line = line.replace("head -n 14500", "head -n 150").replace("tail -n +14501", "tail -n +151")
    line = line.replace("--max_steps 1200", "--max_steps 3")
    if line.startswith(("python prepro.py", "python train.py")):
        line += " " + TINY
    if line.startswith("python eval.py"):
        line += " --max_len 10"
    return line


@pytest.mark.slow
def test_the_back_translation_recipe_runs_as_written(demo_prepro, tmp_path):
    lines = recipe()
    assert len(lines) == 18 and any("--src_lang en --tgt_lang de" in line for line in lines)
    work = tmp_path / "work"
    (work / "data" / "multi30k").mkdir(parents=True)
    for name in os.listdir(ROOT):  # the scripts and the package, as in a checkout
        if name.endswith(".py") or name in ("transformer_tf2", "demo"):
            os.symlink(os.path.join(ROOT, name), work / name)
    split = {"train": "train", "dev": "val", "test": "test_2016_flickr"}
    for ours, theirs in split.items():
        for side, lang in (("src", "de"), ("tgt", "en")):
            with open(os.path.join(demo_prepro.prepro_dir, f"{ours}.{side}"), "rb") as f:
                text = f.read() if ours == "train" else b"".join(f.readlines()[:40])
            with gzip.open(work / "data" / "multi30k" / f"{theirs}.{lang}.gz", "wb") as f:
                f.write(text)
    for line in lines:
        run = subprocess.run(
            ["bash", "-c", toy(line)], cwd=work, capture_output=True, text=True, timeout=600
        )
        assert run.returncode == 0, f"{line}\n{run.stderr[-3000:]}"
    with open(work / "prepro" / "bt_rev" / "hparams.json", encoding="utf-8") as f:
        reverse = json.load(f)
    assert (reverse["src_lang"], reverse["tgt_lang"], reverse["corpus"]) == ("en", "de", "parallel")
    mono = (work / "data" / "bt_b" / "mono.en").read_text().splitlines()
    synthetic = (work / "data" / "bt_b" / "synthetic.de").read_text().splitlines()
    assert len(mono) == 150 and len(synthetic) == len(mono)
    joined = (work / "data" / "bt_ab" / "train.de").read_text().splitlines()
    assert joined[150:] == synthetic and len(joined) == 300
    assert (work / "data" / "bt_ab" / "train.en").read_text().splitlines()[150:] == mono
    for run, pairs in (("bt_a", 150), ("bt_ab", 300)):
        with open(work / "prepro" / run / "hparams.json", encoding="utf-8") as f:
            assert json.load(f)["corpus"] == "parallel"
        # prepro read the files given (their pairs), not the demo corpus
        assert len((work / "prepro" / run / "train.src").read_text().splitlines()) == pairs
        results = os.listdir(work / "results")
        assert any(name.startswith(run + "_") and name.endswith(".json") for name in results)
    shutil.rmtree(work / "log")  # the runs' checkpoints: nothing else needs them

"""Successive halving over training settings, scored on dev: which configuration of a
preset trains best for a budget.

    python prepro.py --preset multi30k --data_dir data/multi30k
    python bench/search.py --preset multi30k --data_dir data/multi30k
        [--rungs 5,10,20] [--unit minutes|steps] [--configs 12] [--keep 0.5] [--seed 0]
        [--space FILE] [--out runs/search] [train.py options ...]

Configurations: c0 is the preset as it is; c1, c2, ... are ``--configs - 1`` settings
drawn (seeded) from SPACE, each changing one to three of its axes away from the preset,
or else, with ``--space FILE``, one JSON object of train.py settings per line.

Rung k trains every configuration still in the search from scratch, for ``rungs[k]``
minutes (``--max_minutes``) or steps (``--unit steps``: ``--max_steps``, for comparing
at an equal number of updates), one at a time, in a seeded random order (so that a
drift in the machine's speed favours no configuration):

    python train.py --preset P --data_dir D SETTINGS --max_minutes R
        --logdir OUT/cI_rK --evaldir OUT/eval/cI_rK [train.py options ...]

Its figure is the dev BLEU of the run's default model (OUT/cI_rK/best.json: the best
checkpoint or the average, scored on the dev subset); the test set is never read. The
best ``--keep`` fraction of a rung (at least one) goes on to the next. A configuration
with another ``vocab_size`` trains on its own prepro folder, OUT/prepro_vV, which
prepro.py makes once.

OUT/search.json records the configurations and every finished run (written to a
temporary file, then renamed). The same command run again trains only what is missing,
and train.py resumes a run that was cut off (``max_minutes`` is the total over its
starts); other ``--preset``, ``--rungs``, ``--unit`` or configurations for the same OUT
are refused. A run that fails (train.py's one-line error is kept) leaves the search. The
end prints one table: each configuration's settings, its dev BLEU at each rung it
reached and the steps of its last run.
"""

import argparse
import json
import math
import os
import random
import subprocess
import sys

import common

from transformer_tf2.config import (
    hparams,  # neither imports TensorFlow: the search itself stays light
)
from transformer_tf2.utils import files

ROOT = common.ROOT

# the candidates: each axis's values; "shape" trades width against depth (the preset's
# multi30k shape is 256/1024/3)
SPACE = {
    "position": ["sinusoid", "shaw", "t5", "xl", "rotary", "alibi", "alibi_dir"],
    "norm": ["post", "pre"],
    "dropout_rate": [0.1, 0.2, 0.3],
    "attention_dropout": [0.0, 0.1],
    "label_smoothing": [0.1, 0.2],
    "lr": [0.001, 0.0015, 0.002, 0.003],
    "warmup_steps": [200, 400, 800],
    "cooldown": [0.1, 0.2, 0.3],
    "tokens_per_batch": [1024, 2048, 4096],
    "shape": [
        {"d_model": 256, "d_ff": 1024, "num_blocks": 3},
        {"d_model": 384, "d_ff": 1536, "num_blocks": 2},
        {"d_model": 192, "d_ff": 768, "num_blocks": 4},
        {"d_model": 256, "d_ff": 1024, "num_blocks": 4},
    ],
    "vocab_size": [4000, 8000, 10000],
    "average": [1, 3, 5],
}


def settings_of(axis: str, value) -> dict:
    """The train.py settings of one axis's value."""
    return dict(value) if isinstance(value, dict) else {axis: value}


def draw(base: hparams.Hparams, n: int, seed: int) -> list[dict]:
    """``n`` distinct settings, each one to three axes of SPACE away from ``base``."""
    rng, out = random.Random(seed), []
    while len(out) < n:
        settings = {}
        for axis in rng.sample(sorted(SPACE), rng.randint(1, 3)):
            values = [v for v in SPACE[axis] if settings_of(axis, v) != current(base, axis)]
            settings.update(settings_of(axis, rng.choice(values)))
        if settings not in out:
            out.append(settings)
    return out


def current(base: hparams.Hparams, axis: str) -> dict:
    """The preset's settings on ``axis``, in the form settings_of gives."""
    keys = SPACE[axis][0].keys() if isinstance(SPACE[axis][0], dict) else [axis]
    return {k: getattr(base, k) for k in keys}


def configurations(opts: argparse.Namespace) -> list[dict]:
    """c0 (the preset) and the drawn or listed settings; each checked as train.py would."""
    base = hparams.preset(opts.preset)
    if opts.space:
        with open(opts.space, encoding="utf-8") as f:
            listed = [json.loads(line) for line in f if line.strip()]
    else:
        listed = draw(base, opts.configs - 1, opts.seed)
    configs = [{}] + listed
    for i, settings in enumerate(configs):
        try:
            hparams.apply(base, settings)
        except hparams.UserError as e:
            raise SystemExit(f"search: configuration c{i} ({settings}): {e}") from None
    return configs


def train_command(opts, settings: dict, name: str, budget) -> list[str]:
    """train.py's command line for one run (module docstring)."""
    args = [sys.executable, os.path.join(ROOT, "train.py"), "--preset", opts.preset]
    if opts.data_dir:
        args += ["--data_dir", opts.data_dir]
    for key, value in settings.items():
        args += [f"--{key}", str(value)]
    if "vocab_size" in settings:
        args += ["--prepro_dir", prepro_dir(opts, settings["vocab_size"])]
    limit = "--max_minutes" if opts.unit == "minutes" else "--max_steps"
    args += [limit, f"{budget:g}", "--logdir", os.path.join(opts.out, name)]
    return args + ["--evaldir", os.path.join(opts.out, "eval", name), *opts.train_args]


def prepro_dir(opts, vocab_size: int) -> str:
    return os.path.join(opts.out, f"prepro_v{vocab_size}")


def prepro_command(opts, vocab_size: int) -> list[str]:
    args = [sys.executable, os.path.join(ROOT, "prepro.py"), "--preset", opts.preset]
    if opts.data_dir:
        args += ["--data_dir", opts.data_dir]
    return args + ["--vocab_size", str(vocab_size), "--prepro_dir", prepro_dir(opts, vocab_size)]


def run(command: list[str]) -> tuple[int, str]:
    """Run one command, its output passing through as it comes (train.py's progress bars
    included); (exit status, its last stderr line)."""
    print("search: " + " ".join(command[1:]), flush=True)
    proc = subprocess.Popen(command, cwd=ROOT, stderr=subprocess.PIPE)
    tail = b""
    while chunk := proc.stderr.read1(1 << 16):
        sys.stderr.buffer.write(chunk)
        sys.stderr.flush()
        tail = (tail + chunk)[-4096:]
    lines = tail.decode("utf-8", "replace").replace("\r", "\n").strip().splitlines()
    return proc.wait(), lines[-1] if lines else ""


def result(logdir: str) -> dict:
    """A finished run's dev BLEU (its default model's, best.json) and its last step."""
    with open(os.path.join(logdir, "best.json"), encoding="utf-8") as f:
        bleu = json.load(f)["dev_bleu"]
    step = 0
    with open(os.path.join(logdir, "checkpoint"), encoding="utf-8") as f:
        for line in f:
            if line.startswith("model_checkpoint_path:"):
                step = int(line.split('"')[1].rsplit("-", 1)[1])
    return {"dev_bleu": bleu, "step": step}


def save_state(path: str, state: dict) -> None:
    files.atomic_write(path, json.dumps(state, indent=1) + "\n")


def load_state(opts, configs: list[dict]) -> dict:
    """OUT/search.json, or a new one; a search of other settings (preset, rungs, unit or
    configurations) is refused."""
    plan = {"preset": opts.preset, "rungs": opts.rungs, "unit": opts.unit, "configs": configs}
    path = os.path.join(opts.out, "search.json")
    return common.check_plan("search", path, plan, fresh={"runs": {}})


def run_rung(opts, state: dict, k: int, alive: list[int]) -> None:
    """Train every configuration in ``alive`` for rung k that has no result yet."""
    order = list(alive)
    random.Random(opts.seed * 1000 + k).shuffle(order)
    for i in order:
        name = f"c{i}_r{k}"
        if name in state["runs"]:
            continue
        settings = state["configs"][i]
        vocab = settings.get("vocab_size")
        if vocab and not os.path.exists(os.path.join(prepro_dir(opts, vocab), "hparams.json")):
            status, why = run(prepro_command(opts, vocab))
            if status:
                raise SystemExit(f"search: prepro.py for vocab_size {vocab} failed: {why}")
        status, why = run(train_command(opts, settings, name, opts.rungs[k]))
        if status in (130, 143):  # a signal: the same command resumes
            raise SystemExit("search: train.py stopped by a signal; run the same command again")
        logdir = os.path.join(opts.out, name)
        if status == 0 and os.path.exists(os.path.join(logdir, "best.json")):
            state["runs"][name] = result(logdir)
        else:
            state["runs"][name] = {"dev_bleu": None, "step": 0, "error": why}
        save_state(os.path.join(opts.out, "search.json"), state)


def survivors(opts, state: dict, k: int, alive: list[int]) -> list[int]:
    """The best ``keep`` fraction of rung k by dev BLEU (failed runs drop out)."""
    scored = [i for i in alive if state["runs"][f"c{i}_r{k}"]["dev_bleu"] is not None]
    scored.sort(key=lambda i: (-state["runs"][f"c{i}_r{k}"]["dev_bleu"], i))
    return scored[: max(1, math.ceil(opts.keep * len(alive)))]


def table(state: dict) -> str:
    """One row per configuration, those of the furthest rung first, by dev BLEU."""
    rungs, runs = state["rungs"], state["runs"]
    unit = "min" if state["unit"] == "minutes" else "steps"

    def reached(i):
        done = [k for k in range(len(rungs)) if f"c{i}_r{k}" in runs]
        last = done[-1] if done else -1
        bleu = runs[f"c{i}_r{last}"]["dev_bleu"] if done else None
        return last, -1.0 if bleu is None else bleu

    head = "| config | settings | " + " | ".join(f"dev BLEU, {r:g} {unit}" for r in rungs)
    lines = [head + " | step |", "|" + " --- |" * (len(rungs) + 3)]
    for i in sorted(range(len(state["configs"])), key=lambda i: tuple(-x for x in reached(i))):
        cells = []
        for k in range(len(rungs)):
            r = runs.get(f"c{i}_r{k}")
            cells.append(
                "" if r is None else "failed" if r["dev_bleu"] is None else f"{r['dev_bleu']:.2f}"
            )
        last = reached(i)[0]
        step = runs[f"c{i}_r{last}"]["step"] if last >= 0 else 0
        settings = ", ".join(f"{k}={v}" for k, v in state["configs"][i].items()) or "(preset)"
        lines.append(f"| c{i} | {settings} | " + " | ".join(cells) + f" | {step:,} |")
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    """The options; any other is passed on to train.py."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="multi30k")
    ap.add_argument("--data_dir", default="")
    ap.add_argument("--rungs", default="5,10,20", help="budget of each rung, comma-separated")
    ap.add_argument("--unit", choices=("minutes", "steps"), default="minutes")
    ap.add_argument("--configs", type=int, default=12, help="c0 (the preset) and the drawn ones")
    ap.add_argument("--keep", type=float, default=0.5, help="the fraction kept at each rung")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--space", default="", help="a JSON-lines file of settings, not drawn")
    ap.add_argument("--out", default="runs/search")
    return ap


def main(argv=None) -> None:
    ap = parser()
    opts, opts.train_args = ap.parse_known_args(argv)
    opts.rungs = [float(r) for r in opts.rungs.split(",")]
    if opts.configs < 1 or not 0 < opts.keep <= 1:
        ap.error("--configs must be at least 1 and --keep in (0, 1]")
    state = load_state(opts, configurations(opts))
    alive = list(range(len(state["configs"])))
    for k in range(len(opts.rungs)):
        run_rung(opts, state, k, alive)
        alive = survivors(opts, state, k, alive)
        what = "going on" if k + 1 < len(opts.rungs) else "best"
        names = ", ".join(f"c{i}" for i in alive)
        print(f"search: rung {k + 1} of {len(opts.rungs)} done; {what}: {names}")
    print(table(state))


if __name__ == "__main__":
    main()

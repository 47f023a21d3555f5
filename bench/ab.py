"""A/B of two training setups at an equal budget: two code trees (the defaults before and
after a change) or two sets of settings, run one after the other, interleaved, and
scored on dev, test greedy and test beam search.

    git worktree add /tmp/old HEAD~1          # the tree before the change
    python bench/ab.py --preset multi30k --data_dir data/multi30k \\
        --old_tree /tmp/old [--old_args "..."] [--new_args "..."] \\
        [--minutes 30 | --steps N] [--seeds 1,2] [--beam 4] [--arms old,new] [--out runs/ab]

Arms: ``old`` runs the code at ``--old_tree`` (default: this checkout) with
``--old_args``; ``new`` runs this checkout with ``--new_args``. Each arm preprocesses
once with its own code into OUT/<arm>/prepro, then for every seed, in the order old,
new, old, new, ... (a drift of the machine's speed over the run favours neither side):

    python train.py --preset P --data_dir D --prepro_dir OUT/<arm>/prepro --seed S
        --max_minutes M --logdir OUT/<arm>_s<S> --evaldir OUT/eval/<arm>_s<S> ARGS
    python eval.py --preset P --logdir OUT/<arm>_s<S> --results_dir OUT/greedy
    python eval.py --preset P --logdir OUT/<arm>_s<S> --results_dir OUT/beam
        --beam_size 4

Each eval decodes the run's default model (the best checkpoint or the winning average,
chosen on the dev subset). A run's figures are its dev BLEU (``best.json``: the dev
subset, as training scored it), test sacreBLEU greedy and with beam search, and the
greedy runaway outputs (hypotheses that reached their length limit). Nothing else
should run on the machine meanwhile: a wall-clock budget gives a slower run fewer steps.

A run whose two eval JSONs exist is not run again, a run whose train.py ended well
(OUT/logs/<run>.trained) is not trained again, and train.py resumes a run that was cut
off (``max_minutes`` counts over all starts), so the same command goes on where it
stopped; OUT/ab.json records the plan, and another plan for the same OUT is refused.
The end prints one row per run, the mean of each arm and new minus old.
``--arms new`` runs (and prints) one arm alone: the absolute figure of a setup on another
machine; the same OUT later runs the other arm beside it, as the plan is the same.
"""

import argparse
import json
import os
import shlex
import statistics
import sys
import time

import common

from transformer_tf2.utils import files  # no TensorFlow: the benchmark itself stays light

ROOT = common.ROOT
ARMS = ("old", "new")


def tree_of(opts, arm: str) -> str:
    return os.path.abspath(opts.old_tree) if arm == "old" and opts.old_tree else ROOT


def shared_args(opts, arm: str) -> list[str]:
    """The options every stage of an arm shares: preset, data, its prepro folder."""
    args = ["--preset", opts.preset]
    if opts.data_dir:
        args += ["--data_dir", os.path.abspath(opts.data_dir)]
    return args + ["--prepro_dir", os.path.join(opts.out, arm, "prepro")]


def prepro_command(opts, arm: str) -> list[str]:
    return [sys.executable, os.path.join(tree_of(opts, arm), "prepro.py"), *shared_args(opts, arm)]


def train_command(opts, arm: str, seed: int) -> list[str]:
    name = f"{arm}_s{seed}"
    budget = (
        ["--max_minutes", f"{opts.minutes:g}"] if opts.minutes else ["--max_steps", str(opts.steps)]
    )
    extra = shlex.split(opts.old_args if arm == "old" else opts.new_args)
    return [
        sys.executable, os.path.join(tree_of(opts, arm), "train.py"), *shared_args(opts, arm),
        "--seed", str(seed), *budget,
        "--logdir", os.path.join(opts.out, name), "--evaldir", os.path.join(opts.out, "eval", name),
        *extra,
    ]  # fmt: skip


def eval_command(opts, arm: str, seed: int, beam: bool) -> list[str]:
    out = [
        sys.executable, os.path.join(tree_of(opts, arm), "eval.py"), "--preset", opts.preset,
        "--logdir", os.path.join(opts.out, f"{arm}_s{seed}"),
        "--results_dir", os.path.join(opts.out, "beam" if beam else "greedy"),
    ]  # fmt: skip
    return out + (["--beam_size", str(opts.beam)] if beam else [])


def eval_json(opts, arm: str, seed: int, beam: bool) -> dict | None:
    """The eval JSON of one run (eval.py names it ``<run>_<checkpoint>.json``), or None."""
    folder = os.path.join(opts.out, "beam" if beam else "greedy")
    prefix = f"{arm}_s{seed}_"
    if not os.path.isdir(folder):
        return None
    for name in sorted(os.listdir(folder)):
        if name.startswith(prefix) and name.endswith(".json"):
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                return json.load(f)
    return None


def figures(opts, arm: str, seed: int) -> dict | None:
    """dev BLEU, test greedy and beam sacreBLEU, greedy runaways and the decoded step of
    a finished run; None while a stage is missing."""
    greedy, beam = eval_json(opts, arm, seed, False), eval_json(opts, arm, seed, True)
    if greedy is None or beam is None:
        return None
    with open(os.path.join(opts.out, f"{arm}_s{seed}", "best.json"), encoding="utf-8") as f:
        dev = json.load(f)["dev_bleu"]
    checkpoint = os.path.basename(greedy.get("decoding", {}).get("checkpoint", ""))
    return {
        "dev": dev,
        "greedy": greedy["sacrebleu"],
        "beam": beam["sacrebleu"],
        "runaways": greedy.get("runaways", 0),
        "model": checkpoint,
    }


def run(command: list[str], log: str, cwd: str) -> None:
    """One stage in ``cwd`` (the arm's tree), its output appended to ``log``."""
    common.run_logged("ab", command, log, cwd)


def check_plan(opts) -> None:
    plan = {
        k: getattr(opts, k)
        for k in ("preset", "old_tree", "old_args", "new_args", "minutes", "steps", "beam")
    }
    plan["old_tree"] = tree_of(opts, "old")
    common.check_plan("ab", os.path.join(opts.out, "ab.json"), plan)


def table(rows: list[tuple[str, int, dict]]) -> str:
    """One row per run, then each arm's mean and new minus old."""
    head = "| run | dev BLEU | test greedy | test beam | runaways (greedy) | model |"
    lines = [head, "| --- | ---: | ---: | ---: | ---: | --- |"]
    for arm, seed, r in rows:
        lines.append(
            f"| {arm}, seed {seed} | {r['dev']:.2f} | {r['greedy']:.2f} | {r['beam']:.2f} "
            f"| {r['runaways']} | {r['model']} |"
        )
    means = {}
    for arm in ARMS:
        mine = [r for a, _, r in rows if a == arm]
        if mine:
            means[arm] = {k: statistics.mean(r[k] for r in mine) for k in ("dev", "greedy", "beam")}
            m = means[arm]
            lines.append(
                f"| {arm}, mean | {m['dev']:.2f} | {m['greedy']:.2f} | {m['beam']:.2f} | | |"
            )
    if len(means) == 2:
        d = {k: means["new"][k] - means["old"][k] for k in ("dev", "greedy", "beam")}
        lines.append(f"| new − old | {d['dev']:+.2f} | {d['greedy']:+.2f} | {d['beam']:+.2f} | | |")
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="multi30k")
    ap.add_argument("--data_dir", default="")
    ap.add_argument("--old_tree", default="", help="a checkout of the old code (default: this)")
    ap.add_argument("--old_args", default="", help="train.py settings of the old arm")
    ap.add_argument("--new_args", default="", help="train.py settings of the new arm")
    ap.add_argument("--minutes", type=float, default=0.0, help="training wall time per run (30)")
    ap.add_argument("--steps", type=int, default=0, help="or training steps per run")
    ap.add_argument("--seeds", default="1,2")
    ap.add_argument("--beam", type=int, default=4, help="the beam size of the second eval")
    ap.add_argument("--arms", default=",".join(ARMS), help="the arms to run: old,new, old or new")
    ap.add_argument("--out", default=os.path.join("runs", "ab"))
    return ap


def main(argv: list[str] | None = None) -> None:
    ap = parser()
    opts = ap.parse_args(argv)
    asked = {a.strip() for a in opts.arms.split(",") if a.strip()}
    if not asked or asked - set(ARMS):
        ap.error(f"--arms takes old, new or both, not {opts.arms!r}")
    arms = [a for a in ARMS if a in asked]  # always in the order old, new
    if opts.minutes and opts.steps:
        ap.error("--minutes and --steps are two budgets; give one")
    if opts.minutes < 0 or opts.steps < 0 or opts.beam < 2:
        ap.error("--minutes and --steps must be positive and --beam at least 2")
    opts.minutes = opts.minutes or (0.0 if opts.steps else 30.0)
    try:
        seeds = [int(s) for s in opts.seeds.split(",") if s.strip()]
    except ValueError:
        ap.error(f"--seeds takes integers separated by commas, not {opts.seeds!r}")
    for arm in arms:
        if not os.path.exists(os.path.join(tree_of(opts, arm), "train.py")):
            ap.error(f"{tree_of(opts, arm)} has no train.py; --old_tree names a checkout")
    opts.out = os.path.abspath(opts.out)
    os.makedirs(os.path.join(opts.out, "logs"), exist_ok=True)
    check_plan(opts)
    rows = []
    for seed in seeds:
        for arm in arms:
            done = figures(opts, arm, seed)
            if done is None:
                tree, log = tree_of(opts, arm), os.path.join(opts.out, "logs", f"{arm}_s{seed}.log")
                if not os.path.exists(os.path.join(opts.out, arm, "prepro", "hparams.json")):
                    run(prepro_command(opts, arm), log, tree)
                t0 = time.time()
                print(f"ab: {arm}, seed {seed}: training and eval ...", flush=True)
                trained = os.path.join(opts.out, "logs", f"{arm}_s{seed}.trained")
                if not os.path.exists(trained):  # train.py resumes a run that was cut off
                    run(train_command(opts, arm, seed), log, tree)
                    files.atomic_write(trained, "train.py ended with exit status 0\n")
                for beam in (False, True):
                    if eval_json(opts, arm, seed, beam) is None:
                        run(eval_command(opts, arm, seed, beam), log, tree)
                print(f"ab: {arm}, seed {seed}: done in {(time.time() - t0) / 60:.1f} min")
                done = figures(opts, arm, seed)
                if done is None:
                    sys.exit(f"ab: {arm}, seed {seed}: no eval JSON in {opts.out}")
            rows.append((arm, seed, done))
    print(table(rows))


if __name__ == "__main__":
    main()

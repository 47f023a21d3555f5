"""The first training losses of a run, bit for bit: a check that a change moved code
without changing arithmetic.

    python prepro.py                                       # the demo data, once
    python bench/first_losses.py --steps 100 --out /tmp/new.json
    python bench/first_losses.py --steps 100 --out /tmp/old.json --tree /tmp/old
    python bench/first_losses.py --compare /tmp/old.json /tmp/new.json

    # a document-memory run (its own corpus: prepro.py with the same --set values first)
    python prepro.py --demo_documents 0.5 --data_dir data/doc --prepro_dir prepro/doc
    python bench/first_losses.py --steps 100 --out /tmp/doc.json --set demo_documents=0.5 \
        --set data_dir=data/doc --set prepro_dir=prepro/doc --set memory_sentences=1

With TensorFlow's op determinism on, the run's Trainer trains on the first ``--steps``
batches of epoch 0 of the chosen preset and writes each batch's label-smoothed loss per
target token (float32 sum over float32 count); ``--set KEY=VALUE`` (repeatable) changes a
hyperparameter of the preset, e.g. a document memory. ``--tree PATH`` runs another
checkout of the project (``git worktree add /tmp/old HEAD~1``) on this checkout's
preprocessed data.
``--compare A B`` prints whether two such files are identical and the largest difference.
"""

import argparse
import json
import sys

import common


def first_losses(preset: str, steps: int, overrides: dict | None = None) -> list[float]:
    import keras
    import numpy as np
    import tensorflow as tf

    tf.config.experimental.enable_op_determinism()
    import train
    from train_throughput import project_setup_devices
    from transformer_tf2.config import hparams
    from transformer_tf2.data import data_load

    setup_devices = project_setup_devices()
    hp = hparams.apply(hparams.preset(preset), overrides or {})
    tok = data_load.load_tokenizer(hp)
    strategy, precision = setup_devices(hp)
    keras.utils.set_random_seed(hp.seed)
    data = data_load.TrainData(hp)
    trainer = train.Trainer(hp, tok, strategy, precision)
    losses = []
    for batch in data.dataset(0):  # with a document memory, the context too
        stats, _ = trainer.train_batch(*batch)
        losses.append(float(np.float32(stats[0]) / np.float32(stats[2])))
        if len(losses) == steps:
            break
    return losses


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="demo")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--out", default="")
    ap.add_argument("--tree", default="", help="another checkout of the project to run")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a hyperparameter over the preset's (repeatable)",
    )
    ap.add_argument("--compare", nargs=2, metavar=("A", "B"))
    return ap


def main() -> None:
    args = parser().parse_args()
    if args.compare:
        a, b = (json.load(open(path)) for path in args.compare)
        diff = max((abs(x - y) for x, y in zip(a, b)), default=float("nan"))
        same = a == b
        print(f"{len(a)} and {len(b)} losses; identical: {same}; largest difference {diff:.3g}")
        sys.exit(0 if same else 1)
    if args.tree:
        common.use_tree(args.tree)
    overrides = dict(item.split("=", 1) for item in args.set)
    losses = first_losses(args.preset, args.steps, overrides)
    text = json.dumps(losses)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(f"{len(losses)} losses: first {losses[:3]}, last {losses[-3:]}")


if __name__ == "__main__":
    main()

"""Preprocessing speed and memory on 200k sentence pairs (issue: < 1 min, < 2 GB on 2 cores).

    python bench/prepro_speed.py [--multi30k data/multi30k] [--pairs 200000]

The corpus is Multi30k train repeated to --pairs pairs when a Multi30k folder is given,
else the synthetic demo corpus of that size. Each vocabulary type runs in a fresh child
process so that its peak RSS is its own; the table prints seconds, peak RSS and their
ratios to the budgets (ratio < 1 meets the bar).
"""

import argparse
import gzip
import json
import os
import resource
import sys
import tempfile
import time

import common

BUDGET_S, BUDGET_MB = 60.0, 2048.0


def make_corpus(folder: str, pairs: int, multi30k: str) -> None:
    os.makedirs(folder, exist_ok=True)
    if multi30k:
        for lang in ("de", "en"):
            with gzip.open(os.path.join(multi30k, f"train.{lang}.gz"), "rt", encoding="utf-8") as f:
                lines = f.read().splitlines()
            reps = -(-pairs // len(lines))
            text = "\n".join((lines * reps)[:pairs]) + "\n"
            for stem in ("train", "val", "test_2016_flickr"):
                part = text if stem == "train" else "\n".join(lines[:1000]) + "\n"
                with open(os.path.join(folder, f"{stem}.{lang}"), "w", encoding="utf-8") as g:
                    g.write(part)
    else:
        from demo import corpus as demo_corpus

        demo_corpus.write_demo_corpus(folder, seed=1, n_train=pairs)


def child(args) -> None:
    import prepro
    from transformer_tf2.config import hparams

    hp = hparams.apply(hparams.Hparams(), json.loads(args.child))
    t0 = time.time()
    prepro.preprocess(hp, force=True)
    seconds = time.time() - t0
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    common.emit({"seconds": seconds, "peak_mb": peak_mb})


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=200_000)
    ap.add_argument("--multi30k", default="", help="a Multi30k folder (else the demo corpus)")
    ap.add_argument("--child", default="", help="internal: one vocabulary's run")
    return ap


def main() -> None:
    args = parser().parse_args()
    if args.child:
        return child(args)
    tmp = tempfile.mkdtemp(prefix="bench_prepro_")
    data = os.path.join(tmp, "data")
    make_corpus(data, args.pairs, args.multi30k)
    corpus = "parallel" if args.multi30k else "iwslt2016"
    print(f"{args.pairs:,} pairs ({'Multi30k repeated' if args.multi30k else 'demo corpus'})")
    print(f"{'vocabulary':<22}{'seconds':>9}{'peak MB':>9}{'s/budget':>10}{'MB/budget':>11}")
    for name, extra in (
        ("bpe 8000 (joint)", dict(vocab_type="bpe", vocab_size=8000)),
        ("word (legacy)", dict(vocab_type="word", min_cnt=2)),
    ):
        hp = dict(
            corpus=corpus, data_dir=data, prepro_dir=os.path.join(tmp, name.split()[0]), **extra
        )
        r = common.run_child([sys.executable, __file__, "--child", json.dumps(hp)], "bench")
        print(
            f"{name:<22}{r['seconds']:>9.1f}{r['peak_mb']:>9.0f}"
            f"{r['seconds'] / BUDGET_S:>10.2f}{r['peak_mb'] / BUDGET_MB:>11.2f}"
        )


if __name__ == "__main__":
    main()

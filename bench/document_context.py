"""Document context at inference: the encoder states of the earlier sentences reused
(Transformer-XL's recurrence) against recomputed for every sentence, in one run.

    python prepro.py                                      # the demo, with its talks
    python train.py --position xl --memory_sentences 1 --logdir log/demo_memory
    python bench/document_context.py --logdir log/demo_memory [--sents 500] [--repeats 3]

One process, one trained model with ``memory_sentences`` (M), the run's test split
read in document order (prepro's talks), greedy decoding, batches of eval_batch_size
lanes. Every row is the median of ``--repeats`` timed passes after one untimed pass:
* reuse: each lane keeps the encoder-layer inputs of its last M sentences and the next
  sentence attends to them (decoding.Translator; documents cut into pieces so that the
  batch stays full, a piece's first window recomputed);
* recompute: every sentence's context encoded again from its L M sentences before
  (chunk = 1: what training does for each pair).
Prints source tokens/s and sentences/s of both, their ratio, and whether the two give
the same translations (they should, up to float rounding in near ties).
"""

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--logdir", default="log/demo_memory")
    parser.add_argument("--sents", type=int, default=500, help="test sentences (0: all)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import data_load
    import decoding

    hp, tok, model, path = decoding.load_run(args.logdir, {}, who="bench")
    if not model.memory_sentences:
        sys.exit(f"{args.logdir} holds a model without memory_sentences: train one first")
    sources, _ = data_load.read_raw(hp, "test")
    docs = data_load.load_corpus(hp, "test").docs
    n = len(sources) if args.sents <= 0 else min(args.sents, len(sources))
    sources, docs = sources[:n], docs[:n]
    ids = tok.encode_src(sources)
    tokens = sum(len(x) + 1 for x in ids)
    print(
        f"bench: {path}: position={hp.position}, memory_sentences={hp.memory_sentences}, "
        f"num_blocks={hp.num_blocks}, d_model={hp.d_model}; {n} test sentences in "
        f"{len(decoding.document_runs(docs))} documents, {tokens} source tokens, "
        f"eval_batch_size={hp.eval_batch_size}"
    )
    rows = {"reuse": None, "recompute": 1}
    translators = {name: decoding.Translator(model, tok, hp, chunk) for name, chunk in rows.items()}
    outputs, seconds = {}, {name: [] for name in rows}
    for name, tr in translators.items():  # one untimed pass each: the traces
        outputs[name] = tr.translate(sources, docs)
    for _ in range(args.repeats):  # interleaved
        for name, tr in translators.items():
            t0 = time.perf_counter()
            tr.translate(sources, docs)
            seconds[name].append(time.perf_counter() - t0)
    median = {name: statistics.median(s) for name, s in seconds.items()}
    for name in rows:
        print(
            f"{name:>9}: {tokens / median[name]:8.1f} source tokens/s, "
            f"{n / median[name]:6.1f} sentences/s (median of {args.repeats}: "
            + ", ".join(f"{s:.2f}" for s in seconds[name])
            + " s)"
        )
    same = sum(a == b for a, b in zip(outputs["reuse"], outputs["recompute"]))
    print(
        f"reuse / recompute: {median['recompute'] / median['reuse']:.2f}x; "
        f"identical translations: {same} of {n}"
    )


if __name__ == "__main__":
    main()

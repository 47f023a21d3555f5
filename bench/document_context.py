"""Document context: at inference, the encoder states of the earlier sentences reused
(Transformer-XL's recurrence) against recomputed for every sentence; in training, what
carrying the context costs; each in one run.

    python prepro.py                                      # the demo, with its talks
    python train.py --position xl --memory_sentences 1 --logdir log/demo_memory
    python bench/document_context.py --logdir log/demo_memory [--sents 500] [--repeats 3]
    python bench/document_context.py --train --logdir log/demo_memory [--steps 60]

One process, one trained model with ``memory_sentences`` (M), the run's test split
read in document order (prepro's talks), greedy decoding, batches of eval_batch_size
lanes. Every row is the median of ``--repeats`` timed passes after one untimed pass:
* reuse: each lane keeps the encoder-layer inputs of its last M sentences and the next
  sentence attends to them (translator.Translator; documents cut into pieces so that the
  batch stays full, a piece's first window recomputed);
* recompute: every sentence's context encoded again from its L M sentences before
  (chunk = 1: what training does for each pair), and with a decoder memory
  (``target_memory_sentences``) the decoder states of the lane's own earlier
  translations too (documents then stay whole in both rows);
and, for an encoder memory alone, both again without the decoder (encoder only: where the
two differ).
Prints source tokens/s and sentences/s of each, the ratios, and whether reuse and
recompute give the same translations (they should, up to float rounding in near ties).

``--train``: the run's settings without memory and with the run's memory_sentences and
target_memory_sentences, two fresh Trainers on the same first ``--steps`` batches of
epoch 0 (after 5 untimed ones), taken in turn batch by batch; prints the median target
tokens/s of each and their ratio.
"""

import argparse
import os
import sys
import time

import common


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--logdir", default="log/demo_memory")
    ap.add_argument("--sents", type=int, default=500, help="test sentences (0: all)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--train", action="store_true", help="the training cost instead")
    ap.add_argument("--steps", type=int, default=60)
    return ap


def main() -> None:
    args = parser().parse_args()
    if args.train:
        train_cost(args.logdir, args.steps)
        return

    from transformer_tf2.data import data_load
    from transformer_tf2.decoding import document_decoding, translator
    from transformer_tf2.models import checkpoints

    hp, tok, model, path = checkpoints.load_run(args.logdir, {}, who="bench")
    if not model.reads_documents:
        sys.exit(f"{args.logdir} holds a model without document memory: train one first")
    sources, _ = data_load.read_raw(hp, "test")
    docs = data_load.load_corpus(hp, "test").docs
    n = len(sources) if args.sents <= 0 else min(args.sents, len(sources))
    sources, docs = sources[:n], docs[:n]
    ids = tok.encode_src(sources)
    tokens = sum(len(x) + 1 for x in ids)
    print(
        f"bench: {path}: position={hp.position}, memory_sentences={hp.memory_sentences}, "
        f"target_memory_sentences={hp.target_memory_sentences}, num_blocks={hp.num_blocks}, "
        f"d_model={hp.d_model}; {n} test sentences in "
        f"{len(document_decoding.document_runs(docs))} documents, {tokens} source tokens, "
        f"eval_batch_size={hp.eval_batch_size}"
    )
    rows = {"reuse": None, "recompute": 1}
    translators = {
        name: translator.Translator(model, tok, hp, chunk) for name, chunk in rows.items()
    }
    for name, chunk in rows.items():  # the same passes without the decoder: the encoder's share
        if model.target_memory_sentences:
            break  # (a decoder memory reads the translations: no encoder-only pass)
        tr = translator.Translator(model, tok, hp, chunk)
        tr.documents.decode = encoder_only(model)
        translators[f"{name}, encoder only"] = tr
    outputs, seconds = {}, {name: [] for name in translators}
    for name, tr in translators.items():  # one untimed pass each: the traces
        outputs[name] = tr.translate(sources, docs)
    for _ in range(args.repeats):  # interleaved
        for name, tr in translators.items():
            t0 = time.perf_counter()
            tr.translate(sources, docs)
            seconds[name].append(time.perf_counter() - t0)
    median = {name: common.median(s) for name, s in seconds.items()}
    for name in translators:
        print(
            f"{name:>23}: {tokens / median[name]:8.1f} source tokens/s, "
            f"{n / median[name]:6.1f} sentences/s (median of {args.repeats}: "
            + ", ".join(f"{s:.2f}" for s in seconds[name])
            + " s)"
        )
    same = sum(a == b for a, b in zip(outputs["reuse"], outputs["recompute"]))
    enc = ""
    if "reuse, encoder only" in median:
        ratio = median["recompute, encoder only"] / median["reuse, encoder only"]
        enc = f", {ratio:.2f}x encoding alone"
    print(
        f"reuse / recompute: {median['recompute'] / median['reuse']:.2f}x translating{enc}; "
        f"identical translations: {same} of {n}"
    )


def encoder_only(model):
    """A stand-in for document_decoding.document_decoder that encodes in context and returns the
    states, with a one-token "translation": the lanes' passes without the decoder."""
    import tensorflow as tf

    from transformer_tf2.decoding import document_decoding

    def encode(src, extra, states, mask, tgt_states, tgt_mask):
        inputs = document_decoding.encode_in_window(model, src, states, mask)[1]
        return tf.zeros_like(src[:, :1]), inputs, tf.zeros_like(tgt_states[:, :, :1])

    spec = document_decoding.document_spec(model)
    return tf.function(encode, input_signature=spec, autograph=False)


def train_cost(logdir: str, steps: int) -> None:
    import keras
    import numpy as np

    import train
    from transformer_tf2.config import hparams
    from transformer_tf2.data import data_load
    from transformer_tf2.utils import devices

    hp = hparams.load(os.path.join(logdir, "hparams.json"))
    tok = data_load.load_tokenizer(hp)
    trainers, batches = {}, {}
    for m in ((0, 0), (hp.memory_sentences, hp.target_memory_sentences)):
        run = hparams.apply(hp, {"memory_sentences": m[0], "target_memory_sentences": m[1]})
        strategy, precision = devices.setup_devices(run)
        keras.utils.set_random_seed(run.seed)
        trainers[m] = train.Trainer(run, tok, strategy, precision)
        data = data_load.TrainData(run)
        batches[m] = [b for b in data.dataset(0, 0, data.batches(0)[: steps + 5])]
    seconds = {m: [] for m in trainers}
    for i in range(steps + 5):
        for m, trainer in trainers.items():
            t0 = time.perf_counter()
            trainer.train_batch(*batches[m][i])  # numbers: waits for the step
            if i >= 5:
                seconds[m].append(time.perf_counter() - t0)
    tokens = [float(np.sum(b[2].numpy() != 0)) for b in batches[(0, 0)][5:]]
    rate = {m: common.median(np.array(tokens) / np.array(s)) for m, s in seconds.items()}
    print(
        f"bench: {hp.position}, num_blocks={hp.num_blocks}, d_model={hp.d_model}, "
        f"tokens_per_batch={hp.tokens_per_batch}, precision={precision}; {steps} batches"
    )
    for m, r in rate.items():
        print(
            f"memory_sentences={m[0]}, target_memory_sentences={m[1]}: {r:,.0f} target "
            "tokens/s (median over the batches)"
        )
    m = (hp.memory_sentences, hp.target_memory_sentences)
    print(f"memory {m} / (0, 0): {rate[m] / rate[(0, 0)]:.2f}x the tokens/s")


if __name__ == "__main__":
    main()

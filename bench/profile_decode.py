"""Where a decoding step's time goes, one sentence at a time (translate.py's case): the
ops a step runs, its time, the share of that time the ops' own arithmetic takes, and
CTranslate2's time per token on the same sentences.

    python bench/profile_decode.py --preset multi30k --logdir RUN [--sents 50]
        [--beams 1,4] [--repeats 200] [--ctranslate2 false]

For each beam size (1: greedy), as translate.py decodes (translator.decoding_process:
one stream, no Grappler; length penalty 0.6 for a beam):

* per token: the first ``--sents`` test sentences decoded one at a time (after an
  untimed pass), the wall time over the tokens written (</S> included);
* the step alone: one step of the loop (greedy: the decoder's step and its argmax; a
  beam: bench/decode.py's "whole step", decoder, search and cache reorder) as its own
  tf.function on one sentence, the cache filled to 10 positions, median of ``--repeats``
  calls, and the ops its graph holds (every node of it and of the functions it calls,
  then those that compute: not Const, Identity, NoOp, the arguments and the reads of
  the weights);
* dispatch: the same step of a model of the run's kind and depth, the same vocabulary,
  at the smallest width (d_model = d_ff = 2 x num_heads: its arithmetic next to nothing),
  so its time is what the ops cost to run at all; the arithmetic is the rest of the
  step's time. Per op: the dispatch time over the step's ops.

With CTranslate2 (``pip install -e ".[bench]"``; the run's model must convert:
ctranslate.py), its float32 and int8 conversions decode the same sentences one at a
time with 1 thread and with every core, the better of the two a row: its wall per
output token (</S> counted), what that engine's step costs as far as it can be seen
from outside.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time

import numpy as np

import common

from transformer_tf2.config import cli

OPTIONS = {"sents": 50, "beams": "1,4", "repeats": 200, "ctranslate2": True}
POSITION = 10  # the cache's length when the step alone is timed
NOT_COMPUTING = ("Const", "Identity", "NoOp", "_Arg", "_Retval", "ReadVariableOp", "Placeholder")


def parser(preset: str = "demo"):
    """The command line's parser (``--help``), built without TensorFlow."""
    return common.hparams_parser(OPTIONS, preset)


def graph_ops(graph_def) -> tuple[int, int]:
    """(every node, the computing nodes) of a GraphDef and of its function library."""
    nodes = list(graph_def.node)
    for fn in graph_def.library.function:
        nodes += list(fn.node_def)
    calls = {fn.signature.name for fn in graph_def.library.function}
    computing = [n for n in nodes if n.op not in NOT_COMPUTING and n.op not in calls]
    computing = [n for n in computing if n.op not in ("PartitionedCall", "StatefulPartitionedCall")]
    return len(nodes), len(computing)


def step_parts(model, src, beam: int):
    """The step of a decoder of ``beam`` on the batch ``src``: a function of no arguments,
    as bench/decode.py's profile times it."""
    import tensorflow as tf

    from transformer_tf2.data import data_load
    from transformer_tf2.decoding import beam_search

    n = src.shape[0]
    rows = n * beam
    memory, mask = model.encode(src)
    cache = model.init_cache(tf.repeat(memory, beam, axis=0), tf.repeat(mask, beam, axis=0))
    tokens = tf.fill((rows,), data_load.BOS_ID)
    for _ in range(POSITION):
        _, cache = model.decode_step(tokens, cache)
    if beam == 1:
        return lambda: tf.argmax(model.decode_step(tokens, cache)[0], -1)
    # the state of bench/decode.py's profile_beam: every slot live
    longest = POSITION + 20
    alive = tf.tile(tf.constant([[0.0] + [beam_search.NEG] * (beam - 1)]), (n, 1))
    seqs = tf.zeros((n, beam, longest), tf.int32)
    live = tf.range(rows)
    search = beam_search.BeamState(
        tf.range(n), tf.fill((n,), longest), live, tokens, seqs, alive, seqs, alive
    )
    i = tf.constant(POSITION)

    def whole():
        step_logits, new_cache = model.decode_step(tokens, cache)
        state, cache_rows = beam_search.beam_step(i, step_logits, search, 0.6)
        return model.select_rows(new_cache, cache_rows)["layers"][0]["k"], state.alive_seq

    return whole


def time_step(fn, repeats: int = 200) -> tuple[float, int, int]:
    """(median ms of a call, every op of its graph, the computing ones) of ``fn`` traced
    as the decoders are (bench/decode.py's time_parts: fast_ops.decoding_function)."""
    import tensorflow as tf

    import decode
    from transformer_tf2.kernels import fast_ops

    traced = fast_ops.decoding_function(lambda: tf.nest.flatten(fn()))
    every, computing = graph_ops(traced.get_concrete_function().graph.as_graph_def())
    ((_, ms),) = decode.time_parts({"step": fn}, repeats)
    return ms, every, computing


def narrowest(hp, model_vocab: tuple[int, int]):
    """A model of the run's kind and depth and vocabulary at the smallest width, random
    weights: the same ops, next to no arithmetic."""
    from transformer_tf2.models import model as model_lib

    width = 2 * hp.num_heads
    small = dataclasses.replace(hp, d_model=width, d_ff=width)
    return model_lib.Transformer.from_hparams(small, *model_vocab)


def per_token(model, hp, batches, beam: int) -> tuple[float, int]:
    """(wall ms per output token, tokens) of our decoder of ``beam`` on ``batches``."""
    import tensorflow as tf

    from transformer_tf2.data import data_load
    from transformer_tf2.decoding import beam_search, greedy_search

    extra = tf.constant(hp.max_len_extra, tf.int32)
    if beam == 1:
        fn = greedy_search.greedy_decoder(model)
    else:
        decoder = beam_search.beam_decoder(model, beam, 0.6)

        def fn(b, e):
            return decoder(b, e)[0][:, 0]

    def run():
        return [fn(b, extra).numpy() for b in batches]

    run()
    t0 = time.perf_counter()
    outs = run()
    wall = time.perf_counter() - t0
    tokens = int(sum((o != data_load.PAD_ID).sum() for o in outs))
    return 1000 * wall / tokens, tokens


def ctranslate2_per_token(model, tok, hp, batches, beams, out_dir: str) -> list[dict]:
    """CTranslate2's wall per output token (</S> counted) on the same batches, float32
    and int8, the better of 1 thread and every core."""
    import ctranslate2

    from transformer_tf2.export import ctranslate

    cores = os.cpu_count() or 1
    sources = [
        ctranslate.source_tokens(tok, [row[row > 0][:-1] for row in b.numpy()]) for b in batches
    ]
    limits = [int((b.numpy() > 0).sum(axis=1).max()) + hp.max_len_extra for b in batches]
    rows = []
    for weights in ("float32", "int8"):
        path = os.path.join(out_dir, weights)
        ctranslate.convert(model, tok, path, "none" if weights == "float32" else weights)
        for beam in beams:
            best = None
            for threads in sorted({1, cores}):
                translator = ctranslate2.Translator(
                    path, device="cpu", inter_threads=1, intra_threads=threads
                )

                def run():
                    return [
                        translator.translate_batch(
                            src,
                            beam_size=beam,
                            length_penalty=0.6 if beam > 1 else 0,
                            max_decoding_length=lim,
                        )
                        for src, lim in zip(sources, limits)
                    ]

                run()
                t0 = time.perf_counter()
                results = run()
                wall = time.perf_counter() - t0
                tokens = sum(
                    min(len(r.hypotheses[0]) + 1, lim)
                    for res, lim in zip(results, limits)
                    for r in res
                )
                row = dict(weights=weights, beam=beam, threads=threads, tokens=tokens)
                row["ms"] = 1000 * wall / tokens
                if best is None or row["ms"] < best["ms"]:
                    best = row
            rows.append(best)
    return rows


def main() -> None:
    from transformer_tf2.data import data_load
    from transformer_tf2.decoding import translator
    from transformer_tf2.models import checkpoints

    hp, opts = cli.parse_args(extra=OPTIONS)
    hp, tok, model, path = checkpoints.load_run(hp.logdir, {}, who="bench")
    translator.decoding_process(hp, 1)
    import tensorflow as tf

    src_txt, _ = data_load.read_raw(hp, "test")
    ids = tok.encode_src(src_txt[: opts["sents"]])
    batches = [tf.constant(b) for _, b in data_load.eval_batches(ids, 1, 1 << 30)]
    beams = [int(b) for b in str(opts["beams"]).split(",")]
    vocab = (model.config.src_vocab_size, model.config.tgt_vocab_size)
    small = narrowest(hp, vocab)
    one = tf.constant(np.asarray(batches[len(batches) // 2]))
    print(
        f"model {path}: {model.count_params():,} parameters; {len(ids)} test sentences one "
        f"at a time; {os.cpu_count()} cores"
    )
    for beam in beams:
        name = "greedy" if beam == 1 else f"beam {beam}"
        ms_token, tokens = per_token(model, hp, batches, beam)
        ms, every, computing = time_step(step_parts(model, one, beam), opts["repeats"])
        ms_small, _, _ = time_step(step_parts(small, one, beam), opts["repeats"])
        print(
            f"{name}: {ms_token:.3f} ms per token ({tokens} tokens); the step alone "
            f"{ms:.3f} ms, {every} ops ({computing} computing); at the smallest width "
            f"{ms_small:.3f} ms: dispatch {100 * min(ms_small / ms, 1):.0f}% of the step, "
            f"arithmetic {100 * max(1 - ms_small / ms, 0):.0f}%, "
            f"{1000 * ms_small / computing:.1f} us per computing op"
        )
    if not opts["ctranslate2"]:
        return
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        print("ctranslate2 is not installed (pip install -e '.[bench]'): no CTranslate2 rows")
        return
    with tempfile.TemporaryDirectory() as out_dir:
        for row in ctranslate2_per_token(model, tok, hp, batches, beams, out_dir):
            name = "greedy" if row["beam"] == 1 else f"beam {row['beam']}"
            print(
                f"CTranslate2 {name}, {row['weights']}, {row['threads']} thread(s): "
                f"{row['ms']:.3f} ms per token ({row['tokens']} tokens)"
            )


if __name__ == "__main__":
    cli.run_main(main)

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
* the encoder and the cache's start (the cross-attention keys/values of every decoder
  layer), what a decoder runs once per sentence before its first step: its wall per
  sentence, and its share of a sentence's greedy decoding;
* dispatch: the same step of a model of the run's kind and depth, the same vocabulary,
  at the smallest width (d_model = d_ff = 2 x num_heads: its arithmetic next to nothing),
  so its time is what the ops cost to run at all; the arithmetic is the rest of the
  step's time. Per op: the dispatch time over the step's ops.

The parts of one greedy and one beam step that ``bench/decode.py --profile`` times at
its batch size (:func:`profile_step`, :func:`profile_beam`) live here too.

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


def profile_step(model, src, steps_done: int, repeats: int = 200) -> list[tuple[str, float]]:
    """Where one greedy decoding step's time goes: each part of ``model.decode_step`` run
    alone as a tf.function on a cache filled to ``steps_done`` positions of the batch
    ``src`` (N, T1), in milliseconds (median of ``repeats`` calls; each part returns one
    number of its result, so that no copy to numpy is timed)."""
    import tensorflow as tf

    from transformer_tf2.data import data_load

    memory, mask = model.encode(src)
    cache = model.init_cache(memory, mask)
    tokens = tf.fill((src.shape[0],), data_load.BOS_ID)
    for _ in range(steps_done):
        _, cache = model.decode_step(tokens, cache)
    step = cache["step"]
    layer, layer_cache = model.decoder_layers[0], cache["layers"][0]
    x = tf.random.normal((src.shape[0], 1, model.d_model))
    attn = layer.self_attn

    def append(c):
        k, v = attn.keys_values(x, offset=step)
        return tf.concat([c["k"], k], axis=2), tf.concat([c["v"], v], axis=2)

    parts = {
        "whole step (every layer, logits)": lambda: model.decode_step(tokens, cache)[0],
        "one decoder layer": lambda: layer.step(x, layer_cache, step, mask)[0],
        "  self-attention: q/k/v of the new position": lambda: attn.keys_values(x, step),
        "  self-attention: appending k, v to the cache": lambda: append(layer_cache),
        "  self-attention: attend over the cache": lambda: attn.attend_step(
            x, layer_cache["k"], layer_cache["v"], None, offset=step
        ),
        "  cross-attention (keys/values cached)": lambda: layer.cross_attn.attend_step(
            x, layer_cache["cross_k"], layer_cache["cross_v"], mask
        ),
        "  feed-forward": lambda: layer.ffn(x),
        "  one LayerNorm + residual": lambda: layer.res3(x, fn=lambda h: h),
        "output projection (logits) + argmax": lambda: tf.argmax(
            model.logits(x[:, 0], cache["output"] if model.tie_softmax else None), -1
        ),
    }
    return time_parts(parts, repeats)


def beam_state(model, src, steps_done: int, k: int = 4) -> dict:
    """A beam-search step's inputs on the batch ``src`` (N, T1): its N * k hypotheses'
    caches filled to ``steps_done`` positions, every slot live. Keys: n, tokens, cache,
    logits (of the last step), alive_logp, live, search (beam_search.BeamState), i."""
    import tensorflow as tf

    from transformer_tf2.data import data_load
    from transformer_tf2.decoding import beam_search

    n = src.shape[0]
    memory, mask = model.encode(src)
    cache = model.init_cache(tf.repeat(memory, k, axis=0), tf.repeat(mask, k, axis=0))
    tokens = tf.fill((n * k,), data_load.BOS_ID)
    logits = None
    for _ in range(steps_done):
        logits, cache = model.decode_step(tokens, cache)
    longest = steps_done + 20
    alive_logp = tf.tile(tf.constant([[0.0] + [beam_search.NEG] * (k - 1)]), (n, 1))
    seqs = tf.zeros((n, k, longest), tf.int32)
    live = tf.range(n * k)  # every slot live: N * k rows
    search = beam_search.BeamState(
        tf.range(n), tf.fill((n,), longest), live, tokens, seqs, alive_logp, seqs, alive_logp
    )
    return dict(
        n=n,
        tokens=tokens,
        cache=cache,
        logits=logits,
        alive_logp=alive_logp,
        live=live,
        search=search,
        i=tf.constant(steps_done),
    )


def whole_beam_step(model, state: dict):
    """One whole beam-search step of :func:`beam_state`'s ``state``: decoder, search and
    cache reorder (a function of no arguments)."""
    from transformer_tf2.decoding import beam_search

    def whole():
        step_logits, new_cache = model.decode_step(state["tokens"], state["cache"])
        search, cache_rows = beam_search.beam_step(state["i"], step_logits, state["search"], 0.6)
        return model.select_rows(new_cache, cache_rows)["layers"][0]["k"], search.alive_seq

    return whole


def profile_beam(model, src, steps_done: int, k: int = 4, repeats: int = 100):
    """Where one beam-search step's time goes (``--profile``): the parts of
    beam_search.beam_loop's body run alone as tf.functions on the batch ``src`` (N, T1), its
    N * k hypotheses' caches filled to ``steps_done`` positions, in milliseconds (median of
    ``repeats`` calls)."""
    import tensorflow as tf

    from transformer_tf2.decoding import beam_search

    state = beam_state(model, src, steps_done, k)
    n, tokens, cache, logits = state["n"], state["tokens"], state["cache"], state["logits"]
    alive_logp, live, search, i = state["alive_logp"], state["live"], state["search"], state["i"]
    rows = live[::-1]

    def pick(index):
        return model.select_rows(cache, index)

    parts = {
        "whole step (decoder, search, cache reorder)": whole_beam_step(model, state),
        "decoder step, N * k rows (every layer, logits)": lambda: model.decode_step(tokens, cache)[
            0
        ],
        "search bookkeeping (top-k, sequences, finished set)": lambda: (
            beam_search.beam_step(i, logits, search, 0.6)[0].alive_seq
        ),
        "  the k best extensions (top-k of top-k)": lambda: beam_search.best_extensions(
            logits, alive_logp, live
        )[0],
        "  for comparison: log-softmax + top-k over k * V": lambda: tf.math.top_k(
            tf.reshape(
                alive_logp[:, :, None] + tf.reshape(tf.nn.log_softmax(logits), (n, k, -1)),
                (n, -1),
            ),
            k,
        )[0],
        "cache rows (every layer's self-attention k, v)": lambda: pick(rows)["layers"][0]["k"],
    }
    return time_parts(parts, repeats)


def time_parts(parts: dict, repeats: int) -> list[tuple[str, float]]:
    """Each part as a function traced as the decoders are (fast_ops.decoding_function:
    the decoding kernels where they are on) that returns one number of each of its
    results (so that no copy to numpy is timed): (name, median milliseconds of
    ``repeats`` calls)."""
    import tensorflow as tf

    from transformer_tf2.kernels import fast_ops

    out = []
    for name, fn in parts.items():
        first = fast_ops.decoding_function(
            lambda fn=fn: [tf.reshape(t, [-1])[0] for t in tf.nest.flatten(fn())]
        )
        first()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            [t.numpy() for t in first()]
            times.append(time.perf_counter() - t0)
        out.append((name, 1000 * common.median(times)))
    return out


def step_parts(model, src, beam: int):
    """The step of a decoder of ``beam`` on the batch ``src``, as :func:`profile_step`
    and :func:`profile_beam` time it: a function of no arguments."""
    import tensorflow as tf

    if beam > 1:
        return whole_beam_step(model, beam_state(model, src, POSITION, beam))
    from transformer_tf2.data import data_load

    memory, mask = model.encode(src)
    cache = model.init_cache(memory, mask)
    tokens = tf.fill((src.shape[0],), data_load.BOS_ID)
    for _ in range(POSITION):
        _, cache = model.decode_step(tokens, cache)
    return lambda: tf.argmax(model.decode_step(tokens, cache)[0], -1)


def time_step(fn, repeats: int = 200) -> tuple[float, int, int]:
    """(median ms of a call, every op of its graph, the computing ones) of ``fn`` traced
    as the decoders are (:func:`time_parts`: fast_ops.decoding_function)."""
    import tensorflow as tf

    from transformer_tf2.kernels import fast_ops

    traced = fast_ops.decoding_function(lambda: tf.nest.flatten(fn()))
    every, computing = graph_ops(traced.get_concrete_function().graph.as_graph_def())
    ((_, ms),) = time_parts({"step": fn}, repeats)
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


def encode_per_sentence(model, batches) -> float:
    """Wall ms per sentence of what a decoder does once per sentence before its first step,
    on ``batches`` (one sentence each): the encoder and the decoding cache's start (the
    cross-attention keys/values of every decoder layer), traced as the decoders are
    (fast_ops.decoding_function), after an untimed pass."""
    import tensorflow as tf

    from transformer_tf2.decoding import greedy_search
    from transformer_tf2.kernels import fast_ops

    def start(src):
        memory, mask = model.encode(src)
        cache = greedy_search.init_cache(model, memory, mask)
        flat = tf.nest.flatten(cache["layers"])  # one number of each float entry, no copy out
        return [tf.reduce_sum(t) for t in flat if t.dtype.is_floating]

    fn = fast_ops.decoding_function(start, input_signature=[tf.TensorSpec([None, None], tf.int32)])

    def run():
        for b in batches:
            fn(b)[0].numpy()

    run()
    t0 = time.perf_counter()
    run()
    return 1000 * (time.perf_counter() - t0) / len(batches)


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
    model.pin_output()  # the output matrix transposed once, as translator.Translator does
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
        if beam == 1:
            start = encode_per_sentence(model, batches)
            whole = ms_token * tokens / len(batches)
            print(
                f"encoder and the cache's start: {start:.3f} ms per sentence, "
                f"{100 * min(start / whole, 1):.0f}% of a sentence's greedy decoding "
                f"({whole:.3f} ms)"
            )
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

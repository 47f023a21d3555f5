"""Decoding speed: cached greedy vs the original's naive loop and vs keras-hub's cached
decoder, and beam 4 vs greedy.

    pip install -e ".[bench]"     # keras-hub, for the keras-hub row
    python train.py --preset multi30k --position sinusoid --norm post --max_steps 1240
    python bench/decode.py --preset multi30k [--sents 1000] [--naive_sents 200]
        [--naive_extra 50] [--repeats 3] [--profile]

One run, one process, one trained model (the run's latest checkpoint, of the size and kind
PINNED, which the keras-hub row mirrors), the test split; every row is the median of
``--repeats`` timed passes after one untimed pass:
* naive: the original's decoder, re-run over the whole prefix at every step for the full
  length budget (source length + --naive_extra, pinned at 50: the ratio grows with it),
  no early stop (decoding.naive_greedy), batches of --batch sentences;
* cached greedy: one compiled tf.while_loop with the key/value cache and early stop;
* beam 4 (alpha 0.6), same loop;
* keras-hub: keras_hub.layers.TransformerDecoder layers of the same size, driven by
  keras_hub.samplers.GreedySampler with their self- and cross-attention caches in one
  tf.function, carrying this model's trained weights (attention biases zero), so that
  its outputs can be compared token for token; embeddings and the encoder are ours.
Prints sentences/s, the speed ratios, whether naive and cached outputs are identical,
and sacreBLEU of greedy and beam. ``--profile`` first prints where one greedy step's time
goes (profile_step).
"""

import sys
import time

import numpy as np

import common

import cli
import hparams

# The model the keras-hub row mirrors (its TransformerDecoder: sinusoidal positions added
# at the embedding, post-norm, ReLU FFN, no attention biases): the multi30k preset's size.
PINNED = dict(
    d_model=256,
    d_ff=1024,
    num_blocks=3,
    num_heads=8,
    position="sinusoid",
    norm="post",
    model_type="transformer",
    qkv_bias=False,
    qkv_activation="none",
    output_projection=True,
    query_masking=False,
    key_mask_defect=False,
)


def pinned_mismatch(hp) -> list[str]:
    """The settings of the run that differ from PINNED."""
    return [f"{k}={getattr(hp, k)!r} (not {v!r})" for k, v in PINNED.items() if getattr(hp, k) != v]


def timed(fn, batches, repeats: int):
    """Run fn over the batches once to compile, then time ``repeats`` passes: (the median
    pass in seconds, the outputs of the last pass)."""
    fn(batches[0][1])
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        outs = [fn(b) for _, b in batches]
        times.append(time.perf_counter() - t0)
    return common.median(times), outs


def keras_hub_decoder(model, extra: int):
    """fn(src (N, T1)) -> ids (N, L): the keras-hub reference with our weights."""
    import keras_hub
    import tensorflow as tf

    import data_load
    import positions

    BOS_ID, EOS_ID = data_load.BOS_ID, data_load.EOS_ID
    d = model.d_model
    ours = model.decoder_layers
    h, dk = ours[0].self_attn.num_heads, ours[0].self_attn.d_k
    layers = []
    for layer in ours:
        kh = keras_hub.layers.TransformerDecoder(
            intermediate_dim=layer.args["d_ff"],
            num_heads=h,
            dropout=0.0,
            activation="relu",
            layer_norm_epsilon=1e-6,
            normalize_first=False,
        )
        kh.build((None, None, d), (None, None, d))
        for theirs, mine in (
            (kh._self_attention_layer, layer.self_attn),
            (kh._cross_attention_layer, layer.cross_attn),
        ):
            for dense, w in (
                (theirs._query_dense, mine.w_q),
                (theirs._key_dense, mine.w_k),
                (theirs._value_dense, mine.w_v),
            ):
                dense.kernel.assign(tf.reshape(w, (d, h, dk)))
                dense.bias.assign(tf.zeros_like(dense.bias))
            theirs._output_dense.kernel.assign(tf.reshape(mine.w_o, (h, dk, d)))
            theirs._output_dense.bias.assign(tf.zeros_like(theirs._output_dense.bias))
        for norm, res in (
            (kh._self_attention_layer_norm, layer.res1),
            (kh._cross_attention_layer_norm, layer.res2),
            (kh._feedforward_layer_norm, layer.res3),
        ):
            norm.gamma.assign(res.ln.gamma)
            norm.beta.assign(res.ln.beta)
        for dense, mine in (
            (kh._feedforward_intermediate_dense, layer.ffn.inner),
            (kh._feedforward_output_dense, layer.ffn.outer),
        ):
            dense.kernel.assign(mine.kernel)
            dense.bias.assign(mine.bias)
        layers.append(kh)
    sampler = keras_hub.samplers.GreedySampler()

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
    def decode(src):
        memory, mask = model.encode(src)
        n, max_len = tf.shape(src)[0], tf.shape(src)[1] + extra + 1
        src_mask = tf.not_equal(src, 0)
        cross = tf.stack(
            [
                tf.stack(
                    [
                        kh._cross_attention_layer._key_dense(memory),
                        kh._cross_attention_layer._value_dense(memory),
                    ],
                    1,
                )
                for kh in layers
            ],
            1,
        )  # (N, layers, 2, T1, h, d_k)
        self_cache = tf.zeros((n, len(layers), 2, max_len, h, dk))
        prompt = tf.concat([tf.fill((n, 1), BOS_ID), tf.zeros((n, max_len - 1), tf.int32)], 1)
        prompt_mask = tf.concat([tf.ones((n, 1), tf.bool), tf.zeros((n, max_len - 1), tf.bool)], 1)

        def next_fn(prompt, cache, index):
            self_cache, cross = cache
            tok = prompt[:, index - 1 : index]
            x = (
                model.tgt_embedding(tok)
                + positions.sinusoid_encoding(tf.reshape(index - 1, (1,)), d)[None]
            )
            updated = []
            for i, kh in enumerate(layers):
                x, sc, _ = kh(
                    x,
                    encoder_sequence=memory,
                    encoder_padding_mask=src_mask,
                    self_attention_cache=self_cache[:, i],
                    self_attention_cache_update_index=index - 1,
                    cross_attention_cache=cross[:, i],
                    cross_attention_cache_update_index=None,
                )
                updated.append(sc)
            return model.logits(x[:, 0]), None, (tf.stack(updated, 1), cross)

        out = sampler(
            next=next_fn,
            prompt=prompt,
            cache=(self_cache, cross),
            index=1,
            mask=prompt_mask,
            stop_token_ids=[EOS_ID],
        )
        return out[:, 1:]

    return decode


def profile_step(model, src, steps_done: int, repeats: int = 200) -> list[tuple[str, float]]:
    """Where one greedy decoding step's time goes: each part of ``model.decode_step`` run
    alone as a tf.function on a cache filled to ``steps_done`` positions of the batch
    ``src`` (N, T1), in milliseconds (median of ``repeats`` calls; each part returns one
    number of its result, so that no copy to numpy is timed)."""
    import tensorflow as tf

    import data_load

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
        "  self-attention: attend over the cache": lambda: attn.attend(
            x, layer_cache["k"], layer_cache["v"], None, offset=step
        )[0],
        "  cross-attention (keys/values cached)": lambda: layer.cross_attn.attend(
            x, layer_cache["cross_k"], layer_cache["cross_v"], mask
        )[0],
        "  feed-forward": lambda: layer.ffn(x),
        "  one LayerNorm + residual": lambda: layer.res3(x, fn=lambda h: h),
        "output projection (logits) + argmax": lambda: tf.argmax(
            model.logits(x[:, 0], cache["output"] if model.tie_softmax else None), -1
        ),
    }
    out = []
    for name, fn in parts.items():
        first = tf.function(
            lambda fn=fn: [tf.reshape(t, [-1])[0] for t in tf.nest.flatten(fn())],
            autograph=False,
        )
        first()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            [t.numpy() for t in first()]
            times.append(time.perf_counter() - t0)
        out.append((name, 1000 * common.median(times)))
    return out


OPTIONS = {
    "sents": 1000,
    "naive_sents": 200,
    "naive_extra": 50,
    "batch": 64,
    "repeats": 3,
    "profile": False,
}


def parser(preset: str = "demo"):
    """The command line's parser (``--help``), built without TensorFlow."""
    return common.hparams_parser(OPTIONS, preset)


def main() -> None:
    import tensorflow as tf

    import data_load
    import decoding

    hp, opts = cli.parse_args(extra=OPTIONS)
    reps = opts["repeats"]
    hp, tok, model, path = decoding.load_run(hp.logdir, {}, who="bench")
    differ = pinned_mismatch(hp)
    if differ:
        sys.exit(
            f"bench: the run in {hp.logdir} is not the model the keras-hub row mirrors: "
            f"{', '.join(differ)}; train one with train.py --preset multi30k and those settings"
        )
    src_txt, refs = data_load.read_raw(hp, "test")
    src_txt, refs = src_txt[: opts["sents"]], refs[: opts["sents"]]
    ids = tok.encode_src(src_txt)
    extra = tf.constant(hp.max_len_extra, tf.int32)
    batches = list(data_load.eval_batches(ids, opts["batch"], 1 << 30))
    print(
        f"model {path}: {model.count_params():,} parameters; {len(ids)} test sentences, "
        f"batches of {opts['batch']}, max length = source length + {hp.max_len_extra}"
    )

    if opts["profile"]:
        src = tf.constant(batches[len(batches) // 2][1])
        print(f"one greedy step, batch of {src.shape[0]} at position 10 (ms, median of 200):")
        for name, ms in profile_step(model, src, 10):
            print(f"  {name:<50}{ms:>8.3f}")
    greedy = decoding.greedy_decoder(model)
    t_greedy, g_out = timed(lambda b: greedy(tf.constant(b), extra).numpy(), batches, reps)
    beam = decoding.beam_decoder(model, 4, 0.6)
    t_beam, b_out = timed(lambda b: beam(tf.constant(b), extra)[0].numpy()[:, 0], batches, reps)

    try:
        kh = keras_hub_decoder(model, hp.max_len_extra)
    except ImportError:
        kh = None
        print("keras-hub is not installed (pip install -e '.[bench]'): no keras-hub row")
    if kh is not None:
        t_kh, kh_out = timed(lambda b: kh(tf.constant(b)).numpy(), batches, reps)

    n_naive = min(opts["naive_sents"], len(ids))
    naive_batches = list(data_load.eval_batches(ids[:n_naive], opts["batch"], 1 << 30))

    naive_extra = opts["naive_extra"]

    def naive(b):
        limits = (b != 0).sum(axis=1) + naive_extra
        return decoding.naive_greedy(model, tf.constant(b), b.shape[1] + naive_extra, limits)

    t_naive, n_out = timed(naive, naive_batches, reps)
    extra_naive = tf.constant(naive_extra, tf.int32)
    _, g_small = timed(lambda b: greedy(tf.constant(b), extra_naive).numpy(), naive_batches, 1)
    same = all(
        np.array_equal(a, b[:, : a.shape[1]]) and not b[:, a.shape[1] :].any()
        for a, b in zip(g_small, n_out)
    )

    def texts(outs, batch_list, n):
        hyps = [""] * n
        for (idx, _), out in zip(batch_list, outs):
            for row, i in enumerate(idx):
                hyps[i] = tok.decode_tgt(out[row])
        return hyps

    bleu_g = decoding.scores(texts(g_out, batches, len(ids)), refs)["sacrebleu"]
    bleu_b = decoding.scores(texts(b_out, batches, len(ids)), refs)["sacrebleu"]
    sps_naive, sps_g, sps_b = n_naive / t_naive, len(ids) / t_greedy, len(ids) / t_beam
    print(f"sentences/s: the median of {reps} timed passes each")
    print(f"{'decoder':<28}{'sentences/s':>12}{'sacreBLEU':>11}")
    print(f"{'naive (original loop)':<28}{sps_naive:>12.1f}{'':>11}")
    print(f"{'cached greedy':<28}{sps_g:>12.1f}{bleu_g:>11.2f}")
    print(f"{'cached beam 4, alpha 0.6':<28}{sps_b:>12.1f}{bleu_b:>11.2f}")
    print(
        f"cached greedy / naive: {sps_g / sps_naive:.1f}x (the naive loop runs source length "
        f"+ {naive_extra} steps, no early stop); outputs identical on the {n_naive} naive "
        f"sentences: {same}"
    )
    print(f"beam 4 / greedy: {sps_b / sps_g:.2f}x the speed, {bleu_b - bleu_g:+.2f} BLEU")
    if kh is not None:

        def cut(seq):  # keras-hub keeps generating after </S>; compare up to it
            seq = list(seq)
            return seq[: seq.index(3) + 1] if 3 in seq else seq

        agree = sum(cut(a) == cut(b) for ga, ka in zip(g_out, kh_out) for a, b in zip(ga, ka))
        bleu_kh = decoding.scores(texts(kh_out, batches, len(ids)), refs)["sacrebleu"]
        sps_kh = len(ids) / t_kh
        print(f"{'keras-hub cached greedy':<28}{sps_kh:>12.1f}{bleu_kh:>11.2f}")
        print(
            f"cached greedy / keras-hub: {sps_g / sps_kh:.2f}x; identical outputs: "
            f"{agree}/{len(ids)} sentences"
        )


if __name__ == "__main__":
    hparams.run_main(main)

"""Decoding speed: cached greedy against the original's naive loop, keras-hub's cached
decoder and CTranslate2, and beam 4 against greedy.

    pip install -e ".[bench]"     # keras-hub and ctranslate2, for their rows
    python train.py --preset multi30k --position sinusoid --max_steps 3000 \
        --logdir log/multi30k_sinusoid
    python bench/decode.py --preset multi30k --logdir log/multi30k_sinusoid [--sents 1000]
        [--naive_sents 200] [--naive_extra 50] [--repeats 3] [--profile]
        [--ctranslate2 false] [--beams 4,8] [--ablate native_decode]
    python bench/decode.py --preset multi30k --logdir log/multi30k_sinusoid --beams 4 \
        --ablate beam_stop     # each beam that stops at its best against one that finds k
    python bench/decode.py --preset multi30k --logdir log/multi30k_sinusoid --batch 1 \
        --sents 200 --naive_sents 10     # translate.py's interactive case

One run, one trained model (the run's latest checkpoint, of the size and kind PINNED,
which the keras-hub row mirrors), the test split; every row is the median of
``--repeats`` timed passes after one untimed pass:
* naive: the original's decoder, re-run over the whole prefix at every step for the full
  length budget (source length + --naive_extra, pinned at 50: the ratio grows with it),
  no early stop (greedy_search.naive_greedy), batches of --batch sentences;
* cached greedy: one compiled tf.while_loop with the key/value cache and early stop;
* beam 4 (alpha 0.6), same loop;
* keras-hub: keras_hub.layers.TransformerDecoder layers of the same size, driven by
  keras_hub.samplers.GreedySampler with their self- and cross-attention caches in one
  tf.function, carrying this model's trained weights (attention biases zero), so that
  its outputs can be compared token for token; embeddings and the encoder are ours.
Then the anchor, on the same batches: our greedy and beam 4 in two layouts of the
machine's cores (one batch at a time with TensorFlow's threads; one batch per core at
once, 1 intra-op thread each, in a fresh process each), and CTranslate2's (ctranslate.py
converts the model; float32 and int8 weights; one batch at a time on every core, and one
batch per core at once), greedy and each beam size of ``--beams``. Each row gives
sentences/s, sacreBLEU and how many outputs are ours token for token; then the ratios
of the best layouts. ``--ablate NAME`` (a switch of fast_ops.SWITCHES) adds our rows with
that switch off, decoded in the same process as the rows with it on, pass for pass in
turn, and prints the ratio of each pair; ``--ablate beam_stop`` so adds beams that search
until all k hypotheses are final (``n_best`` k) beside ours, which stop once the best
is, and ``--ablate pin_output`` decoders that transpose the tied output matrix at each
call (traced before ``model.pin_output``) beside ours, which read it transposed once.
``--profile`` first prints where one greedy step's and one beam-4 step's time go.
"""

import json
import sys
import tempfile
import time

import numpy as np

import common

from transformer_tf2.config import cli

# --ablate's name for the beam's stop once its best is final (beam_search.beam_loop's
# n_best 1): ablated, each beam searches until all k are final, as before it
BEAM_STOP = "beam_stop"
# --ablate's name for the output matrix transposed once per translator (model.pin_output):
# ablated, a decoder traced before the pin transposes it at each call, as before it
PIN_OUTPUT = "pin_output"
ABLATIONS = (BEAM_STOP, PIN_OUTPUT)  # the names of --ablate that are not fast_ops switches

# The model the keras-hub row mirrors (its TransformerDecoder: sinusoidal positions added
# at the embedding, post- or pre-norm, ReLU FFN, no attention biases): the multi30k
# preset's size.
PINNED = dict(
    d_model=256,
    d_ff=1024,
    num_blocks=3,
    num_heads=8,
    position="sinusoid",
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

    from transformer_tf2.data import data_load
    from transformer_tf2.layers import positions

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
            normalize_first=model.norm == "pre",
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
            if model.norm == "pre":  # the stack's final LayerNorm
                x = model.decoder_norm(x)
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


def ctranslate2_rows(model, tok, hp, batches, repeats: int, out_dir: str, beams=(4,)) -> list[dict]:
    """CTranslate2 (the anchor, ctranslate.py's conversion of this model) on the same
    batches: greedy and each of ``beams``, float32 and int8, in two layouts of the
    machine's cores: one batch at a time on all of them (intra_threads), and one batch
    per core at once (inter_threads, intra_threads 1). Each row: its name, seconds
    (median of ``repeats`` passes) and its outputs as our ids, cut at our per-sentence
    budget."""
    import os

    import ctranslate2

    from transformer_tf2.export import ctranslate

    cores = os.cpu_count() or 1
    sources = [ctranslate.source_tokens(tok, [row[row > 0][:-1] for row in b]) for _, b in batches]
    limits = [(b > 0).sum(axis=1) + hp.max_len_extra for _, b in batches]
    rows = []
    for weights in ("float32", "int8"):
        path = os.path.join(out_dir, weights)
        ctranslate.convert(model, tok, path, "none" if weights == "float32" else weights)
        for layout, inter, intra in (
            (f"one batch at a time, {cores} threads", 1, cores),
            (f"{cores} batches at once, 1 thread each", cores, 1),
        ):
            translator = ctranslate2.Translator(
                path, device="cpu", inter_threads=inter, intra_threads=intra
            )
            for beam in (1, *beams):

                def run():
                    jobs = [
                        translator.translate_batch(
                            src,
                            beam_size=beam,
                            length_penalty=0.6 if beam > 1 else 0,
                            max_decoding_length=int(lim.max()),
                            asynchronous=True,
                        )
                        for src, lim in zip(sources, limits)
                    ]
                    return [[r.result() for r in job] for job in jobs]

                run()  # warm-up
                times, outs = [], None
                for _ in range(repeats):
                    t0 = time.perf_counter()
                    outs = run()
                    times.append(time.perf_counter() - t0)
                ids = [  # batch order, as our rows
                    ours_ids(tok, r.hypotheses[0], int(n))
                    for res, lim in zip(outs, limits)
                    for r, n in zip(res, lim)
                ]
                name = "greedy" if beam == 1 else f"beam {beam}"
                rows.append(
                    dict(
                        name=f"CTranslate2 {name}, {weights}, {layout}",
                        seconds=common.median(times),
                        outs=ids,
                        beam=beam,
                    )
                )
    return rows


def ours_ids(tok, tokens: list[str], budget: int) -> list[int]:
    """CTranslate2's output tokens as our ids, </S> added where it stopped there, cut at
    our budget of ``budget`` tokens (it decodes to the batch's longest budget)."""
    from transformer_tf2.data import data_load
    from transformer_tf2.export import ctranslate

    ids = ctranslate.target_ids(tok, tokens)[:budget]
    return ids + [data_load.EOS_ID] if len(ids) < budget else ids


def layout_worker(cfg: dict) -> None:
    """A child of :func:`our_layouts`: TensorFlow's thread pools set before it starts,
    then the run's greedy or beam decoder over the batches, ``streams`` batches at once
    (Python threads: TensorFlow releases the GIL while a graph runs). With ``ablate``
    (a fast_ops switch), a second decoder traced with that switch off; the two take
    turns pass by pass."""
    from concurrent.futures import ThreadPoolExecutor

    import tensorflow as tf

    if cfg["intra"]:
        tf.config.threading.set_intra_op_parallelism_threads(cfg["intra"])
        tf.config.threading.set_inter_op_parallelism_threads(cfg["inter"])
    from transformer_tf2.data import data_load
    from transformer_tf2.decoding import beam_search, greedy_search
    from transformer_tf2.kernels import fast_ops
    from transformer_tf2.models import checkpoints

    hp, tok, model, _ = checkpoints.load_run(cfg["logdir"], {}, who="bench")
    src_txt, _ = data_load.read_raw(hp, "test")
    ids = tok.encode_src(src_txt[: cfg["sents"]])
    batches = [tf.constant(b) for _, b in data_load.eval_batches(ids, cfg["batch"], 1 << 30)]
    extra = tf.constant(hp.max_len_extra, tf.int32)

    def decoder(off=()):  # traced on its first call (one trace: the signature has free sizes)
        kernels = fast_ops.Kernels.resolve([x for x in off if x not in ABLATIONS], decoding=True)
        if cfg["beam"] > 1:
            n_best = cfg["beam"] if BEAM_STOP in off else 1
            beam = beam_search.beam_decoder(model, cfg["beam"], 0.6, kernels=kernels, n_best=n_best)
            fn = lambda b: beam(b, extra)[0].numpy()[:, 0]  # noqa: E731
        else:
            greedy = greedy_search.greedy_decoder(model, kernels=kernels)
            fn = lambda b: greedy(b, extra).numpy()  # noqa: E731
        fn(batches[0])
        return fn

    fns = {}
    if cfg["ablate"] == PIN_OUTPUT:  # traced (on its first call) before the pin
        fns[PIN_OUTPUT] = decoder([PIN_OUTPUT])
    model.pin_output()  # the output matrix transposed once, as translator.Translator does
    fns = {"": decoder(), **fns}
    if cfg["ablate"] and cfg["ablate"] != PIN_OUTPUT:
        fns[cfg["ablate"]] = decoder([cfg["ablate"]])
    times = {name: [] for name in fns}
    outs = {}
    with ThreadPoolExecutor(cfg["streams"]) as pool:
        for fn in fns.values():
            list(pool.map(fn, batches))  # the first pass, untimed
        for k in range(cfg["repeats"]):
            # with a switch to ablate: on, off; then off, on; ...
            for name in common.interleaved(k, *fns) if len(fns) == 2 else fns:
                fn = fns[name]
                t0 = time.perf_counter()
                outs[name] = list(pool.map(fn, batches))
                times[name].append(time.perf_counter() - t0)
    common.emit(
        {
            name: {
                "seconds": common.median(times[name]),
                "outs": [o[o > 0].tolist() for b in outs[name] for o in b],
            }
            for name in fns
        }
    )


def our_layouts(hp, opts: dict, beam: int) -> list[dict]:
    """Our decoder in each layout of the machine's cores, a fresh process each (thread
    pools are set once per process): one batch at a time with TensorFlow's own threads,
    one batch per core at once with them, and one batch per core at once with 1
    intra-op thread each."""
    import json
    import os

    cores = os.cpu_count() or 1
    rows = []
    for layout, streams, intra in (
        ("one batch at a time, TensorFlow's threads", 1, 0),
        (f"{cores} batches at once, TensorFlow's threads", cores, 0),
        (f"{cores} batches at once, 1 thread each", cores, 1),
    ):
        cfg = dict(
            logdir=hp.logdir,
            sents=opts["sents"],
            batch=opts["batch"],
            repeats=opts["repeats"],
            beam=beam,
            streams=streams,
            intra=intra,
            inter=cores,
            ablate=opts["ablate"],
        )
        command = [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(cfg)]
        res = common.run_child(command, "bench")
        name = "greedy" if beam == 1 else f"beam {beam}"
        for switch, r in res.items():
            off = f", {switch} off" if switch else ""
            rows.append(dict(name=f"ours {name}, float32, {layout}{off}", beam=beam, **r))
    return rows


def print_anchor(
    rows: list[dict], ours: dict, texts, refs, n: int, beams=(4,), ablate: str = ""
) -> None:
    """The table against CTranslate2: each row's sentences/s, sacreBLEU and how many of
    its outputs are ours (``ours``: beam size -> our outputs, batch order) token for
    token; then, with ``ablate``, each layout with that switch on against off; then our
    best layout against theirs, and each on one batch."""
    from transformer_tf2.evaluation import metrics

    width = max(len(r["name"]) for r in rows) + 2
    head = "decoder (float32 unless named)"
    print(f"\n{head:<{width}}{'sentences/s':>12}{'BLEU':>7}{'= ours':>8}")
    for r in rows:
        r["speed"] = n / r["seconds"]
        same = sum(a == b for a, b in zip(r["outs"], ours[r["beam"]]))
        bleu = metrics.scores(texts(r["outs"]), refs)["sacrebleu"]
        print(f"{r['name']:<{width}}{r['speed']:>12.1f}{bleu:>7.2f}{same:>8}")
    for beam, what in [(1, "greedy")] + [(k, f"beam {k}") for k in beams]:
        mine = [r for r in rows if r["beam"] == beam and r["name"].startswith("ours")]
        if ablate:
            with_off = [r for r in mine if r["name"].endswith(f", {ablate} off")]
            for r in with_off:
                on = next(m for m in mine if m["name"] == r["name"][: -len(f", {ablate} off")])
                print(
                    f"{what}, {ablate} on / off, {', '.join(on['name'].split(', ')[2:])}: "
                    f"{on['speed'] / r['speed']:.2f}x"
                )
            mine = [r for r in mine if r not in with_off]
        theirs = [r for r in rows if r["beam"] == beam and "float32" in r["name"]]
        theirs = [r for r in theirs if r["name"].startswith("CTranslate2")]
        best, anchor = max(mine, key=lambda r: r["speed"]), max(theirs, key=lambda r: r["speed"])
        one = [r for r in mine + theirs if "one batch at a time" in r["name"]]
        print(
            f"{what}: ours / CTranslate2, each in its best layout: "
            f"{best['speed'] / anchor['speed']:.2f}x; both one batch at a time on every "
            f"core: {one[0]['speed'] / one[1]['speed']:.2f}x"
        )
    print(
        "Where the two differ: CTranslate2 decodes each batch to its longest budget (its "
        "outputs are then cut at ours, source length + max_len_extra per sentence); its "
        "beam divides by |Y|^0.6 where ours divides by ((5 + |Y|) / 6)^0.6, and it stops "
        "once k hypotheses are finished where ours stops when no alive one can beat its "
        "best finished one."
    )


OPTIONS = {
    "sents": 1000,
    "naive_sents": 200,
    "naive_extra": 50,
    "batch": 64,
    "repeats": 3,
    "profile": False,
    "ctranslate2": True,
    "beams": "4",
    "ablate": "",
    "worker": "",
}


def parser(preset: str = "demo"):
    """The command line's parser (``--help``), built without TensorFlow."""
    return common.hparams_parser(OPTIONS, preset)


def main() -> None:
    import tensorflow as tf

    from transformer_tf2.data import data_load
    from transformer_tf2.decoding import beam_search, greedy_search
    from transformer_tf2.evaluation import metrics
    from transformer_tf2.kernels import fast_ops
    from transformer_tf2.models import checkpoints

    hp, opts = cli.parse_args(extra=OPTIONS)
    if opts["worker"]:
        layout_worker(json.loads(opts["worker"]))
        return
    reps = opts["repeats"]
    if opts["ablate"] and opts["ablate"] not in fast_ops.SWITCHES + ABLATIONS:
        sys.exit(
            f"bench: --ablate {opts['ablate']}: no such switch; fast_ops.py's switches are "
            f"{', '.join(fast_ops.SWITCHES)}, and {BEAM_STOP} (the beam's early stop) and "
            f"{PIN_OUTPUT} (the output matrix transposed once per translator)"
        )
    hp, tok, model, path = checkpoints.load_run(hp.logdir, {}, who="bench")
    model.pin_output()  # the output matrix transposed once, as translator.Translator does
    differ = pinned_mismatch(hp)
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
        import profile_decode

        src = tf.constant(batches[len(batches) // 2][1])
        print(f"one greedy step, batch of {src.shape[0]} at position 10 (ms, median of 200):")
        for name, ms in profile_decode.profile_step(model, src, 10):
            print(f"  {name:<55}{ms:>8.3f}")
        print(f"one beam-4 step, {src.shape[0]} sentences at position 10 (ms, median of 100):")
        for name, ms in profile_decode.profile_beam(model, src, 10):
            print(f"  {name:<55}{ms:>8.3f}")
    greedy = greedy_search.greedy_decoder(model)
    t_greedy, g_out = timed(lambda b: greedy(tf.constant(b), extra).numpy(), batches, reps)
    beam = beam_search.beam_decoder(model, 4, 0.6)
    t_beam, b_out = timed(lambda b: beam(tf.constant(b), extra)[0].numpy()[:, 0], batches, reps)

    kh = None
    if differ:
        print(f"no keras-hub row: its TransformerDecoder mirrors {PINNED}, not {differ}")
    else:
        try:
            kh = keras_hub_decoder(model, hp.max_len_extra)
        except ImportError:
            print("keras-hub is not installed (pip install -e '.[bench]'): no keras-hub row")
    if kh is not None:
        t_kh, kh_out = timed(lambda b: kh(tf.constant(b)).numpy(), batches, reps)

    n_naive = min(opts["naive_sents"], len(ids))
    naive_batches = list(data_load.eval_batches(ids[:n_naive], opts["batch"], 1 << 30))

    naive_extra = opts["naive_extra"]

    def naive(b):
        limits = (b != 0).sum(axis=1) + naive_extra
        return greedy_search.naive_greedy(model, tf.constant(b), b.shape[1] + naive_extra, limits)

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

    bleu_g = metrics.scores(texts(g_out, batches, len(ids)), refs)["sacrebleu"]
    bleu_b = metrics.scores(texts(b_out, batches, len(ids)), refs)["sacrebleu"]
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
        bleu_kh = metrics.scores(texts(kh_out, batches, len(ids)), refs)["sacrebleu"]
        sps_kh = len(ids) / t_kh
        print(f"{'keras-hub cached greedy':<28}{sps_kh:>12.1f}{bleu_kh:>11.2f}")
        print(
            f"cached greedy / keras-hub: {sps_g / sps_kh:.2f}x; identical outputs: "
            f"{agree}/{len(ids)} sentences"
        )
    if not opts["ctranslate2"]:
        return
    order = [i for idx, _ in batches for i in idx]  # batch order -> sentence index

    def flat_texts(outs):
        hyps = [""] * len(ids)
        for i, out in zip(order, outs):
            hyps[i] = tok.decode_tgt(out)
        return hyps

    beams = [int(k) for k in str(opts["beams"]).split(",")]
    rows = [row for k in [1] + beams for row in our_layouts(hp, opts, k)]
    # our outputs of each beam size: one batch at a time (every layout gives the same)
    ours = {r["beam"]: r["outs"] for r in reversed(rows)}
    with tempfile.TemporaryDirectory() as tmp:
        rows += ctranslate2_rows(model, tok, hp, batches, reps, tmp, beams)
    print_anchor(rows, ours, flat_texts, refs, len(ids), beams, opts["ablate"])


if __name__ == "__main__":
    cli.run_main(main)

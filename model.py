"""The encoder-decoder Transformer (paper section 3, figure 1) built from modules.py.

``Transformer.call((src, tgt_in))`` gives logits for teacher forcing; ``encode`` and
``decode_step`` with a plain-dict cache give incremental decoding; :func:`greedy_decoder`
compiles the whole autoregressive loop into one tf.function.
"""
from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

import modules as M
from prepro import BOS_ID, EOS_ID, PAD_ID


@keras.saving.register_keras_serializable(package="transformer")
class Transformer(keras.Model):
    """Encoder and decoder stacks of ``num_blocks`` layers each (3.1).

    Embeddings (3.4): one matrix for source, target and the pre-softmax projection when
    ``share_embeddings`` (joint BPE vocabulary); otherwise a source embedding and a target
    embedding tied to the output projection. Dropout on the embedding sums (5.4).
    """

    def __init__(self, src_vocab_size: int, tgt_vocab_size: int, d_model: int = 512,
                 d_ff: int = 2048, num_blocks: int = 6, num_heads: int = 8,
                 dropout_rate: float = 0.1, position: str = "sinusoid",
                 max_position: int = 1024, norm: str = "post", share_embeddings: bool = True,
                 attention_dropout: float = 0.0, model_type: str = "transformer", **kwargs):
        super().__init__(**kwargs)
        if share_embeddings and src_vocab_size != tgt_vocab_size:
            raise ValueError("share_embeddings needs one joint vocabulary")
        if model_type not in ("transformer", "weighted"):
            raise ValueError(f"model_type must be transformer or weighted, got {model_type!r}")
        self.args = dict(src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size,
                         d_model=d_model, d_ff=d_ff, num_blocks=num_blocks,
                         num_heads=num_heads, dropout_rate=dropout_rate, position=position,
                         max_position=max_position, norm=norm,
                         share_embeddings=share_embeddings,
                         attention_dropout=attention_dropout, model_type=model_type)
        self.model_type = model_type
        self.d_model, self.norm, self.position = d_model, norm, position
        self.max_position = max_position
        self.tgt_embedding = M.TokenEmbedding(tgt_vocab_size, d_model, name="tgt_embedding")
        self.src_embedding = (self.tgt_embedding if share_embeddings else
                              M.TokenEmbedding(src_vocab_size, d_model, name="src_embedding"))
        self.src_position = M.PositionalEncoding(d_model, position, max_position,
                                                 name="src_position")
        self.tgt_position = M.PositionalEncoding(d_model, position, max_position,
                                                 name="tgt_position")
        self.src_dropout = M.Dropout(dropout_rate)
        self.tgt_dropout = M.Dropout(dropout_rate)
        layer_args = (d_model, num_heads, d_ff, dropout_rate, norm, attention_dropout,
                      model_type == "weighted")
        # Each layer is a direct attribute (not a list) so that tf.train.Checkpoint,
        # which does not follow Keras-tracked lists, saves its weights.
        for i in range(num_blocks):
            setattr(self, f"encoder_{i}", M.EncoderLayer(*layer_args, name=f"encoder_{i}"))
            setattr(self, f"decoder_{i}", M.DecoderLayer(*layer_args, name=f"decoder_{i}"))
        self.num_blocks = num_blocks
        if norm == "pre":
            self.encoder_norm = M.layer_norm("encoder_norm")
            self.decoder_norm = M.layer_norm("decoder_norm")

    @property
    def encoder_layers(self) -> list:
        return [getattr(self, f"encoder_{i}") for i in range(self.num_blocks)]

    @property
    def decoder_layers(self) -> list:
        return [getattr(self, f"decoder_{i}") for i in range(self.num_blocks)]

    @classmethod
    def from_hparams(cls, hp, src_vocab_size: int, tgt_vocab_size: int) -> "Transformer":
        model = cls(src_vocab_size, tgt_vocab_size, d_model=hp.d_model, d_ff=hp.d_ff,
                    num_blocks=hp.num_blocks, num_heads=hp.num_heads,
                    dropout_rate=hp.dropout_rate, position=hp.position,
                    max_position=hp.max_position, norm=hp.norm,
                    share_embeddings=hp.share_embeddings,
                    attention_dropout=hp.attention_dropout, model_type=hp.model_type,
                    name="transformer")
        model.build_all()
        return model

    def build(self, input_shape=None):
        """Create every weight (input_shape is unused: all shapes follow from d_model)."""
        x = (None, None, self.d_model)
        for layer in (self.src_embedding, self.tgt_embedding, self.src_position,
                      self.tgt_position, *self.encoder_layers):
            if not layer.built:  # the embedding may be shared
                layer.build(x)
        for layer in self.decoder_layers:
            layer.build(x, x)
        if self.norm == "pre":
            self.encoder_norm.build(x)
            self.decoder_norm.build(x)
        self.built = True

    def build_all(self):
        """Build the weights and trace call() once on a 1-token batch."""
        one = tf.ones((1, 1), tf.int32)
        self((one, one), training=False)

    # -- the two stacks -------------------------------------------------------------------
    def _embed(self, ids, embedding, position, dropout, training, offset=0):
        x = embedding(ids)
        return dropout(position(x, offset=offset), training=training)

    def encode(self, src, training=False, return_attention=False):
        """src (N, T1) ids -> memory (N, T1, d_model), mask (N, 1, 1, T1) [, weights]."""
        mask = M.padding_mask(src)
        x = self._embed(src, self.src_embedding, self.src_position, self.src_dropout,
                        training)
        weights = []
        for layer in self.encoder_layers:
            x, w = layer(x, mask, training=training, return_attention=True)
            weights.append(w)
        if self.norm == "pre":
            x = self.encoder_norm(x)
        return (x, mask, weights) if return_attention else (x, mask)

    def decode(self, tgt_in, memory, memory_mask, training=False, return_attention=False):
        """tgt_in (N, T2) ids -> decoder output (N, T2, d_model) before the projection."""
        x = self._embed(tgt_in, self.tgt_embedding, self.tgt_position, self.tgt_dropout,
                        training)
        self_mask = M.causal_mask(tf.shape(tgt_in)[1])
        weights = []
        for layer in self.decoder_layers:
            x, w = layer(x, memory, self_mask, memory_mask, training=training,
                         return_attention=True)
            weights.append(w)
        if self.norm == "pre":
            x = self.decoder_norm(x)
        return (x, weights) if return_attention else x

    def logits(self, hidden):
        """(..., d_model) -> (..., V) float32 via the tied embedding (3.4)."""
        return self.tgt_embedding.logits(hidden)

    def call(self, inputs, training=False):
        """inputs = (src (N, T1), tgt_in (N, T2)) -> logits (N, T2, V) float32."""
        src, tgt_in = inputs
        memory, mask = self.encode(src, training=training)
        return self.logits(self.decode(tgt_in, memory, mask, training=training))

    # -- incremental decoding ------------------------------------------------------------
    def init_cache(self, memory, memory_mask, max_len):
        """The decoding cache, a plain dict: ``step`` (scalar int32), ``memory_mask``
        (N, 1, 1, T1) and per decoder layer the self-attention keys/values
        (N, h, max_len, d_k) plus the cross-attention keys/values (N, h, T1, d_k)."""
        return {"step": tf.constant(0, tf.int32), "memory_mask": memory_mask,
                "layers": [layer.init_cache(memory, max_len) for layer in self.decoder_layers]}

    def decode_step(self, tokens, cache):
        """tokens (N,) at position cache['step'] -> (logits (N, V) float32, new cache)."""
        step = cache["step"]
        x = self._embed(tokens[:, None], self.tgt_embedding, self.tgt_position,
                        self.tgt_dropout, False, offset=step)
        layers = []
        for layer, layer_cache in zip(self.decoder_layers, cache["layers"]):
            x, layer_cache = layer.step(x, layer_cache, step, cache["memory_mask"])
            layers.append(layer_cache)
        if self.norm == "pre":
            x = self.decoder_norm(x)
        new = {"step": step + 1, "memory_mask": cache["memory_mask"], "layers": layers}
        return self.logits(x[:, 0]), new

    def get_config(self):
        return {**super().get_config(), **self.args}

    # -- Weighted Transformer branch weights --------------------------------------------
    def branched_layers(self) -> dict:
        """{'encoder_0': BranchedAttention, ...} (empty for model_type=transformer)."""
        found = {}
        for layer in self.encoder_layers + self.decoder_layers:
            for sub in layer.branched():
                found[layer.name] = sub
        return found

    @property
    def branch_variables(self) -> list:
        """kappa and alpha of every branched sublayer (their own optimizer trains them)."""
        return [w for sub in self.branched_layers().values() for w in (sub.kappa, sub.alpha)]

    def branch_weights(self) -> dict:
        """{'encoder_0/kappa': (M,) numpy, 'encoder_0/alpha': ..., ...}."""
        out = {}
        for name, sub in self.branched_layers().items():
            out[f"{name}/kappa"] = sub.kappa.numpy()
            out[f"{name}/alpha"] = sub.alpha.numpy()
        return out

    def summary_lines(self) -> list[str]:
        """'name shape' for every variable, then the total parameter count (the specs);
        a weighted model also lists its branch weights kappa and alpha per layer."""
        lines = [f"{v.path}\t{tuple(v.shape)}" for v in self.weights]
        for name, value in self.branch_weights().items():
            lines.append(f"{name}\t" + " ".join(f"{x:.4f}" for x in value))
        lines.append(f"total parameters: {self.count_params():,}")
        return lines


def max_decode_len(model: Transformer, src_len, extra, max_len: int = 0):
    """Decoding budget: source length + extra, capped by ``max_len`` (if > 0) and by the
    learned position table."""
    limit = src_len + extra
    if max_len > 0:
        limit = tf.minimum(limit, max_len)
    if model.position == "learned":
        limit = tf.minimum(limit, model.max_position)
    return limit


def source_limit(model: Transformer) -> int:
    """Longest source (</S> included) decoded; longer ones are cut: the learned position
    table's size, or 1024 tokens with sinusoids (far beyond any training sentence)."""
    return model.max_position if model.position == "learned" else 1024


def decode_budgets(model: Transformer, src, extra, max_len: int = 0):
    """Per-sentence budgets (N,) from each source's own length (non-PAD tokens, </S>
    included), so that a sentence decodes the same whatever batch it is in; and their
    maximum, the length of the output buffers."""
    lengths = tf.reduce_sum(tf.cast(tf.not_equal(src, PAD_ID), tf.int32), axis=1)
    limits = max_decode_len(model, lengths, extra, max_len)
    return limits, tf.reduce_max(limits)


def greedy_loop(model: Transformer, src, extra, max_len: int = 0):
    """Greedy autoregressive decoding of src (N, T1) -> (N, L) ids, PAD after </S>.

    Encodes once, computes the cross-attention keys/values once, and appends one
    position per step to the self-attention cache; a sentence stops at </S> or after
    ``its source length + extra`` tokens, the loop when every sentence has stopped.
    Meant to run inside a tf.function.
    """
    memory, mask = model.encode(src)
    n = tf.shape(src)[0]
    limits, max_len = decode_budgets(model, src, extra, max_len)
    cache = model.init_cache(memory, mask, max_len)
    out = tf.zeros((n, max_len), tf.int32)
    tokens = tf.fill((n,), BOS_ID)
    done = tf.zeros((n,), tf.bool)

    def cond(i, tokens, done, out, cache):
        return tf.logical_and(i < max_len, tf.logical_not(tf.reduce_all(done)))

    def body(i, tokens, done, out, cache):
        logits, cache = model.decode_step(tokens, cache)
        nxt = tf.argmax(logits, axis=-1, output_type=tf.int32)
        nxt = tf.where(done, PAD_ID, nxt)
        out = keras.ops.slice_update(out, [0, i], nxt[:, None])
        done = tf.logical_or(done, tf.logical_or(tf.equal(nxt, EOS_ID), i + 1 >= limits))
        return i + 1, nxt, done, out, cache

    i, _, _, out, _ = tf.while_loop(cond, body, (tf.constant(0), tokens, done, out, cache))
    return out[:, :i]


def greedy_decoder(model: Transformer, jit_compile: bool = False, max_len: int = 0):
    """A compiled ``fn(src (N, T1) int32, extra scalar int32) -> (N, L) int32``."""
    spec = [tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([], tf.int32)]
    return tf.function(lambda src, extra: greedy_loop(model, src, extra, max_len),
                       input_signature=spec, jit_compile=jit_compile)


def naive_greedy(model: Transformer, src, max_len: int, limits=None):
    """Reference decoder of the original code: re-runs the full decoder over the whole
    prefix at every step, for max_len steps, without early stopping. (N, max_len) ids.
    ``limits`` (N,), if given, PADs each row past its own budget (as the cached loop)."""
    memory, mask = model.encode(src)
    out = np.full((src.shape[0], max_len + 1), PAD_ID, np.int32)
    out[:, 0] = BOS_ID
    for t in range(max_len):
        logits = model.logits(model.decode(tf.constant(out[:, :t + 1]), memory, mask))
        out[:, t + 1] = tf.argmax(logits[:, -1], axis=-1).numpy()
    result = out[:, 1:]
    # PAD everything after the first </S>, as the cached decoder does
    ended = np.cumsum(result == EOS_ID, axis=1) - (result == EOS_ID) > 0
    result[ended] = PAD_ID
    if limits is not None:
        result[np.arange(max_len)[None, :] >= np.asarray(limits)[:, None]] = PAD_ID
    return result


def _reorder_cache(cache, flat_index):
    """Select rows (N * k,) of the self-attention caches after a beam step."""
    layers = [dict(c, k=tf.gather(c["k"], flat_index), v=tf.gather(c["v"], flat_index))
              for c in cache["layers"]]
    return dict(cache, layers=layers)


def length_penalty(length, alpha: float):
    """((5 + |Y|) / 6) ^ alpha of Wu et al. 2016 (GNMT), |Y| counting </S>."""
    return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, alpha)


def beam_loop(model, src, extra, beam_size: int, alpha: float = 0.6, max_len: int = 0):
    """Batched beam search (Vaswani et al. 7: k = 4, alpha = 0.6) in one tf.while_loop.

    src (N, T1) -> (ids (N, k, L) best first, PAD after </S>; scores (N, k)), where a
    score is the sum of token log-probabilities divided by the length penalty.
    At each step every alive hypothesis is extended by every token and the k best
    extensions are kept; those ending in </S> move to a separate finished set (scored
    with the length penalty at their own length), so a shorter finished hypothesis is
    never pushed out by longer, worse alive ones, and their slot stays empty. A
    sentence's search stops when no alive hypothesis can beat its k-th finished one,
    when none is alive, or after ``its source length + extra`` steps. With k = 1 this is exactly greedy
    decoding. ``model`` needs encode / init_cache / decode_step (the cache's
    ``layers[i]['k'|'v']`` are reordered between steps).
    """
    k = beam_size
    neg = -1e9
    memory, mask = model.encode(src)
    n = tf.shape(src)[0]
    limits, max_len = decode_budgets(model, src, extra, max_len)
    memory = tf.repeat(memory, k, axis=0)                   # (N * k, T1, d_model)
    mask = tf.repeat(mask, k, axis=0)
    cache = model.init_cache(memory, mask, max_len)
    batch_offsets = (tf.range(n) * k)[:, None]              # (N, 1)

    alive_seq = tf.zeros((n, k, max_len), tf.int32)
    alive_logp = tf.tile(tf.concat([[0.0], tf.fill([k - 1], neg)], 0)[None], (n, 1))
    fin_seq = tf.zeros((n, k, max_len), tf.int32)
    fin_score = tf.fill((n, k), neg)
    tokens = tf.fill((n * k,), BOS_ID)

    def cond(i, tokens, alive_seq, alive_logp, fin_seq, fin_score, cache):
        best_possible = alive_logp[:, 0] / length_penalty(limits, alpha)
        open_ = tf.logical_and(alive_logp[:, 0] > neg / 2, best_possible > fin_score[:, -1])
        return tf.reduce_any(tf.logical_and(open_, i < limits))

    def body(i, tokens, alive_seq, alive_logp, fin_seq, fin_score, cache):
        old = (alive_seq, alive_logp, fin_seq, fin_score)
        logits, cache = model.decode_step(tokens, cache)
        vocab = tf.shape(logits)[-1]
        logp = tf.nn.log_softmax(tf.reshape(logits, (n, k, -1)), axis=-1)
        cand = tf.reshape(alive_logp[:, :, None] + logp, (n, -1))      # (N, k * V)
        top_logp, top_idx = tf.math.top_k(cand, k=k)
        beam, tok = top_idx // vocab, top_idx % vocab                 # (N, k)
        seq = tf.gather(alive_seq, beam, batch_dims=1)
        seq = keras.ops.slice_update(seq, [0, 0, i], tok[:, :, None])
        ended = tf.logical_or(tf.equal(tok, EOS_ID), top_logp <= neg / 2)
        # finished set: merge the newly ended hypotheses, keep the k best
        new_score = tf.where(tf.logical_and(tf.equal(tok, EOS_ID), top_logp > neg / 2),
                             top_logp / length_penalty(i + 1, alpha), neg)
        all_score = tf.concat([fin_score, new_score], axis=1)
        all_seq = tf.concat([fin_seq, seq], axis=1)
        fin_score, keep = tf.math.top_k(all_score, k=k)
        fin_seq = tf.gather(all_seq, keep, batch_dims=1)
        # alive set: the extensions that did not end; ended slots become empty
        alive_logp = tf.where(ended, neg, top_logp)
        order = tf.argsort(alive_logp, axis=1, direction="DESCENDING", stable=True)
        alive_logp = tf.gather(alive_logp, order, batch_dims=1)
        alive_seq = tf.gather(seq, order, batch_dims=1)
        tokens = tf.reshape(tf.gather(tok, order, batch_dims=1), (-1,))
        source_beam = tf.gather(beam, order, batch_dims=1)
        cache = _reorder_cache(cache, tf.reshape(source_beam + batch_offsets, (-1,)))
        # sentences past their own budget keep their state unchanged
        active = i < limits
        alive_seq, alive_logp, fin_seq, fin_score = (
            tf.where(tf.reshape(active, (-1,) + (1,) * (len(cur.shape) - 1)), cur, prev)
            for cur, prev in zip((alive_seq, alive_logp, fin_seq, fin_score), old))
        return i + 1, tokens, alive_seq, alive_logp, fin_seq, fin_score, cache

    i, _, alive_seq, alive_logp, fin_seq, fin_score, _ = tf.while_loop(
        cond, body, (tf.constant(0), tokens, alive_seq, alive_logp, fin_seq, fin_score, cache))
    # sentences with fewer than k finished hypotheses are completed from the alive
    # (unfinished) ones, which always rank after every finished hypothesis
    alive_len = tf.minimum(i, limits)[:, None]
    alive_score = tf.where(alive_logp > neg / 2,
                           alive_logp / length_penalty(alive_len, alpha), neg)
    all_score = tf.concat([fin_score, alive_score], axis=1)
    rank = tf.concat([fin_score, tf.where(alive_score > neg / 2, alive_score + neg / 4, neg)],
                     axis=1)
    all_seq = tf.concat([fin_seq, alive_seq], axis=1)
    _, keep = tf.math.top_k(rank, k=k)
    scores = tf.gather(all_score, keep, batch_dims=1)
    seqs = tf.gather(all_seq, keep, batch_dims=1)[:, :, :i]
    # PAD everything after the first </S>
    after = tf.cumsum(tf.cast(tf.equal(seqs, EOS_ID), tf.int32), axis=-1, exclusive=True) > 0
    return tf.where(after, PAD_ID, seqs), scores


def beam_decoder(model, beam_size: int, alpha: float = 0.6, max_len: int = 0):
    """A compiled ``fn(src (N, T1) int32, extra int32) -> (ids (N, k, L), scores (N, k))``.

    A tf.function graph; unlike the greedy loop it is not XLA-compiled: with its
    data-dependent buffer sizes, XLA on CPU (TF 2.21) crashed on it.
    """
    spec = [tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([], tf.int32)]
    return tf.function(
        lambda src, extra: beam_loop(model, src, extra, beam_size, alpha, max_len),
        input_signature=spec)

"""The encoder-decoder Transformer (paper section 3, figure 1) built from modules.py.

``Transformer.call((src, tgt_in))`` gives logits for teacher forcing; ``encode`` and
``decode_step`` with a plain-dict cache give incremental decoding (the loops that use
them are in greedy_search.py and beam_search.py). ``model_type`` picks a
:class:`variants.Variant` from :data:`VARIANTS`, which builds the layers.
"""

from __future__ import annotations

import dataclasses

import keras
import tensorflow as tf

from transformer_tf2.config import families, hparams
from transformer_tf2.kernels import fast_ops
from transformer_tf2.layers import attention, embeddings, modules, positions, recurrence
from transformer_tf2.models import universal, variants, weighted

# model_type -> its hook (variants.Variant); a new variant adds an entry here and its row to
# config's families.MODEL_TYPES (document_memory as the variant says: tests/test_model.py)
VARIANTS = {v.name: v for v in (variants.Variant(), weighted.Variant(), universal.Variant())}
# the keyword arguments of Transformer that are model settings
CONFIG_FIELDS = frozenset(f.name for f in dataclasses.fields(hparams.ModelConfig))


def check_config(c: hparams.ModelConfig) -> None:
    """ValueError for a config no model can be built from."""
    if c.share_embeddings and c.src_vocab_size != c.tgt_vocab_size:
        raise ValueError("share_embeddings needs one joint vocabulary")
    if c.model_type not in VARIANTS:
        raise ValueError(f"model_type must be one of {', '.join(VARIANTS)}, got {c.model_type!r}")
    problem = families.memory_problem(dataclasses.asdict(c))
    if problem:
        raise ValueError(problem)


def model_config(src_vocab_size, tgt_vocab_size, config, kwargs: dict) -> hparams.ModelConfig:
    """``config``, or one made of the vocabulary sizes and the ModelConfig fields among
    ``kwargs`` (taken out of it: the rest go to keras.Model)."""
    fields = {k: kwargs.pop(k) for k in list(kwargs) if k in CONFIG_FIELDS}
    if config is None:
        return hparams.ModelConfig(src_vocab_size, tgt_vocab_size, **fields)
    if fields or src_vocab_size is not None or tgt_vocab_size is not None:
        raise TypeError("give either config or its fields, not both")
    return config


def token_embeddings(c: hparams.ModelConfig) -> tuple:
    """(target, source) embeddings.TokenEmbedding (3.4): one object twice with
    ``share_embeddings`` (a joint vocabulary)."""
    emb = dict(d_model=c.d_model, init=c.embedding_init)
    tgt = embeddings.TokenEmbedding(c.tgt_vocab_size, **emb, name="tgt_embedding")
    if c.share_embeddings:
        return tgt, tgt
    return tgt, embeddings.TokenEmbedding(c.src_vocab_size, **emb, name="src_embedding")


def absolute_positions(c: hparams.ModelConfig, family) -> tuple:
    """(source, target) embeddings.PositionalEncoding of the absolute encoding the family
    adds (3.5: the sinusoid, or a learned table); a sinusoid that is not added where the
    family is relative alone."""
    kind = family.embedding_of(c) or "sinusoid"
    pos = dict(kind=kind, max_position=c.max_position, init=c.embedding_init)
    return tuple(
        embeddings.PositionalEncoding(c.d_model, **pos, name=f"{side}_position")
        for side in ("src", "tgt")
    )


def relative_positions(c: hparams.ModelConfig, family) -> tuple:
    """(source, target) positions.StackPosition of a relative ``family`` (one per stack,
    read by its layers' self-attention), or (None, None) for an absolute one."""
    if not family.relative:
        return None, None
    rel = dict(
        max_relative_position=c.max_relative_position,
        t5_buckets=c.t5_buckets,
        t5_max_distance=c.t5_max_distance,
    )
    return tuple(
        positions.StackPosition(
            c.position, c.d_model, c.num_heads, causal=causal, **rel, name=f"{side}_relative"
        )
        for side, causal in (("src", False), ("tgt", True))
    )


def stack_layer_args(model, c: hparams.ModelConfig) -> tuple[dict, dict]:
    """The keyword arguments of the encoder's and the decoder's layers (3.1-3.3): the
    sizes, dropout and TF1 switches of ``c``, the variant's own, and the positions the
    layers read (a relative family's StackPosition; the absolute encoding where the
    variant adds it in its layers)."""
    args = dict(
        d_model=c.d_model,
        num_heads=c.num_heads,
        d_ff=c.d_ff,
        dropout_rate=c.rate("residual"),
        norm=c.norm,
        attention_dropout=c.attention_dropout,
        qkv_activation=c.qkv_activation,
        qkv_bias=c.qkv_bias,
        output_projection=c.output_projection,
        layer_norm_epsilon=c.layer_norm_epsilon,
        **model.variant.layer_args(c),
    )
    enc_args, dec_args = dict(args), dict(args)
    if model.encoding.relative:
        enc_args["relative_position"] = model.src_relative
        dec_args["relative_position"] = model.tgt_relative
    if model.variant.positions_in_layers:  # the layers add the absolute positions
        enc_args["position"] = model.src_position if model.absolute else None
        dec_args["position"] = model.tgt_position if model.absolute else None
    return enc_args, dec_args


def run_layer(layer, extras, *args, **kwargs):
    """One stack layer called with ``return_attention=True``: (output, weights). A layer
    may return a third element, a dict of tensors it reports for this pass (the Universal
    Transformer's ponder cost); it goes into ``extras`` (when given) under the layer's
    name, for Training.extra_loss and Variant.per_token."""
    x, w, *reported = layer(*args, return_attention=True, **kwargs)
    if reported and extras is not None:
        extras[layer.name] = reported[0]
    return x, w


def _one_kernel_cross_attention(layer) -> bool:
    """Whether a decoder layer's cross-attention step is the paper's attention in float32
    with no relative positions: one C++ kernel where the decoder's kernels hold it
    (attention.MultiHeadAttention.attend_step), not a variant's (a weighted model's
    branches)."""
    attn = layer.cross_attn
    return (
        type(attn) is attention.MultiHeadAttention
        and attn.relative is None
        and attn.compute_dtype == "float32"
    )


@keras.saving.register_keras_serializable(package="transformer")
class Transformer(keras.Model):
    """Encoder and decoder stacks of ``num_blocks`` layers each (3.1).

    Embeddings (3.4): one matrix for source, target and the pre-softmax projection when
    ``share_embeddings`` (joint BPE vocabulary); otherwise a source embedding and a target
    embedding tied to the output projection. Dropout on the embedding sums (5.4).

    Every setting comes from one :class:`hparams.ModelConfig` (``self.config``), whose
    fields are also this model's ``get_config`` and the checkpoint keys, each with its
    ``Hparams`` default (the demo's model; the paper's base model is the iwslt2016
    presets'). The switches where the TF1 code differs from the paper default to the
    paper's model (docs/model.md): ``embedding_dropout`` / ``residual_dropout`` (negative:
    ``dropout_rate``),
    the attention projections (``qkv_activation``, ``qkv_bias``, ``output_projection``),
    the padding masks (``query_masking``: PAD queries get zero attention weights;
    ``key_mask_defect``: no padding mask at all, as the TF1 code whose masks never
    fired), ``tie_softmax`` (False: :class:`embeddings.OutputProjection`),
    ``layer_norm_epsilon`` and ``embedding_init`` (token embeddings and learned position
    tables).

    ``position``: a family of positions.py (``self.encoding``): sinusoid (3.5) or learned,
    added to the embeddings; or a relative family (shaw, t5, xl, alibi, alibi_dir, rotary,
    settings ``max_relative_position``, ``t5_buckets``, ``t5_max_distance``) in every
    self-attention sublayer, one positions.StackPosition per stack (``src_relative``,
    ``tgt_relative``), with no absolute position added unless ``position_add_absolute``
    (then the sinusoid).

    Args:
        src_vocab_size, tgt_vocab_size: V of each side (a joint BPE vocabulary: the same).
        config: a :class:`hparams.ModelConfig`; or its fields as keywords.
        :meth:`from_hparams` builds one from a run's hyperparameters.

    call: (src (N, T1), tgt_in (N, T2)) ids -> logits (N, T2, V) float32; :meth:`encode`:
    src -> memory (N, T1, d_model), mask (N, 1, 1, T1); :meth:`init_cache` and
    :meth:`decode_step` decode one position at a time with a key/value cache.

    Example:

    >>> import tensorflow as tf
    >>> from transformer_tf2.config import families, hparams
    >>> from transformer_tf2.models.model import Transformer
    >>> sizes = {"d_model": 16, "num_heads": 4, "d_ff": 32, "num_blocks": 2}
    >>> hp = hparams.apply(hparams.Hparams(), sizes)  # the demo's model, smaller
    >>> model = Transformer.from_hparams(hp, src_vocab_size=24, tgt_vocab_size=24)
    >>> src = tf.constant([[5, 6, 7, 3]])  # (N, T1) source ids
    >>> tgt_in = tf.constant([[2, 9, 10]])  # (N, T2) the decoder's inputs
    >>> model((src, tgt_in)).shape
    TensorShape([1, 3, 24])
    >>> memory, mask = model.encode(src)
    >>> memory.shape, mask.shape
    (TensorShape([1, 4, 16]), TensorShape([1, 1, 1, 4]))

    References:
        Vaswani et al. 2017, "Attention Is All You Need": 3.1 (the stacks), 3.4 (shared
        embeddings), 3.5 (positional encoding).
    """

    def __init__(
        self,
        src_vocab_size: int | None = None,
        tgt_vocab_size: int | None = None,
        *,
        config: hparams.ModelConfig | None = None,
        **kwargs,
    ):
        """Either ``config`` or the vocabulary sizes and any :class:`hparams.ModelConfig`
        fields as keywords (how Keras rebuilds the model from ``get_config``); the other
        keywords go to keras.Model."""
        config = model_config(src_vocab_size, tgt_vocab_size, config, kwargs)
        super().__init__(**kwargs)
        c = self.config = config
        check_config(c)
        self.model_type = c.model_type
        self.variant = VARIANTS[c.model_type]
        self.memory_sentences = c.memory_sentences
        self.target_memory_sentences = c.target_memory_sentences
        # the sentences before a sentence that its context reads, and their targets
        self.context_depths = recurrence.context_depths(
            c.num_blocks, c.memory_sentences, c.target_memory_sentences
        )
        self.reads_documents = bool(c.memory_sentences or c.target_memory_sentences)
        self.d_model, self.norm, self.position = c.d_model, c.norm, c.position
        self.max_position = c.max_position
        self.query_masking, self.key_mask_defect = c.query_masking, c.key_mask_defect
        self.tie_softmax = c.tie_softmax
        self.tgt_embedding, self.src_embedding = token_embeddings(c)
        self.encoding = family = positions.get(c.position)  # the position family
        self.max_length = family.max_length(c)  # the longest sequence it places, or None
        # the absolute encoding added to the embeddings (none with a relative family alone)
        self.absolute = family.embedding_of(c) is not None
        self.src_position, self.tgt_position = absolute_positions(c, family)
        self.src_relative, self.tgt_relative = relative_positions(c, family)
        rate = c.rate("embedding")
        self.src_dropout = keras.layers.Dropout(rate)
        self.tgt_dropout = keras.layers.Dropout(rate)
        enc_args, dec_args = stack_layer_args(self, c)
        # Each layer is a direct attribute (not a list) so that tf.train.Checkpoint,
        # which does not follow Keras-tracked lists, saves its weights.
        self.num_blocks = self.variant.num_layers(c.num_blocks)
        for i in range(self.num_blocks):
            setattr(
                self, f"encoder_{i}", self.variant.encoder_layer(**enc_args, name=f"encoder_{i}")
            )
            setattr(
                self, f"decoder_{i}", self.variant.decoder_layer(**dec_args, name=f"decoder_{i}")
            )
        if c.norm == "pre":
            self.encoder_norm = modules.layer_norm("encoder_norm", c.layer_norm_epsilon)
            self.decoder_norm = modules.layer_norm("decoder_norm", c.layer_norm_epsilon)
        if not c.tie_softmax:
            self.output_layer = embeddings.OutputProjection(
                c.tgt_vocab_size, c.d_model, name="output"
            )

    @property
    def encoder_layers(self) -> list:
        return [getattr(self, f"encoder_{i}") for i in range(self.num_blocks)]

    @property
    def decoder_layers(self) -> list:
        return [getattr(self, f"decoder_{i}") for i in range(self.num_blocks)]

    @classmethod
    def from_hparams(cls, hp, src_vocab_size: int, tgt_vocab_size: int) -> "Transformer":
        config = hparams.ModelConfig.from_hparams(hp, src_vocab_size, tgt_vocab_size)
        model = cls(config=config, name="transformer")
        model.build_all()
        return model

    def build(self, input_shape=None):
        """Create every weight (input_shape is unused: all shapes follow from d_model)."""
        x = (None, None, self.d_model)
        for layer in (
            self.src_embedding,
            self.tgt_embedding,
            self.src_position,
            self.tgt_position,
            *[r for r in (self.src_relative, self.tgt_relative) if r is not None],
            *self.encoder_layers,
        ):
            if not layer.built:  # the embedding may be shared
                layer.build(x)
        for layer in self.decoder_layers:
            layer.build(x, x)
        if self.norm == "pre":
            self.encoder_norm.build(x)
            self.decoder_norm.build(x)
        if not self.tie_softmax:
            self.output_layer.build(x)
        self.built = True

    def build_all(self):
        """Build the weights and trace call() once on a 1-token batch."""
        one = tf.ones((1, 1), tf.int32)
        self((one, one), training=False)

    # -- the two stacks -------------------------------------------------------------------
    def embed(self, ids, embedding, position, dropout, training, offset=0):
        x = embedding(ids)
        if self.absolute and not self.variant.positions_in_layers:
            x = position(x, offset=offset)
        return dropout(x, training=training)

    def masks(self, ids):
        """The padding masks of a batch of ids (N, T): keys (N, 1, 1, T), True where a
        token may be attended to, and queries (N, 1, T, 1) with ``query_masking``, else
        None. With ``key_mask_defect`` neither masks anything (all True, None), as in the
        TF1 code, which read them off the embeddings after the positions were added."""
        if self.key_mask_defect:
            return tf.ones_like(attention.padding_mask(ids)), None
        queries = attention.query_padding_mask(ids) if self.query_masking else None
        return attention.padding_mask(ids), queries

    def encode(
        self,
        src,
        training=False,
        return_attention=False,
        extras=None,
        context=None,
        layer_inputs=None,
    ):
        """src (N, T1) ids -> memory (N, T1, d_model), mask (N, 1, 1, T1) [, weights].
        ``extras``: a dict that receives what the layers report (see _run_layer).
        ``context``: per encoder layer, (states (N, T_m, d_model), mask (N, 1, 1, T_m)) of
        earlier sentences, which that layer's self-attention attends to as well (see
        :func:`recurrence.encode_in_context`). ``layer_inputs``: a list that receives each layer's
        input (N, T1, d_model) under stop-gradient, what a later sentence's context keeps
        of this one (:func:`recurrence.sentence_states`, computed in the same pass)."""
        mask, query_mask = self.masks(src)
        x = self.embed(src, self.src_embedding, self.src_position, self.src_dropout, training)
        weights = []
        for i, layer in enumerate(self.encoder_layers):
            if layer_inputs is not None:
                layer_inputs.append(tf.stop_gradient(x))
            x, w = run_layer(
                layer,
                extras,
                x,
                mask,
                training=training,
                query_mask=query_mask,
                **recurrence.layer_context(context, i),
            )
            weights.append(w)
        if self.norm == "pre":
            x = self.encoder_norm(x)
        return (x, mask, weights) if return_attention else (x, mask)

    def forward(self, src, tgt_in, context_ids=None, context_tgt=None, training=False, extras=None):
        """The teacher-forced pass: decoder output (N, T2, d_model) before the projection,
        with the document context of :func:`recurrence.document_windows` for a model with memory
        (``context_ids`` (N, K, T_c) sources and ``context_tgt`` (N, K_t, T_t) decoder
        inputs of the sentences before, as data_load.context_batch builds them)."""
        enc_window, dec_window = recurrence.document_windows(self, context_ids, context_tgt)
        memory, mask = self.encode(
            src, training=training, extras=extras, context=recurrence.context_of(enc_window)
        )
        return self.decode(
            tgt_in,
            memory,
            mask,
            training=training,
            extras=extras,
            context=recurrence.context_of(dec_window),
        )

    def decode(
        self,
        tgt_in,
        memory,
        memory_mask,
        training=False,
        return_attention=False,
        extras=None,
        context=None,
    ):
        """tgt_in (N, T2) ids -> decoder output (N, T2, d_model) before the projection
        [, weights]; ``extras`` as in :meth:`encode`. ``context``: per decoder layer, the
        (states, mask) of earlier target sentences (:func:`recurrence.target_states`, through
        :func:`recurrence.context_of`), which that layer's self-attention attends to as well."""
        x = self.embed(tgt_in, self.tgt_embedding, self.tgt_position, self.tgt_dropout, training)
        self_mask = attention.causal_mask(tf.shape(tgt_in)[1])
        query_mask = self.masks(tgt_in)[1]
        weights = []
        for i, layer in enumerate(self.decoder_layers):
            x, w = run_layer(
                layer,
                extras,
                x,
                memory,
                self_mask,
                memory_mask,
                training=training,
                query_mask=query_mask,
                **recurrence.layer_context(context, i, recurrence.DECODER_MEMORY),
            )
            weights.append(w)
        if self.norm == "pre":
            x = self.decoder_norm(x)
        return (x, weights) if return_attention else x

    def logits(self, hidden, transposed=None):
        """(..., d_model) -> (..., V) float32 via the tied embedding (3.4), or the output
        projection of its own (``tie_softmax`` False). ``transposed``: the tied matrix
        already transposed, as :meth:`init_cache` keeps it for the decoding steps."""
        if self.tie_softmax:
            return self.tgt_embedding.logits(hidden, transposed)
        return self.output_layer.logits(hidden)

    def call(self, inputs, training=False):
        """inputs = (src (N, T1), tgt_in (N, T2)) -> logits (N, T2, V) float32; with
        document memory also (..., context (N, K, T_c)[, context_tgt (N, K_t, T_t)]), the
        K sentences before each source in its document and the decoder inputs of the last
        K_t of them (:meth:`forward`)."""
        return self.logits(self.forward(*inputs, training=training))

    # -- incremental decoding ------------------------------------------------------------
    def init_cache(self, memory, memory_mask, context=None):
        """The decoding cache, a plain dict: ``step`` (scalar int32), ``memory_mask``
        (N, 1, 1, T1), ``output`` (the tied output matrix as (d_model, V8), transposed
        once for all the steps, or a (0,) placeholder) and ``layers``, one dict per decoder
        layer made by its ``init_cache`` (for the paper's layer: the self-attention
        keys/values of the positions decoded so far (N, h, step, d_k) and the
        cross-attention keys/values (N, h, T1, d_k); with ``context``, the decoder's
        memory as :meth:`decode` takes it, also the earlier target sentences' keys/values).
        ``memory_mask`` and every layer entry have the batch on axis 0; ``order`` (N,)
        int32: the rows of the layers' self-attention keys/values that each row of the
        batch continues, gathered at the next step (:meth:`lazy_reorder`); where
        :meth:`reads_memory_rows`, ``memory_rows`` (N,) int32: the row of the encoder's
        side (``memory_mask``, each layer's ``cross_k``, ``cross_v``) that each row reads."""
        output = self.tgt_embedding.transposed() if self.tie_softmax else tf.zeros((0,))
        layers = [
            layer.init_cache(memory, **({} if context is None else {"earlier": context[i]}))
            for i, layer in enumerate(self.decoder_layers)
        ]
        n = tf.shape(memory)[0]
        cache = {"step": tf.constant(0, tf.int32), "memory_mask": memory_mask}
        cache.update(output=output, layers=layers, order=tf.range(n))
        if self.reads_memory_rows():
            cache["memory_rows"] = tf.range(n)
        return cache

    def pin_output(self) -> None:
        """The tied output matrix transposed once, for the decoders traced from now on
        (embeddings.TokenEmbedding.pin_transposed; nothing with a projection of its own,
        ``tie_softmax`` False, whose matrix is already (d_model, V))."""
        if self.tie_softmax:
            self.tgt_embedding.pin_transposed()

    def lazy_reorder(self) -> bool:
        """Whether the decoding step traced now gathers the rows of the self-attention
        keys/values as it appends a position (fast_ops.gather_append: one copy, where the
        decoder's kernels hold the C++ library and the layers are the paper's), so that
        :meth:`select_rows` only records the rows in ``order``; else it gathers the
        keys/values at once."""
        return fast_ops.kernels().decode_lib is not None and all(
            isinstance(layer, modules.DecoderLayer) for layer in self.decoder_layers
        )

    def reads_memory_rows(self) -> bool:
        """Whether the decoding step traced now reads the encoder's side of the cache
        (``memory_mask`` and each layer's ``cross_k``, ``cross_v``) in place, row
        ``memory_rows[r]`` for batch row r: where :meth:`lazy_reorder` and every
        cross-attention runs as one C++ kernel (float32, no query mask, no relative
        positions; attention.MultiHeadAttention.attend_step). A beam's hypotheses then
        read one copy of their sentence's keys/values, and a search that picks rows
        (:meth:`select_rows`) copies none of them."""
        return (
            self.lazy_reorder()
            and not self.query_masking
            and all(_one_kernel_cross_attention(layer) for layer in self.decoder_layers)
        )

    def select_rows(self, cache, index):
        """The cache of the rows ``index`` (N',) of the batch: the hypotheses a beam step
        keeps (a row may be picked twice), the sentences a search keeps. Every per-row
        entry is gathered, but the self-attention keys/values at the next step where
        :meth:`lazy_reorder`, and the encoder's side where :meth:`reads_memory_rows`
        (its ``memory_rows`` are gathered instead)."""
        lazy = ("k", "v") if self.lazy_reorder() else ()
        kept = ("cross_k", "cross_v") if "memory_rows" in cache else ()

        def rows(key, entry):
            if key in lazy or key in kept:
                return entry
            return tf.nest.map_structure(lambda t: tf.gather(t, index), entry)

        layers = [{key: rows(key, entry) for key, entry in c.items()} for c in cache["layers"]]
        new = dict(cache, layers=layers, order=tf.gather(cache["order"], index))
        if kept:
            new["memory_rows"] = tf.gather(cache["memory_rows"], index)
        else:
            new["memory_mask"] = tf.gather(cache["memory_mask"], index)
        return new

    @staticmethod
    def cache_shapes(cache):
        """The shape invariants of a cache in a tf.while_loop: each entry keeps its rank,
        every dimension free (the batch shrinks, the self-attention keys grow), but the
        output matrix's, which does not change."""
        shapes = tf.nest.map_structure(lambda t: tf.TensorShape([None] * t.shape.rank), cache)
        return dict(shapes, output=cache["output"].shape)

    def decode_step(self, tokens, cache):
        """tokens (N,) at position cache['step'] -> (logits (N, V) float32, new cache)."""
        step = cache["step"]
        x = self.embed(
            tokens[:, None],
            self.tgt_embedding,
            self.tgt_position,
            self.tgt_dropout,
            False,
            offset=step,
        )
        query_mask = self.masks(tokens[:, None])[1]
        lazy = self.lazy_reorder()
        order = {"order": cache["order"]} if lazy else {}
        if "memory_rows" in cache:
            order["memory_rows"] = cache["memory_rows"]
        layers = []
        for layer, layer_cache in zip(self.decoder_layers, cache["layers"]):
            x, layer_cache = layer.step(
                x, layer_cache, step, cache["memory_mask"], query_mask, **order
            )
            layers.append(layer_cache)
        if self.norm == "pre":
            x = self.decoder_norm(x)
        output = cache["output"] if self.tie_softmax else None
        new = dict(cache, step=step + 1, layers=layers)
        if lazy:  # the keys/values now follow the rows of tokens
            new["order"] = tf.range(tf.shape(tokens)[0])
        return self.logits(x[:, 0], output), new

    def get_config(self):
        return {**super().get_config(), **dataclasses.asdict(self.config)}

    def specs_lines(self) -> list[str]:
        """'name shape' for every variable, the variant's own lines (a weighted model's
        kappa and alpha per layer), then the total parameter count: the run's specs."""
        lines = [f"{v.path}\t{tuple(v.shape)}" for v in self.weights]
        lines += self.variant.specs_lines(self)
        lines.append(f"total parameters: {self.count_params():,}")
        return lines

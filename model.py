"""The encoder-decoder Transformer (paper section 3, figure 1) built from modules.py.

``Transformer.call((src, tgt_in))`` gives logits for teacher forcing; ``encode`` and
``decode_step`` with a plain-dict cache give incremental decoding (the loops that use
them are in decoding.py). ``model_type`` picks a :class:`modules.Variant` from
:data:`VARIANTS`, which builds the layers.
"""

from __future__ import annotations

import keras
import tensorflow as tf

import hparams
import modules
import relative
import universal
import weighted

# model_type -> its hook (modules.Variant); a new variant adds an entry here and its name to
# hparams.CHOICES['model_type']
VARIANTS = {v.name: v for v in (modules.Variant(), weighted.Variant(), universal.Variant())}


@keras.saving.register_keras_serializable(package="transformer")
class Transformer(keras.Model):
    """Encoder and decoder stacks of ``num_blocks`` layers each (3.1).

    Embeddings (3.4): one matrix for source, target and the pre-softmax projection when
    ``share_embeddings`` (joint BPE vocabulary); otherwise a source embedding and a target
    embedding tied to the output projection. Dropout on the embedding sums (5.4).

    The arguments after ``model_type`` are the switches where the TF1 code differs from
    the paper; their defaults are the paper's model (README "The TF1 model"):
    ``embedding_dropout`` / ``residual_dropout`` (None: ``dropout_rate``), the attention
    projections (``qkv_activation``, ``qkv_bias``, ``output_projection``), the padding
    masks (``query_masking``: PAD queries get zero attention weights; ``key_mask_defect``:
    no padding mask at all, as the TF1 code whose masks never fired), ``tie_softmax``
    (False: :class:`modules.OutputProjection`), ``layer_norm_epsilon`` and
    ``embedding_init`` (token embeddings and learned position tables).

    ``position``: sinusoid (3.5) or learned, added to the embeddings; or a relative family
    of relative.py (shaw, t5, xl, alibi, rotary, settings ``max_relative_position``,
    ``t5_buckets``, ``t5_max_distance``) in every self-attention sublayer, one
    relative.StackPosition per stack (``src_relative``, ``tgt_relative``), with no
    absolute position added unless ``position_add_absolute`` (then the sinusoid).
    """

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        d_model: int = 512,
        d_ff: int = 2048,
        num_blocks: int = 6,
        num_heads: int = 8,
        dropout_rate: float = 0.1,
        position: str = "sinusoid",
        max_position: int = 1024,
        norm: str = "post",
        share_embeddings: bool = True,
        attention_dropout: float = 0.0,
        model_type: str = "transformer",
        ut_max_steps: int = 6,
        act: bool = True,
        act_epsilon: float = 0.01,
        act_loss_weight: float = 0.01,
        embedding_dropout: float | None = None,
        residual_dropout: float | None = None,
        qkv_activation: str = "none",
        qkv_bias: bool = False,
        output_projection: bool = True,
        query_masking: bool = False,
        key_mask_defect: bool = False,
        tie_softmax: bool = True,
        layer_norm_epsilon: float = modules.LAYER_NORM_EPSILON,
        embedding_init: str = "normal",
        max_relative_position: int = 16,
        t5_buckets: int = 32,
        t5_max_distance: int = 128,
        position_add_absolute: bool = False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if share_embeddings and src_vocab_size != tgt_vocab_size:
            raise ValueError("share_embeddings needs one joint vocabulary")
        if model_type not in VARIANTS:
            raise ValueError(f"model_type must be one of {', '.join(VARIANTS)}, got {model_type!r}")
        self.args = dict(
            src_vocab_size=src_vocab_size,
            tgt_vocab_size=tgt_vocab_size,
            d_model=d_model,
            d_ff=d_ff,
            num_blocks=num_blocks,
            num_heads=num_heads,
            dropout_rate=dropout_rate,
            position=position,
            max_position=max_position,
            norm=norm,
            share_embeddings=share_embeddings,
            attention_dropout=attention_dropout,
            model_type=model_type,
            ut_max_steps=ut_max_steps,
            act=act,
            act_epsilon=act_epsilon,
            act_loss_weight=act_loss_weight,
            embedding_dropout=embedding_dropout,
            residual_dropout=residual_dropout,
            qkv_activation=qkv_activation,
            qkv_bias=qkv_bias,
            output_projection=output_projection,
            query_masking=query_masking,
            key_mask_defect=key_mask_defect,
            tie_softmax=tie_softmax,
            layer_norm_epsilon=layer_norm_epsilon,
            embedding_init=embedding_init,
            max_relative_position=max_relative_position,
            t5_buckets=t5_buckets,
            t5_max_distance=t5_max_distance,
            position_add_absolute=position_add_absolute,
        )
        self.model_type = model_type
        self.variant = VARIANTS[model_type]
        self.d_model, self.norm, self.position = d_model, norm, position
        self.max_position = max_position
        self.query_masking, self.key_mask_defect = query_masking, key_mask_defect
        self.tie_softmax = tie_softmax
        emb = dict(d_model=d_model, init=embedding_init)
        self.tgt_embedding = modules.TokenEmbedding(tgt_vocab_size, **emb, name="tgt_embedding")
        self.src_embedding = (
            self.tgt_embedding
            if share_embeddings
            else modules.TokenEmbedding(src_vocab_size, **emb, name="src_embedding")
        )
        is_relative = position in relative.KINDS
        # the absolute encoding added to the embeddings (none with a relative family alone)
        self.absolute = not is_relative or position_add_absolute
        kind = "sinusoid" if is_relative else position
        pos = dict(kind=kind, max_position=max_position, init=embedding_init)
        self.src_position = modules.PositionalEncoding(d_model, **pos, name="src_position")
        self.tgt_position = modules.PositionalEncoding(d_model, **pos, name="tgt_position")
        self.src_relative = self.tgt_relative = None
        if is_relative:
            rel = dict(
                max_relative_position=max_relative_position,
                t5_buckets=t5_buckets,
                t5_max_distance=t5_max_distance,
            )
            self.src_relative = relative.StackPosition(
                position, d_model, num_heads, causal=False, **rel, name="src_relative"
            )
            self.tgt_relative = relative.StackPosition(
                position, d_model, num_heads, causal=True, **rel, name="tgt_relative"
            )
        rate = dropout_rate if embedding_dropout is None else embedding_dropout
        self.src_dropout = keras.layers.Dropout(rate)
        self.tgt_dropout = keras.layers.Dropout(rate)
        layer_args = dict(
            d_model=d_model,
            num_heads=num_heads,
            d_ff=d_ff,
            dropout_rate=dropout_rate if residual_dropout is None else residual_dropout,
            norm=norm,
            attention_dropout=attention_dropout,
            qkv_activation=qkv_activation,
            qkv_bias=qkv_bias,
            output_projection=output_projection,
            layer_norm_epsilon=layer_norm_epsilon,
            **self.variant.layer_args(self.args),
        )
        enc_args, dec_args = dict(layer_args), dict(layer_args)
        if is_relative:
            enc_args["relative_position"] = self.src_relative
            dec_args["relative_position"] = self.tgt_relative
        if self.variant.positions_in_layers:  # the layers add the absolute positions
            enc_args["position"] = self.src_position if self.absolute else None
            dec_args["position"] = self.tgt_position if self.absolute else None
        # Each layer is a direct attribute (not a list) so that tf.train.Checkpoint,
        # which does not follow Keras-tracked lists, saves its weights.
        self.num_blocks = self.variant.num_layers(num_blocks)
        for i in range(self.num_blocks):
            setattr(
                self, f"encoder_{i}", self.variant.encoder_layer(**enc_args, name=f"encoder_{i}")
            )
            setattr(
                self, f"decoder_{i}", self.variant.decoder_layer(**dec_args, name=f"decoder_{i}")
            )
        if norm == "pre":
            self.encoder_norm = modules.layer_norm("encoder_norm", layer_norm_epsilon)
            self.decoder_norm = modules.layer_norm("decoder_norm", layer_norm_epsilon)
        if not tie_softmax:
            self.output_layer = modules.OutputProjection(tgt_vocab_size, d_model, name="output")

    @property
    def encoder_layers(self) -> list:
        return [getattr(self, f"encoder_{i}") for i in range(self.num_blocks)]

    @property
    def decoder_layers(self) -> list:
        return [getattr(self, f"decoder_{i}") for i in range(self.num_blocks)]

    @classmethod
    def from_hparams(cls, hp, src_vocab_size: int, tgt_vocab_size: int) -> "Transformer":
        model = cls(
            src_vocab_size,
            tgt_vocab_size,
            d_model=hp.d_model,
            d_ff=hp.d_ff,
            num_blocks=hp.num_blocks,
            num_heads=hp.num_heads,
            dropout_rate=hp.dropout_rate,
            position=hp.position,
            max_position=hp.max_position,
            norm=hp.norm,
            share_embeddings=hp.share_embeddings,
            attention_dropout=hp.attention_dropout,
            model_type=hp.model_type,
            ut_max_steps=hp.ut_max_steps,
            act=hp.act,
            act_epsilon=hp.act_epsilon,
            act_loss_weight=hp.act_loss_weight,
            embedding_dropout=hparams.dropout(hp, "embedding"),
            residual_dropout=hparams.dropout(hp, "residual"),
            qkv_activation=hp.qkv_activation,
            qkv_bias=hp.qkv_bias,
            output_projection=hp.output_projection,
            query_masking=hp.query_masking,
            key_mask_defect=hp.key_mask_defect,
            tie_softmax=hp.tie_softmax,
            layer_norm_epsilon=hp.layer_norm_epsilon,
            embedding_init=hp.embedding_init,
            max_relative_position=hp.max_relative_position,
            t5_buckets=hp.t5_buckets,
            t5_max_distance=hp.t5_max_distance,
            position_add_absolute=hp.position_add_absolute,
            name="transformer",
        )
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
    def _embed(self, ids, embedding, position, dropout, training, offset=0):
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
            return tf.ones_like(modules.padding_mask(ids)), None
        queries = modules.query_padding_mask(ids) if self.query_masking else None
        return modules.padding_mask(ids), queries

    def encode(self, src, training=False, return_attention=False):
        """src (N, T1) ids -> memory (N, T1, d_model), mask (N, 1, 1, T1) [, weights]."""
        mask, query_mask = self.masks(src)
        x = self._embed(src, self.src_embedding, self.src_position, self.src_dropout, training)
        weights = []
        for layer in self.encoder_layers:
            x, w = layer(x, mask, training=training, return_attention=True, query_mask=query_mask)
            weights.append(w)
        if self.norm == "pre":
            x = self.encoder_norm(x)
        return (x, mask, weights) if return_attention else (x, mask)

    def decode(self, tgt_in, memory, memory_mask, training=False, return_attention=False):
        """tgt_in (N, T2) ids -> decoder output (N, T2, d_model) before the projection."""
        x = self._embed(tgt_in, self.tgt_embedding, self.tgt_position, self.tgt_dropout, training)
        self_mask = modules.causal_mask(tf.shape(tgt_in)[1])
        query_mask = self.masks(tgt_in)[1]
        weights = []
        for layer in self.decoder_layers:
            x, w = layer(
                x,
                memory,
                self_mask,
                memory_mask,
                training=training,
                return_attention=True,
                query_mask=query_mask,
            )
            weights.append(w)
        if self.norm == "pre":
            x = self.decoder_norm(x)
        return (x, weights) if return_attention else x

    def logits(self, hidden):
        """(..., d_model) -> (..., V) float32 via the tied embedding (3.4), or the output
        projection of its own (``tie_softmax`` False)."""
        if self.tie_softmax:
            return self.tgt_embedding.logits(hidden)
        return self.output_layer.logits(hidden)

    def call(self, inputs, training=False):
        """inputs = (src (N, T1), tgt_in (N, T2)) -> logits (N, T2, V) float32."""
        src, tgt_in = inputs
        memory, mask = self.encode(src, training=training)
        return self.logits(self.decode(tgt_in, memory, mask, training=training))

    # -- incremental decoding ------------------------------------------------------------
    def init_cache(self, memory, memory_mask, max_len):
        """The decoding cache, a plain dict: ``step`` (scalar int32), ``memory_mask``
        (N, 1, 1, T1) and ``layers``, one dict per decoder layer made by its
        ``init_cache`` (for the paper's layer: self-attention keys/values
        (N, h, max_len, d_k) and cross-attention keys/values (N, h, T1, d_k))."""
        return {
            "step": tf.constant(0, tf.int32),
            "memory_mask": memory_mask,
            "layers": [layer.init_cache(memory, max_len) for layer in self.decoder_layers],
        }

    def reorder_cache(self, cache, index):
        """The cache of rows ``index`` (N',) of the batch (beam search)."""
        layers = [
            layer.reorder_cache(c, index) for layer, c in zip(self.decoder_layers, cache["layers"])
        ]
        return dict(cache, layers=layers)

    def decode_step(self, tokens, cache):
        """tokens (N,) at position cache['step'] -> (logits (N, V) float32, new cache)."""
        step = cache["step"]
        x = self._embed(
            tokens[:, None],
            self.tgt_embedding,
            self.tgt_position,
            self.tgt_dropout,
            False,
            offset=step,
        )
        query_mask = self.masks(tokens[:, None])[1]
        layers = []
        for layer, layer_cache in zip(self.decoder_layers, cache["layers"]):
            x, layer_cache = layer.step(x, layer_cache, step, cache["memory_mask"], query_mask)
            layers.append(layer_cache)
        if self.norm == "pre":
            x = self.decoder_norm(x)
        new = {"step": step + 1, "memory_mask": cache["memory_mask"], "layers": layers}
        return self.logits(x[:, 0]), new

    def get_config(self):
        return {**super().get_config(), **self.args}

    def specs_lines(self) -> list[str]:
        """'name shape' for every variable, the variant's own lines (a weighted model's
        kappa and alpha per layer), then the total parameter count: the run's specs."""
        lines = [f"{v.path}\t{tuple(v.shape)}" for v in self.weights]
        lines += self.variant.specs_lines(self)
        lines.append(f"total parameters: {self.count_params():,}")
        return lines

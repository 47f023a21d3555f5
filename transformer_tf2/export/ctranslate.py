"""A trained model as a CTranslate2 model directory: ``export.py --format ctranslate2``
and the CTranslate2 rows of ``bench/decode.py``.

CTranslate2 (``pip install ctranslate2``, the ``[export]`` extra) is a C++ inference
engine for Transformer models. The conversion fills its ``TransformerSpec`` with this
model's weights, so that it computes the same function:

* each weight matrix transposed to its (out, in) layout; W^Q, W^K, W^V of a
  self-attention sublayer as one (3 d_model, d_model) matrix, W^K, W^V of a
  cross-attention one as one (2 d_model, d_model) matrix; W^O the identity where the
  model has none (``output_projection`` false);
* each sublayer's LayerNorm where CTranslate2 keeps it (post-norm: after the residual
  sum, 3.1; pre-norm: before the sublayer, with the stacks' final LayerNorms), at the
  model's ``layer_norm_epsilon``;
* the token embeddings, scaled by sqrt(d_model) as in 3.4, and the absolute positions as
  an explicit table of ``source_limit`` rows read off the model's own position layer (the
  sinusoid of 3.5 interleaves sine and cosine, which CTranslate2's built-in one does
  not), so a learned table converts the same way;
* the relative families CTranslate2's attention implements: Shaw's a^K and a^V of each
  self-attention sublayer (its ``relative_position``, the distance j - i clipped at
  ``max_relative_position``, one pair of tables shared by the heads, as ours); T5's
  bias table of each stack in every self-attention sublayer of that stack (its
  ``relative_attention_bias``: T5's buckets, both directions in the encoder and the
  past in the decoder, ``t5_max_distance``; the bias added to the scaled scores, as
  ours); rotary positions on the queries and keys of every self-attention sublayer
  (pairs of dimensions (2i, 2i + 1) at base 10000: ``rotary_interleave``), the
  encoder's absolute table then all zeros;
* the output projection: the tied embedding (3.4) or the model's own, with its bias;
* the vocabulary, one token per embedding row (sentencepiece pieces, or the words of a
  word vocabulary), with ``</S>`` appended to every source as the model was trained; the
  rows that round a table up to a multiple of 8 belong to no token and are left out.

What CTranslate2 has no place for is refused in one line (:func:`unsupported`): the
position families xl, alibi and alibi_dir, an absolute position added to a relative
family, the Weighted and Universal variants, document memory, activations or biases on
the Q/K/V projections and the TF1 key-mask defect.
"""

from __future__ import annotations

import os

import numpy as np

from transformer_tf2.config.hparams import UserError
from transformer_tf2.data import data_load
from transformer_tf2.decoding import greedy_search
from transformer_tf2.layers import positions
from transformer_tf2.utils import files

# the position families CTranslate2 computes as we do (absolute tables, or in its attention)
FAMILIES = (positions.Sinusoid, positions.Learned, positions.Shaw, positions.T5, positions.Rotary)
# the weight types CTranslate2 can store (``--quantization``); none keeps float32
QUANTIZATIONS = ("none", "int8", "int8_float32", "int8_float16", "int16", "float16", "bfloat16")


def unsupported(model) -> str | None:
    """Why ``model`` (a model.Transformer) cannot run in CTranslate2, or None."""
    c = model.config
    if c.model_type != "transformer":
        return f"model_type={c.model_type} has layers CTranslate2 does not implement"
    family = positions.get(c.position)
    if not isinstance(family, FAMILIES) or model.variant.positions_in_layers:
        return (
            f"position={c.position} has no counterpart in CTranslate2, which takes the "
            f"families {', '.join(f.name for f in FAMILIES)}"
        )
    if family.relative and c.position_add_absolute:
        return "position_add_absolute adds a sinusoid to a relative family; CTranslate2 takes one"
    if model.reads_documents:
        return "a model with document memory translates in context, which CTranslate2 cannot"
    if c.qkv_activation != "none" or c.qkv_bias:
        return "qkv_activation and qkv_bias have no place in CTranslate2's attention"
    if c.key_mask_defect:
        return "key_mask_defect=true attends to padding, which CTranslate2 masks"
    return None


def _linear(spec, kernel, bias=None) -> None:
    spec.weight = np.ascontiguousarray(np.asarray(kernel, np.float32).T)
    if bias is not None:
        spec.bias = np.asarray(bias, np.float32)


def _attention(spec, attn, norm, self_attention: bool) -> None:
    """One attention sublayer: the projections, the LayerNorm of its residual, and a
    self-attention sublayer's relative positions (Shaw's tables, T5's stack table)."""
    w = {name: getattr(attn, name).numpy() for name in ("w_q", "w_k", "w_v")}
    w_o = attn.w_o.numpy() if attn.output_projection else np.eye(attn.d_model, dtype=np.float32)
    if self_attention:
        _linear(spec.linear[0], np.concatenate([w["w_q"], w["w_k"], w["w_v"]], axis=1))
    else:
        _linear(spec.linear[0], w["w_q"])
        _linear(spec.linear[1], np.concatenate([w["w_k"], w["w_v"]], axis=1))
    _linear(spec.linear[-1], w_o)
    _norm(spec.layer_norm, norm)
    relative = attn.relative if self_attention else None
    family = relative.stack.family if relative is not None else None
    if isinstance(family, positions.Shaw):
        spec.relative_position_keys = relative.a_k.numpy()
        spec.relative_position_values = relative.a_v.numpy()
    elif isinstance(family, positions.T5):
        spec.relative_attention_bias = relative.stack.table.numpy()
        spec.relative_attention_max_distance = np.int32(relative.stack.t5_max_distance)


def _norm(spec, ln) -> None:
    spec.gamma = ln.gamma.numpy()
    spec.beta = ln.beta.numpy()


def _feed_forward(spec, ffn, norm) -> None:
    _linear(spec.linear_0, ffn.inner.kernel.numpy(), ffn.inner.bias.numpy())
    _linear(spec.linear_1, ffn.outer.kernel.numpy(), ffn.outer.bias.numpy())
    _norm(spec.layer_norm, norm)


def position_table(model, side: str) -> np.ndarray:
    """(source_limit, d_model) float32: the positions the model adds to ``side``'s
    embeddings (src or tgt), read off its own position layer."""
    import tensorflow as tf

    layer = model.src_position if side == "src" else model.tgt_position
    rows = greedy_search.source_limit(model)
    return layer(tf.zeros((1, rows, model.d_model)))[0].numpy().astype(np.float32)


def vocabulary(tok, rows: int, side: str) -> list[str]:
    """One token per embedding row: the tokenizer's pieces (BPE) or words of ``side``
    (src or tgt), data_load.RESERVED first."""
    return (tok.src_tokens if side == "src" else tok.tgt_tokens)(range(rows))


def model_spec(model, tok):
    """The ctranslate2.specs.TransformerSpec of ``model`` (a model.Transformer, built and
    restored) with its weights and vocabularies."""
    from ctranslate2.specs import transformer_spec as ts

    c = model.config
    pre = c.norm == "pre"
    family = positions.get(c.position)
    kind = dict(
        pre_norm=pre,
        relative_position=isinstance(family, positions.Shaw),
        relative_attention_bias=isinstance(family, positions.T5),
        rotary_dim=c.d_model // c.num_heads if isinstance(family, positions.Rotary) else None,
        rotary_interleave=True,
    )
    spec = ts.TransformerSpec(
        ts.TransformerEncoderSpec(c.num_blocks, c.num_heads, **kind),
        ts.TransformerDecoderSpec(c.num_blocks, c.num_heads, **kind),
    )
    spec.config.layer_norm_epsilon = float(c.layer_norm_epsilon)
    for name, token in zip(("unk_token", "bos_token", "eos_token"), data_load.RESERVED[1:]):
        setattr(spec.config, name, token)
    spec.config.decoder_start_token = data_load.RESERVED[data_load.BOS_ID]
    spec.config.add_source_eos = True
    enc, dec = spec.encoder, spec.decoder
    # the embedding tables without the rows that round V up to a multiple of 8 (they belong
    # to no token, and a softmax over them would count them)
    src_rows = model.src_embedding.embeddings.numpy()[: model.src_embedding.vocab_size]
    tgt_rows = model.tgt_embedding.embeddings.numpy()[: model.tgt_embedding.vocab_size]
    enc.embeddings[0].weight = src_rows
    dec.embeddings.weight = tgt_rows
    if model.absolute:
        enc.position_encodings.encodings = position_table(model, "src")
        dec.position_encodings.encodings = position_table(model, "tgt")
    elif hasattr(enc, "position_encodings"):  # rotary: the encoder still adds a table
        rows = (greedy_search.source_limit(model), c.d_model)
        enc.position_encodings.encodings = np.zeros(rows, np.float32)
    for layer, ours in zip(enc.layer, model.encoder_layers):
        _attention(layer.self_attention, ours.self_attn, ours.res1.ln, True)
        _feed_forward(layer.ffn, ours.ffn, ours.res2.ln)
    for layer, ours in zip(dec.layer, model.decoder_layers):
        _attention(layer.self_attention, ours.self_attn, ours.res1.ln, True)
        _attention(layer.attention, ours.cross_attn, ours.res2.ln, False)
        _feed_forward(layer.ffn, ours.ffn, ours.res3.ln)
    if pre:
        _norm(enc.layer_norm, model.encoder_norm)
        _norm(dec.layer_norm, model.decoder_norm)
    if model.tie_softmax:
        _linear(dec.projection, tgt_rows.T)
    else:
        _linear(dec.projection, model.output_layer.kernel.numpy(), model.output_layer.bias.numpy())
    spec.register_source_vocabulary(vocabulary(tok, len(src_rows), "src"))
    spec.register_target_vocabulary(vocabulary(tok, len(tgt_rows), "tgt"))
    return spec


def convert(model, tok, out_dir: str, quantization: str = "none", prepro_dir: str = "") -> str:
    """Writes the CTranslate2 model directory ``out_dir`` (via a temp folder, renamed when
    complete), with ``bpe.model`` beside the weights for a BPE run (from ``prepro_dir``)."""
    try:
        from ctranslate2.converters.converter import Converter
    except ImportError:
        raise UserError(
            "--format ctranslate2 needs CTranslate2: pip install ctranslate2 (or .[export])"
        ) from None
    problem = unsupported(model)
    if problem:
        raise UserError(f"cannot convert to CTranslate2: {problem}")
    if quantization not in QUANTIZATIONS:
        raise UserError(f"--quantization must be one of {', '.join(QUANTIZATIONS)}")

    class _Ours(Converter):
        def _load(self):
            return model_spec(model, tok)

    with files.atomic_path(out_dir) as tmp:
        _Ours().convert(tmp, quantization=None if quantization == "none" else quantization)
        if tok.kind == "bpe" and prepro_dir:
            with open(os.path.join(prepro_dir, "bpe.model"), "rb") as f:
                files.atomic_write(os.path.join(tmp, "bpe.model"), f.read())
    return out_dir


def source_tokens(tok, ids: list[list[int]]) -> list[list[str]]:
    """The token strings CTranslate2 takes for source ids (without </S>: the converted
    model's config appends it)."""
    return [tok.src_tokens(row) for row in ids]


def target_ids(tok, tokens: list[str]) -> list[int]:
    """Target ids of CTranslate2's output tokens (</S> not included there)."""
    if tok.kind == "bpe":
        return [tok.sp.piece_to_id(t) for t in tokens]
    return [tok.tgt_vocab.get(t, data_load.UNK_ID) for t in tokens]

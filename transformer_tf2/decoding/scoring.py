"""Given translations scored by the model (teacher forced), and word alignments from its
cross-attention: CTranslate2's ``score_batch`` and ``return_attention``, OpenNMT-tf's
``score`` run type and ``with_alignments``. Used by the Translator (translate.py --score,
--alignments), eval.py's contrastive accuracy and the tests.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from transformer_tf2.data import data_load


def label_log_probs(logits, labels):
    """(N, T) float32: the log-probability of each label (N, T) int32 under the logits (N,
    T, V) of a teacher-forced pass (log-softmax over V), 0 where the label is PAD. A
    translation's score is its row's sum: every token's, </S> included."""
    logp = tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)
    picked = tf.gather(logp, labels[..., None], batch_dims=2)[..., 0]
    return tf.where(tf.equal(labels, data_load.PAD_ID), 0.0, picked)


def teacher_forced(targets: list) -> tuple[np.ndarray, np.ndarray]:
    """(decoder inputs (N, T): <S> and each target's ids; labels (N, T): its ids and </S>),
    PAD after each row, for target id lists without </S>."""
    bos, eos = [data_load.BOS_ID], [data_load.EOS_ID]
    fed = data_load.pad_batch([np.asarray(bos + list(t), np.int32) for t in targets])
    labels = data_load.pad_batch([np.asarray(list(t) + eos, np.int32) for t in targets])
    return fed, labels


def scorer(model):
    """A compiled ``fn(src (N, T1) int32 with </S>, decoder inputs (N, T2) int32, labels
    (N, T2) int32) -> (N, T2) float32`` (:func:`label_log_probs`: one teacher-forced pass,
    section 3's model as in training with dropout off)."""
    spec = [tf.TensorSpec([None, None], tf.int32)] * 3
    return tf.function(
        lambda src, fed, labels: label_log_probs(model((src, fed)), labels),
        input_signature=spec,
        autograph=False,
    )


def alignment_layer(num_blocks: int) -> int:
    """The decoder layer whose cross-attention aligns: the last one, as fairseq's
    ``--print-alignment`` and CTranslate2's ``return_attention`` default to. On the demo's
    2-layer decoder it aligns far better than the penultimate one that Garg et al. 2019
    ("Jointly Learning to Align and Translate with Transformer Models", 3) found best in a
    6-layer decoder: ``python bench/alignment.py`` gives AER 0.19 for the last layer, 0.55
    for the first, and 0.48 for a diagonal guess. A low layer's attention at a position
    still follows the token it reads more than the one it predicts."""
    return num_blocks - 1


def aligner(model, layer: int | None = None):
    """A compiled ``fn(src (N, T1) int32 with </S>, decoder inputs (N, T2) int32) -> (N,
    T2, T1) float32``: the cross-attention (3.2.3) of decoder layer ``layer`` (None:
    :func:`alignment_layer`) averaged over its heads, at each decoder position (the one
    that predicts the position's output)."""
    layer = alignment_layer(model.num_blocks) if layer is None else layer

    def attention(src, fed):
        memory, mask = model.encode(src)
        _, weights = model.decode(fed, memory, mask, return_attention=True)
        return tf.reduce_mean(tf.cast(weights[layer][1], tf.float32), axis=1)

    spec = [tf.TensorSpec([None, None], tf.int32)] * 2
    return tf.function(attention, input_signature=spec, autograph=False)


def word_index(pieces: list[str], kind: str) -> list[int]:
    """The word each token belongs to: a word vocabulary's tokens are words; a
    sentencepiece token starting with "▁" starts a word, the others continue it."""
    if kind != "bpe":
        return list(range(len(pieces)))
    out, word = [], -1
    for piece in pieces:
        if piece.startswith("\u2581") or word < 0:
            word += 1
        out.append(word)
    return out


def hard_alignment(weights: np.ndarray, src_words: list[int], tgt_words: list[int]) -> str:
    """The Pharaoh alignment ``"i-j ..."`` (source word i, target word j, sorted) of one
    sentence: each target token (T2 rows of ``weights`` (T2, T1), </S> left out) is
    aligned to the source token it attends to most (T1 columns, </S> left out), and
    tokens to their words (``src_words``, ``tgt_words``: the word of each token)."""
    t1, t2 = len(src_words), len(tgt_words)
    if not t1 or not t2:
        return ""
    best = np.argmax(weights[:t2, :t1], axis=1)
    pairs = sorted({(src_words[s], tgt_words[t]) for t, s in enumerate(best)})
    return " ".join(f"{i}-{j}" for i, j in pairs)

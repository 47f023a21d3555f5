"""What a :meth:`Translator.translate_ids` call without document memory decodes, one
function per mode: the rows (each a sentence, or one of a sentence's sampling draws;
:func:`plan_rows`, where ``width`` > 0 keeps the empty sources), the extra inputs of a
batch's rows (the draw ids of sampling, :func:`draw_ids`; the forced target prefixes,
:func:`prefix_inputs`), and the decoded rows regrouped into one output per sentence
(:func:`regroup`). A :class:`Plan` holds them with the batches and the decoder (greedy,
beam of n best, prefixed or not) that the Translator chose. Plain numpy: each step is
tested alone (tests/test_translator.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from transformer_tf2.data import data_load


def plan_rows(src_ids: list, width: int = 0, draws: int = 1) -> list[int]:
    """The sentence of each row to decode, in the input order: every sentence with a
    token (with ``width`` > 0 every sentence: the TF1 protocol decodes an empty source
    from </S> alone), ``draws`` times in a row (a sentence's sampling draws side by side;
    :func:`draw_ids` and :func:`regroup` rely on it).

    >>> plan_rows([[5, 6], [], [7]], draws=2)
    [0, 0, 2, 2]
    >>> plan_rows([[5, 6], [], [7]], width=4)
    [0, 1, 2]
    """
    return [i for i, s in enumerate(src_ids) if len(s) or width for _ in range(draws)]


def draw_ids(sentences: list[int], idx, draws: int) -> np.ndarray:
    """(N,) int32: the sampling draw of each of the rows ``idx`` (indices into
    ``sentences``, the :func:`plan_rows` of ``draws``), sentence i's draw j being
    i * draws + j, whatever batch the row falls in: a sentence's samples do not depend
    on the batching, nor on the other sentences.

    >>> draw_ids([0, 0, 2, 2], [3, 0], 2).tolist()
    [5, 0]
    """
    return np.asarray([sentences[r] * draws + r % draws for r in idx], np.int32)


def forced_prefixes(prefixes: list | None) -> list | None:
    """Per sentence the target ids its translations start with, or None where no
    sentence has any (the decoder without a prefix then runs)."""
    if prefixes is None or not any(len(p) for p in prefixes):
        return None
    return prefixes


def prefix_inputs(prefixes: list, sentences: list[int], idx) -> tuple[np.ndarray, np.ndarray]:
    """The forced prefixes of the rows ``idx`` (indices into ``sentences``; a row's is
    its sentence's, None or empty: none): (tokens (N, P + 1) int32, each prefix then PAD,
    P the longest; lengths (N,) int32), the decoder's prefix inputs.

    >>> tokens, lengths = prefix_inputs([[9, 10], None, [11]], [0, 1, 2], [2, 0, 1])
    >>> tokens.tolist(), lengths.tolist()
    ([[11, 0, 0], [9, 10, 0], [0, 0, 0]], [1, 2, 0])
    """
    forced = [list(prefixes[sentences[r]] or []) for r in idx]
    tokens = data_load.pad_batch([np.asarray(p + [data_load.PAD_ID], np.int32) for p in forced])
    return tokens, np.asarray([len(p) for p in forced], np.int32)


@dataclass
class Plan:
    """The rows a call decodes and how.

    Attributes:
        sentences: the sentence of each row (:func:`plan_rows`).
        draws: rows per sentence (n samples with sampling; else 1).
        batches: (row indices (N,), sources (N, T) int32 with </S>) pairs, rows of
            similar length together (data_load.eval_batches over the rows' sources).
        decode: ``decode(src (N, T), extra, *inputs)``: the compiled search.
        prefixes: per sentence its forced target ids (:func:`forced_prefixes`), or None.
        sampling: whether the decoder takes draw ids (:func:`draw_ids`).
    """

    sentences: list[int]
    draws: int
    batches: list
    decode: Callable | None = None
    prefixes: list | None = None
    sampling: bool = False

    def inputs(self, idx) -> list[np.ndarray]:
        """The decoder's inputs after src and extra for the rows ``idx``: the draw ids
        (N,) where it samples, then the prefix tokens (N, P + 1) and lengths (N,) where
        a sentence has a prefix."""
        out = []
        if self.sampling:
            out.append(draw_ids(self.sentences, idx, self.draws))
        if self.prefixes is not None:
            out += prefix_inputs(self.prefixes, self.sentences, idx)
        return out


def regroup(decoded, sentences: list[int], draws: int, count: int) -> list:
    """The output of each of ``count`` sentences from its decoded rows; None for one
    without rows (an empty source). ``decoded``: (row indices (N,), (ids (N, n, L),
    scores (N, n))) per batch, the batches in any order (streams take the largest first).
    With one draw a sentence's output is its row's (ids (n, L), scores (n,)): the n best
    of a beam, best first, or the greedy hypothesis. With ``draws`` > 1 it is each
    draw's hypothesis in draw order, (ids (draws, L) int32, PAD after each, L the
    longest; scores (draws,) float32 zeros: :meth:`Translator.scored_samples` scores
    them). A sentence's rows lie side by side (:func:`plan_rows`)."""
    rows: list = [None] * len(sentences)
    for idx, (seqs, scores) in decoded:
        for row, r in enumerate(idx):
            rows[r] = (seqs[row], scores[row])
    out: list = [None] * count
    for start in range(0, len(sentences), draws):
        group = rows[start : start + draws]
        if draws == 1:
            out[sentences[start]] = group[0]
            continue
        ids = np.zeros((draws, max(seq.shape[1] for seq, _ in group)), np.int32)
        for j, (seq, _) in enumerate(group):
            ids[j, : seq.shape[1]] = seq[0]
        out[sentences[start]] = (ids, np.zeros(draws, np.float32))
    return out

"""The figures of a test set's translations: sacreBLEU, chrF, BLEU by source length, and
the TF1 eval.py's BLEU and test subset (eval.py --legacy_protocol)."""

from __future__ import annotations

import numpy as np
import sacrebleu

from transformer_tf2.config import hparams
from transformer_tf2.config.hparams import UserError
from transformer_tf2.data import data_load


def legacy_bleu(hyps: list[str], refs: list[str], clean_hyps: bool = True) -> float:
    """The TF1 eval.py BLEU: see eval.py's docstring. ``clean_hyps`` False keeps the
    hypotheses' words as they are (the TF1 protocol: ``<UNK>`` stays)."""
    list_of_refs, hypotheses = [], []
    for hyp, ref in zip(hyps, refs):
        r, h = data_load.clean(ref).split(), (data_load.clean(hyp) if clean_hyps else hyp).split()
        if len(r) > 3 and len(h) > 3:
            list_of_refs.append([r])
            hypotheses.append(h)
    if not hypotheses:
        return 0.0
    # imported here: nltk's package import takes 0.6 s (scipy), which translate.py skips
    from nltk.translate.bleu_score import corpus_bleu

    return 100 * corpus_bleu(list_of_refs, hypotheses)


def scores(hyps: list[str], refs: list[str]) -> dict:
    """Every figure of eval.py's docstring for detokenized hypotheses and references."""
    std = sacrebleu.metrics.BLEU()
    lower = sacrebleu.metrics.BLEU(lowercase=True)  # sacrebleu -lc, as most Multi30k papers
    raw = sacrebleu.metrics.BLEU(tokenize="none")
    chrf = sacrebleu.metrics.CHRF()
    b = std.corpus_score(hyps, [refs])
    return {
        "legacy_bleu": legacy_bleu(hyps, refs),
        "sacrebleu": b.score,
        "sacrebleu_signature": str(std.get_signature()),
        "sacrebleu_lc": lower.corpus_score(hyps, [refs]).score,
        "sacrebleu_lc_signature": str(lower.get_signature()),
        "bleu_tokenize_none": raw.corpus_score(hyps, [refs]).score,
        "bleu_tokenize_none_signature": str(raw.get_signature()),
        "chrf": chrf.corpus_score(hyps, [refs]).score,
        "chrf_signature": str(chrf.get_signature()),
    }


def length_bucket_names(edges: tuple[int, ...]) -> list[str]:
    """Bucket names of ascending edges: (16, 24) -> ['<=16', '17-24', '>=25']."""
    lows = [1] + [e + 1 for e in edges]
    names = [f"{lo}-{hi}" for lo, hi in zip(lows[1:], edges[1:])]
    return [f"<={edges[0]}", *names, f">={edges[-1] + 1}"]


def bleu_by_length(
    hyps: list[str],
    refs: list[str],
    lengths: list[int],
    edges: tuple[int, ...],
    resamples: int = 1000,
    seed: int = 0,
) -> list[dict]:
    """sacreBLEU (as :func:`scores`) of each bucket of source length (``lengths``, in
    tokens; buckets from the ascending ``edges``, :func:`length_bucket_names`), with its
    sentence count and a 95% percentile bootstrap interval: ``resamples`` resamplings of
    the bucket's sentences with replacement (numpy seed ``seed``), each scored from the
    sentences' n-gram statistics. An empty bucket has a score and interval of None."""
    corpus = sacrebleu.metrics.BLEU()
    per_sentence = sacrebleu.metrics.BLEU(effective_order=True)  # its counts, not its scores
    stats = []
    for h, r in zip(hyps, refs):
        b = per_sentence.sentence_score(h, [r])
        stats.append([b.sys_len, b.ref_len, *b.counts, *b.totals])
    stats = np.array(stats, np.int64).reshape(-1, 10)
    bucket = np.searchsorted(np.asarray(edges), np.asarray(lengths), side="left")
    rng = np.random.default_rng(seed)

    def bleu(rows) -> float:
        total = rows.sum(0)
        return corpus.compute_bleu(
            total[2:6].tolist(),
            total[6:10].tolist(),
            int(total[0]),
            int(total[1]),
            smooth_method=corpus.smooth_method,
            smooth_value=corpus.smooth_value,
        ).score

    out = []
    for b, name in enumerate(length_bucket_names(tuple(edges))):
        rows = stats[bucket == b]
        entry = {"bucket": name, "sentences": len(rows), "sacrebleu": None, "ci95": None}
        if len(rows):
            draws = rng.integers(0, len(rows), size=(resamples, len(rows)))
            scores_ = [bleu(rows[d]) for d in draws]
            entry.update(
                sacrebleu=bleu(rows), ci95=[float(x) for x in np.percentile(scores_, [2.5, 97.5])]
            )
        out.append(entry)
    return out


def legacy_subset(
    tok, sources: list[str], refs: list[str], hp: hparams.Hparams
) -> tuple[list[int], int]:
    """The pairs the TF1 eval.py scored: (their indices in file order, the number of pairs
    within maxlen). A pair is within maxlen when source and reference fit the training
    filter with </S> counted (tokens + 1 <= maxlen1 and maxlen2; TF1: max(len(x), len(y))
    <= maxlen); of those, whole batches of ``batch_size`` are scored (TF1 dropped the last
    partial batch)."""
    if hp.batch_size <= 0:
        raise UserError(
            "--legacy_protocol drops the last partial batch of batch_size sentences, but "
            "this run trained with token batches (batch_size 0); pass --legacy_protocol false"
        )
    src, tgt = tok.encode_src(sources), tok.encode_tgt(refs)
    within = [
        i
        for i in range(len(sources))
        if len(src[i]) + 1 <= hp.maxlen1 and len(tgt[i]) + 1 <= hp.maxlen2
    ]
    return within[: len(within) // hp.batch_size * hp.batch_size], len(within)

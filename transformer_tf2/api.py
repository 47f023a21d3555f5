"""The Python API: a trained run, loaded once, that translates, scores and aligns
(docs/api.md). translate.py and eval.py decode through it too.

    >>> from transformer_tf2 import Translator
    >>> translator = Translator.from_run("log/demo", beam_size=4)   # doctest: +SKIP
    >>> translator.translate(["Die Frau liest ein Buch."])         # doctest: +SKIP
    ['The woman reads a book.']

A :class:`Translator` holds the run's settings (``hparams``: the run's own, with the
decoding options given to :meth:`Translator.from_run`), its tokenizer and its model, and
one compiled decoding loop per kind of call, traced on first use. Its methods take Python
values (lists of strings) and raise the project's :class:`UserError` for a mistake a
caller can make, never ``SystemExit``. Names follow CTranslate2 where it has one:
``translate_batch`` returns hypotheses, ``score`` scores given translations.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Sequence

import numpy as np

from transformer_tf2.config import hparams
from transformer_tf2.data import data_load
from transformer_tf2.decoding import document_decoding, ensemble, greedy_search
from transformer_tf2.decoding import translator as decoding
from transformer_tf2.utils.errors import UserError

# what from_run takes besides the run: the settings a trained model may decode with
OPTIONS = tuple(k for k in hparams.DECODE_KEYS if k != "results_dir")


@dataclasses.dataclass(frozen=True)
class Hypothesis:
    """One translation of a sentence.

    ``score``: the beam's score (its summed log-probability over the length penalty, as
    the search ranks it); a sample's summed log-probability; None for greedy decoding
    (:meth:`Translator.score` gives any translation's). ``alignment``: the Pharaoh word
    alignment (``"0-0 1-2"``: source word - target word), when asked. ``runaway``: the
    decoder reached its length limit without producing </S>."""

    text: str
    score: float | None = None
    alignment: str | None = None
    runaway: bool = False


@dataclasses.dataclass(frozen=True)
class Score:
    """The score of a given translation: ``score`` the summed log-probability of its
    tokens and </S>; ``tokens`` each (piece, log-probability), </S> last."""

    score: float
    tokens: list[tuple[str, float]]


class Translator:
    """A trained run (or an ensemble of runs sharing a vocabulary) ready to decode.

    Build it with :meth:`from_run`; ``Translator(hp, tok, model)`` wraps a model already
    in memory (``hp`` its Hparams, ``tok`` its data_load.Tokenizer)."""

    def __init__(self, hp: hparams.Hparams, tok, model, checkpoints: Sequence[str] = ()):
        self.hparams, self.tok, self.model = hp, tok, model
        self.checkpoints = list(checkpoints)
        self.decoder = decoding.Translator(model, tok, hp)

    @classmethod
    def from_run(cls, run: str | os.PathLike | Sequence, ckpt: str = "", **options) -> Translator:
        """Load the run in the folder ``run`` (train.py's ``--logdir``), or, given a list
        of folders, their ensemble (probabilities averaged). ``ckpt``: a checkpoint path,
        ``"last"`` or ``"best"`` ("": the run's default model, ``best.json``).
        ``options``: decoding settings (:data:`OPTIONS`: ``beam_size``,
        ``length_penalty``, ``max_len_extra``, ``max_len``, ``eval_batch_size``,
        ``decode_streams``, ``sampling_topk``, ``sampling_topp``,
        ``sampling_temperature``, ``seed``, ``precision``, ``legacy_protocol``); the model's
        own settings come from the run's hparams.json. A missing run, an unknown option or
        a value out of range raises UserError."""
        runs = [run] if isinstance(run, (str, os.PathLike)) else list(run)
        if not runs:
            raise UserError("Translator.from_run needs a run folder")
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise UserError(
                f"Translator.from_run: unknown option {', '.join(unknown)}; the decoding "
                f"options are {', '.join(OPTIONS)}"
            )
        return cls.from_settings(runs, options, ckpt, "api")

    @classmethod
    def from_settings(cls, runs: Sequence, settings: dict, ckpt: str = "", who: str = "api"):
        """:meth:`from_run` for a script: ``settings`` are its command line's (a model
        setting must agree with the run's, one UserError line otherwise; one that does
        not apply is ignored with a line on stderr), ``who`` names it in those lines."""
        hp, tok, model, paths = ensemble.load_ensemble(
            [os.fspath(r) for r in runs], dict(settings), ckpt, who
        )
        return cls(hp, tok, model, paths)

    @property
    def settings(self) -> dict:
        """The decoding settings this translator runs with, by name."""
        return {k: getattr(self.hparams, k) for k in OPTIONS}

    @property
    def source_limit(self) -> int:
        """The longest source in tokens (</S> included); longer ones are cut."""
        return greedy_search.source_limit(self.model)

    def long_lines(self, sentences: Sequence[str]) -> list[tuple[int, int]]:
        """(index, tokens) of each sentence longer than :attr:`source_limit` allows: only
        its first ``source_limit - 1`` tokens are translated."""
        limit = self.source_limit
        ids = self.tok.encode_src(list(sentences))
        return [(i, len(seq)) for i, seq in enumerate(ids) if len(seq) + 1 > limit]

    def translate(self, sentences: str | Sequence[str], prefixes=None) -> list[str] | str:
        """The best translation of each sentence ('' for an empty one); a single string
        gives a single string. ``prefixes``: per sentence the text its translation
        starts with ('' for none)."""
        if isinstance(sentences, str):
            one = None if prefixes is None else [prefixes]
            return self.translate([sentences], one)[0]
        results = self.translate_batch(sentences, prefixes=prefixes)
        return [r[0].text if r else "" for r in results]

    def translate_batch(
        self,
        sentences: Sequence[str],
        n_best: int = 1,
        prefixes: Sequence[str] | None = None,
        alignments: bool = False,
        docs=None,
        progress: bool = False,
    ) -> list[list[Hypothesis]]:
        """Per sentence its ``n_best`` hypotheses, best first ([] for an empty sentence).

        ``n_best`` > 1 takes a beam of at least that size or sampling (``sampling_topk``
        0 or > 1: then n samples). ``prefixes``: per sentence the text its translations
        start with (CTranslate2's ``target_prefix``). ``alignments``: each hypothesis's
        word alignment (n_best 1). ``docs``: per sentence its document's index, for a
        model with document context (default: blank sentences end documents).
        ``progress``: a progress bar on stderr."""
        sentences = self._texts(sentences, "sentences")
        self._check(n_best, alignments)
        if prefixes is not None:
            prefixes = self._texts(prefixes, "prefixes", len(sentences))
        dec, tok = self.decoder, self.tok
        src_ids = tok.encode_src(sentences)
        if docs is None:
            docs = document_decoding.documents_of_lines(sentences)
        forced = None if prefixes is None else tok.encode_tgt(prefixes)
        outs = dec.translate_ids(src_ids, progress, docs=docs, prefixes=forced, n=n_best)
        if dec.sampling and any(o is not None for o in outs):
            outs = dec.scored_samples(src_ids, outs)
        links = dec.alignments(src_ids, outs) if alignments else [None] * len(outs)
        greedy = dec.k == 1 and not dec.sampling
        return [
            []
            if o is None
            else [
                Hypothesis(
                    tok.decode_tgt(o[0][r]),
                    None if greedy else float(o[1][r]),
                    link,
                    data_load.EOS_ID not in [int(t) for t in o[0][r]],
                )
                for r in range(len(o[0]))
            ]
            for o, link in zip(outs, links)
        ]

    def score(
        self, sources: Sequence[str], targets: Sequence[str], tokens: bool = False
    ) -> list[float] | list[Score]:
        """The summed log-probability of each target (its tokens and </S>) given its
        source, teacher forced (CTranslate2's ``score_batch``); with ``tokens``, a
        :class:`Score` with each token's log-probability."""
        sources = self._texts(sources, "sources")
        targets = self._texts(targets, "targets", len(sources))
        tgt_ids = self.tok.encode_tgt(targets)
        logp = self.decoder.score_ids(self.tok.encode_src(sources), tgt_ids)
        if not tokens:
            return [float(lp.sum()) for lp in logp]
        return [
            Score(
                float(lp.sum()),
                list(zip(self.tok.tgt_tokens(ids) + ["</S>"], map(float, lp))),
            )
            for ids, lp in zip(tgt_ids, logp)
        ]

    def _check(self, n_best: int, alignments: bool) -> None:
        """The requests a decoding of these settings cannot answer, one UserError each."""
        if not isinstance(n_best, (int, np.integer)) or n_best < 1:
            raise UserError(f"n_best must be an integer of at least 1; got {n_best!r}")
        if n_best > max(self.hparams.beam_size, 1) and not self.decoder.sampling:
            raise UserError(
                f"n_best {n_best} needs a beam_size of at least {n_best} (or sampling: "
                "sampling_topk 0 or K > 1)"
            )
        if alignments and n_best > 1:
            raise UserError("alignments align the best translation: ask for n_best 1")

    @staticmethod
    def _texts(values, what: str, length: int | None = None) -> list[str]:
        """``values`` as a list of strings, or one UserError saying what is wrong."""
        if isinstance(values, str):
            raise UserError(f"{what} must be a list of strings, not one string")
        values = list(values)
        bad = next((i for i, v in enumerate(values) if not isinstance(v, str)), None)
        if bad is not None:
            raise UserError(f"{what}[{bad}] is a {type(values[bad]).__name__}, not a string")
        if length is not None and len(values) != length:
            raise UserError(f"{len(values)} {what} for {length} sentences: give one each")
        return values

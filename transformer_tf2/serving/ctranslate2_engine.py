"""CTranslate2 behind the server: an ``export.py --format ctranslate2`` model decoded by
CTranslate2's C++ translator, with the run's own tokenizer (the run it was exported from:
its hparams.json and vocabulary), for users who want CTranslate2's latency behind the
same API.

What differs from the TensorFlow engine: no word alignments (CTranslate2's attention is
not the cross-attention average this project aligns with); a hypothesis's score is
CTranslate2's (its length penalty normalises it its own way); samples come from
CTranslate2's random generator, so a seed repeats CTranslate2's draws, not the
TensorFlow engine's (CTranslate2 seeds a thread's generator once, at the thread's first
draw: a request with a seed is decoded by a translator of its own, whose fresh threads
draw from that seed).

The layout is CTranslate2's fastest on a CPU: ``workers`` translators' worth of replicas
(``inter_threads`` = the server's decoding workers, ``intra_threads`` 1), so that each
batcher worker's batch decodes on a core of its own at the same time; one worker alone
gets the cores' threads instead (at most 4, CTranslate2's default).

Each sentence gets its own decoding budget, as in the TensorFlow engine (its source + 1 +
max_len_extra tokens, at most max_len, and room for its prefix), so that its translation
does not depend on the requests it shares a batch with:

* greedy search and sampling decode the whole batch in one ``translate_batch`` call, at
  the batch's largest budget, and CTranslate2's step callback ends each sentence at its
  own: a greedy token depends only on the tokens before it, so the sentence's output and
  score are those of a call with its budget alone (padding beside longer sources moves
  a score in its last bits at most: tests/test_ctranslate.py);
* beam search takes one call per budget (the sentences of one budget together): a beam
  cut at a shorter length would not be the beam of that length, whose hypotheses are
  forced to finish by then.

As the TensorFlow engine, it cuts a source to the model's longest
(greedy_search.source_limit, </S> included); a budget is at most that long too
(CTranslate2's table of absolute positions has that many rows), where the TensorFlow
engine's is not for sinusoids.
"""

from __future__ import annotations

import contextlib
import os
import threading

from transformer_tf2.api import Hypothesis, Score
from transformer_tf2.config import hparams
from transformer_tf2.data import data_load
from transformer_tf2.export import ctranslate
from transformer_tf2.layers import positions
from transformer_tf2.serving.engines import Engine
from transformer_tf2.utils.errors import UserError


class CTranslate2Engine(Engine):
    """The CTranslate2 model in ``model_dir``, tokenized as the run ``hp.logdir``; the
    decoding settings are the run's with ``overrides`` (the command line's)."""

    name = "ctranslate2"
    alignments = False

    def __init__(self, model_dir: str, hp: hparams.Hparams, overrides: dict, workers: int = 1):
        # CTranslate2's OpenMP threads wait passively unless the environment says otherwise
        # (read when ctranslate2 first loads its OpenMP runtime): threads that spin on cores
        # shared with the server's event loop, its clients or other processes slowed a
        # beam search 40-fold on a loaded 2-core machine (0.2 s -> 8 s for 16 sentences)
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        try:
            import ctranslate2
        except ImportError:
            raise UserError(
                '--engine ctranslate2 needs CTranslate2: pip install -e ".[export]"'
            ) from None
        if not os.path.isfile(os.path.join(model_dir, "model.bin")):
            raise UserError(
                f"{model_dir} holds no CTranslate2 model (no model.bin): make one with python "
                "export.py --logdir RUN --format ctranslate2 --export_dir DIR"
            )
        saved = hparams.load(os.path.join(hp.logdir, "hparams.json"))
        decode = {k: v for k, v in overrides.items() if k in hparams.DECODE_KEYS}
        self.hp = hparams.apply(saved, {**decode, "logdir": hp.logdir})
        self.tok = data_load.load_tokenizer(self.hp)
        self.model_dir = model_dir
        self.ct2 = ctranslate2
        # W workers: W replicas of one thread each; one worker: CTranslate2's default of
        # 4 threads, never more than the cores this process has
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        self.workers = max(1, workers)
        self.threads = 1 if self.workers > 1 else min(4, cores or os.cpu_count() or 1)
        self.translator = self._load()
        self.sampling = self.hp.sampling_topk != 1
        self.max_n_best = 64 if self.sampling else max(1, self.hp.beam_size)
        # greedy_search.source_limit of the model: the rows of its position table
        self.limit = positions.get(self.hp.position).max_length(self.hp) or 1024
        self.lock = threading.Lock()  # the random seed is CTranslate2's, for the process

    def _load(self):
        return self.ct2.Translator(
            self.model_dir, device="cpu", inter_threads=self.workers, intra_threads=self.threads
        )

    def _budget(self, source: int, prefix: int) -> int:
        """A sentence's decoding budget in tokens (the TensorFlow engine's,
        greedy_search.decode_budgets): its source (``source`` tokens and </S>) +
        max_len_extra, at most max_len, and room for its prefix and a token after it."""
        budget = source + 1 + self.hp.max_len_extra
        if self.hp.max_len:
            budget = min(budget, self.hp.max_len)
        return min(max(1, budget, prefix + 1), self.limit)

    def _options(self, n_best: int, budget: int, prefixes) -> dict:
        hp = self.hp
        options = dict(
            max_decoding_length=budget,
            min_decoding_length=0,
            return_scores=True,
            num_hypotheses=n_best,
        )
        if self.sampling:
            options.update(
                beam_size=1,
                sampling_topk=hp.sampling_topk,
                sampling_topp=hp.sampling_topp,
                sampling_temperature=hp.sampling_temperature,
            )
        else:
            options.update(
                beam_size=max(1, hp.beam_size),
                length_penalty=hp.length_penalty if hp.beam_size > 1 else 0.0,
            )
        if prefixes is not None:
            options["target_prefix"] = [
                self.tok.tgt_tokens(ids) if ids else None for ids in prefixes
            ]
        return options

    def translate(self, sentences, n_best=1, prefixes=None, alignments=False, seed=None):
        ids = [row[: self.limit - 1] for row in self.tok.encode_src(list(sentences))]
        forced = None
        if prefixes is not None:  # a prefix and a token after it within the limit
            forced = [row[: self.limit - 1] for row in self.tok.encode_tgt(list(prefixes))]
        live = [i for i, row in enumerate(ids) if row]
        budgets = {
            i: self._budget(len(ids[i]), len(forced[i]) if forced is not None else 0) for i in live
        }
        if self.hp.beam_size > 1 and not self.sampling:
            groups: dict[int, list[int]] = {}  # budget -> the sentences of that budget
            for i in live:
                groups.setdefault(budgets[i], []).append(i)
            calls = sorted(groups.items())
        else:  # one call, each sentence ended at its own budget by the step callback
            calls = [(max(budgets.values()), live)] if live else []
        out: list[list[Hypothesis]] = [[] for _ in sentences]
        translator = self.translator
        # the lock only for a seed: CTranslate2's random seed is the process's
        with self.lock if seed is not None else contextlib.nullcontext():
            if seed is not None:
                # set_random_seed seeds only the generators of threads yet to draw (each
                # thread seeds its own at its first draw): a new translator's threads
                self.ct2.set_random_seed(int(seed))
                translator = self._load()
            for budget, rows in calls:
                self._decode(translator, ids, forced, n_best, budget, rows, budgets, out)
        return out

    def _decode(self, translator, ids, forced, n_best, budget, rows, budgets, out) -> None:
        """One translate_batch call for the sentences ``rows`` at ``budget`` tokens;
        with a beam of 1, each sentence stops at its own (``budgets``)."""
        tokens = ctranslate.source_tokens(self.tok, [ids[i] for i in rows])
        options = self._options(
            n_best, budget, None if forced is None else [forced[i] for i in rows]
        )
        if options["beam_size"] == 1:
            own = [budgets[i] for i in rows]
            options["callback"] = lambda step: step.step + 1 >= own[step.batch_id]
        results = translator.translate_batch(tokens, **options)
        for i, result in zip(rows, results):
            out[i] = [
                Hypothesis(
                    self.tok.decode_tgt(ctranslate.target_ids(self.tok, hyp)),
                    float(score),
                    None,
                    len(hyp) >= budgets[i],
                )
                for hyp, score in zip(result.hypotheses, result.scores)
            ]

    def score(self, sources, targets) -> list[Score]:
        ids = [row[: self.limit - 1] for row in self.tok.encode_src(list(sources))]
        src = ctranslate.source_tokens(self.tok, ids)
        tgt = [self.tok.tgt_tokens(ids) for ids in self.tok.encode_tgt(list(targets))]
        longest = max((len(t) + 1 for t in tgt), default=0)
        if longest > self.limit:
            raise UserError(
                f"a target of {longest} tokens (</S> included) is longer than this model "
                f"places ({self.limit})"
            )
        results = self.translator.score_batch(src, tgt)
        return [
            Score(float(sum(r.log_probs)), list(zip(t + ["</S>"], map(float, r.log_probs))))
            for t, r in zip(tgt, results)
        ]

    def info(self) -> dict:
        return {
            "engine": self.name,
            "model": self.model_dir,
            "run": self.hp.logdir,
            "decoding": {k: getattr(self.hp, k) for k in hparams.DECODE_KEYS if k != "results_dir"},
            "languages": {"source": self.source, "target": self.target},
        }

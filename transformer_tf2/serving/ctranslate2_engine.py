"""CTranslate2 behind the server: an ``export.py --format ctranslate2`` model decoded by
CTranslate2's C++ translator, with the run's own tokenizer (the run it was exported from:
its hparams.json and vocabulary), for users who want CTranslate2's latency behind the
same API.

What differs from the TensorFlow engine: no word alignments (CTranslate2's attention is
not the cross-attention average this project aligns with); a hypothesis's score is
CTranslate2's (its length penalty normalises it its own way); samples come from
CTranslate2's random generator, so a seed repeats CTranslate2's draws, not the
TensorFlow engine's; a decoding budget is one per batch, its longest source + 1 +
max_len_extra (at most max_len), where the TensorFlow engine gives each sentence its own.
"""

from __future__ import annotations

import os
import threading

from transformer_tf2.api import Hypothesis, Score
from transformer_tf2.config import hparams
from transformer_tf2.data import data_load
from transformer_tf2.export import ctranslate
from transformer_tf2.serving.engines import Engine
from transformer_tf2.utils.errors import UserError


class CTranslate2Engine(Engine):
    """The CTranslate2 model in ``model_dir``, tokenized as the run ``hp.logdir``; the
    decoding settings are the run's with ``overrides`` (the command line's)."""

    name = "ctranslate2"
    alignments = False

    def __init__(self, model_dir: str, hp: hparams.Hparams, overrides: dict):
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
        self.translator = ctranslate2.Translator(model_dir, device="cpu")
        self.sampling = self.hp.sampling_topk != 1
        self.max_n_best = 64 if self.sampling else max(1, self.hp.beam_size)
        self.lock = threading.Lock()  # the random seed is CTranslate2's, for the process

    def _options(self, n_best: int, longest: int, prefixes) -> dict:
        hp = self.hp
        budget = longest + 1 + hp.max_len_extra
        if hp.max_len:
            budget = min(budget, hp.max_len)
        options = dict(
            max_decoding_length=max(1, budget),
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
                self.tok.tgt_tokens(ids) if ids else None for ids in self.tok.encode_tgt(prefixes)
            ]
        return options

    def translate(self, sentences, n_best=1, prefixes=None, alignments=False, seed=None):
        ids = self.tok.encode_src(list(sentences))
        live = [i for i, row in enumerate(ids) if row]
        out: list[list[Hypothesis]] = [[] for _ in sentences]
        if not live:
            return out
        tokens = ctranslate.source_tokens(self.tok, [ids[i] for i in live])
        live_prefixes = None if prefixes is None else [prefixes[i] for i in live]
        options = self._options(n_best, max(len(t) for t in tokens), live_prefixes)
        with self.lock:
            if seed is not None:
                self.ct2.set_random_seed(int(seed))
            results = self.translator.translate_batch(tokens, **options)
        for i, result in zip(live, results):
            out[i] = [
                Hypothesis(
                    self.tok.decode_tgt(ctranslate.target_ids(self.tok, hyp)),
                    float(score),
                    None,
                    len(hyp) >= options["max_decoding_length"],
                )
                for hyp, score in zip(result.hypotheses, result.scores)
            ]
        return out

    def score(self, sources, targets) -> list[Score]:
        src = ctranslate.source_tokens(self.tok, self.tok.encode_src(list(sources)))
        tgt = [self.tok.tgt_tokens(ids) for ids in self.tok.encode_tgt(list(targets))]
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

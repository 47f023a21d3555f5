"""What decodes behind the server: an engine answers a batch of jobs (batcher.py) with
hypotheses and scores. :class:`TensorFlowEngine` is the run's own model through the
Python API (api.Translator); ctranslate2_engine.py holds the CTranslate2 one. Both give
:class:`api.Hypothesis` and :class:`api.Score` values, so the HTTP layer (app.py) is the
same for each.
"""

from __future__ import annotations

import collections
import threading

from transformer_tf2.api import Score, Translator
from transformer_tf2.config import hparams
from transformer_tf2.serving.batcher import Job
from transformer_tf2.utils.errors import UserError

# what the server calls its languages (LibreTranslate's /languages names them)
LANGUAGE_NAMES = {"de": "German", "en": "English", "fr": "French", "cs": "Czech"}


class Engine:
    """The interface app.py decodes through. ``source`` and ``target``: the language
    codes; ``sampling``: whether a translation is drawn (then each job is decoded alone:
    a draw depends on the sentence's place in its batch); ``max_n_best``: the most
    hypotheses a sentence may ask for."""

    name = ""
    source, target = "de", "en"
    sampling = False
    max_n_best = 1
    alignments = True

    def translate(self, sentences, n_best=1, prefixes=None, alignments=False, seed=None):
        """Per sentence its hypotheses (api.Hypothesis), best first. Called from several
        batcher workers at once: it must be thread-safe."""
        raise NotImplementedError

    def longest(self, sentences) -> int:
        """The longest of ``sentences`` in source tokens, </S> included (what a batch
        pads to: the batcher's ``max_tokens``): the engine's tokenizer where it has one."""
        tok = getattr(self, "tok", None)
        if tok is None:
            return max((len(s.split()) + 1 for s in sentences), default=1)
        return max((len(ids) + 1 for ids in tok.encode_src(list(sentences))), default=1)

    def score(self, sources, targets) -> list[Score]:
        raise NotImplementedError

    def info(self) -> dict:
        raise NotImplementedError

    def check(self, n_best: int, alignments: bool, seed) -> None:
        """One UserError for what this engine cannot answer."""
        if n_best > self.max_n_best:
            what = "samples" if self.sampling else f"the beam ({self.max_n_best})"
            raise UserError(
                f"{n_best} translations per sentence asked; this server gives at most "
                f"{self.max_n_best}: {what} (start it with a larger --beam_size)"
            )
        if alignments and not self.alignments:
            raise UserError(f"alignments are not given by the {self.name} engine")
        if alignments and n_best > 1:
            raise UserError("alignments align the best translation: ask for n_best 1")
        if seed is not None and not self.sampling:
            raise UserError("a seed is for sampling: start the server with --sampling_topk")


class TensorFlowEngine(Engine):
    """A trained run through :class:`api.Translator`: every decoding option of the
    run's settings (beam, sampling, prefixes, alignments, scores). A request's ``seed``
    decodes with a Translator of that seed (the last few kept warm)."""

    name = "tensorflow"
    alignments = True

    def __init__(self, translator: Translator, warm_seeds: int = 4):
        self.translator = translator
        self.tok = translator.tok
        hp = translator.hparams
        self.sampling = translator.decoder.sampling
        self.max_n_best = 64 if self.sampling else max(1, hp.beam_size)
        self.seeds = collections.OrderedDict({hp.seed: translator})
        self.warm_seeds, self.lock = warm_seeds, threading.Lock()

    def _with_seed(self, seed) -> Translator:
        if seed is None:
            return self.translator
        with self.lock:
            if seed not in self.seeds:
                t = self.translator
                hp = hparams.apply(t.hparams, {"seed": int(seed)})
                self.seeds[seed] = Translator(hp, t.tok, t.model, t.checkpoints)
                while len(self.seeds) > self.warm_seeds:
                    self.seeds.popitem(last=False)
            self.seeds.move_to_end(seed)
            return self.seeds[seed]

    def translate(self, sentences, n_best=1, prefixes=None, alignments=False, seed=None):
        engine = self._with_seed(seed)
        return engine.translate_batch(sentences, n_best, prefixes, alignments)

    def score(self, sources, targets) -> list[Score]:
        return self.translator.score(sources, targets, tokens=True)

    def info(self) -> dict:
        t = self.translator
        return {
            "engine": self.name,
            "run": t.hparams.logdir,
            "checkpoints": t.checkpoints,
            "decoding": t.settings,
            "languages": {"source": self.source, "target": self.target},
            # the compiled decoders' traces (the warm seeds' too): constant under load
            "traces": sum(seeded.decoder.traces for seeded in list(self.seeds.values())),
        }


def run_jobs(engine: Engine, jobs: list[Job]) -> list:
    """The batcher's ``run``: the jobs of one key decoded in one call of ``engine``, each
    job given its slice. A key is ("translate", n_best, alignments, seed) or ("score",)."""
    kind = jobs[0].key[0]
    sentences = [s for job in jobs for s in job.sentences]
    if kind == "score":
        targets = [t for job in jobs for t in job.extra["targets"]]
        results = engine.score(sentences, targets)
    else:
        _, n_best, alignments, seed = jobs[0].key
        prefixes = None
        if any(job.extra.get("prefixes") for job in jobs):
            prefixes = [
                p for job in jobs for p in (job.extra.get("prefixes") or [""] * len(job.sentences))
            ]
        results = engine.translate(sentences, n_best, prefixes, alignments, seed)
    out, start = [], 0
    for job in jobs:
        out.append(results[start : start + len(job.sentences)])
        start += len(job.sentences)
    return out

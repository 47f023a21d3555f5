"""Translate a test set with a trained model and score it.

    python eval.py                                 # demo: latest checkpoint, test split
    python eval.py --preset multi30k --ckpt log/multi30k/best/ckpt-9000
    python eval.py --logdir log/demo --test_src my.de --test_ref my.en

Loads the run's own hparams from ``<logdir>/hparams.json``, decodes autoregressively
(greedy, batched, each sentence stopping at </S>) and writes ``results/<model_name>``
in the legacy format: ``- source:``, ``- expected:``, ``- got:`` blocks, then
``Bleu Score = X``, plus ``results/<model_name>.json`` with every figure:

* ``Bleu Score`` (legacy): nltk ``corpus_bleu`` (4-gram, uniform weights, no smoothing)
  x 100 over whitespace tokens of the legacy-cleaned text (``[^\\s\\p{Latin}']`` removed),
  counting only pairs where both reference and hypothesis have more than 3 tokens -
  exactly what the TF1 eval.py computed;
* ``sacreBLEU``: the standard figure, cased, detokenized text, tokenizer 13a, with its
  signature;
* ``BLEU (tokenize=none)``: cased raw text split on whitespace, which equals
  multi-bleu.perl on untokenized text, the figure of the 2019 Kyubyong README;
* ``chrF``: sacreBLEU's chrF2.
"""
from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import hparams as H
from hparams import UserError

# hparams eval may change without touching the model
DECODE_KEYS = ("beam_size", "length_penalty", "max_len_extra", "max_len", "eval_batch_size",
               "results_dir", "precision", "jit_compile")


class Translator:
    """Batched translation with one compiled decoding loop: greedy, or beam search when
    ``hp.beam_size`` > 1. Used by train.py (dev BLEU), eval.py and translate.py."""

    def __init__(self, model, tok, hp: H.Hparams):
        import model as MD
        self.model, self.tok, self.hp = model, tok, hp
        self.k = max(hp.beam_size, 1)
        if self.k > 1:
            self.decode = MD.beam_decoder(model, self.k, hp.length_penalty, hp.max_len)
        else:
            self.decode = MD.greedy_decoder(model, hp.jit_compile, hp.max_len)

    def translate_ids(self, src_ids: list, progress: bool = False) -> list:
        """Source id lists (no </S>) -> per sentence (ids (k, L), scores (k,)), best
        first, in the input order; an empty source gives None. Sources are cut to
        :func:`model.source_limit`; greedy scores are 0."""
        import numpy as np
        import tensorflow as tf
        from tqdm import tqdm
        import data_load
        import model as MD
        out: list = [None] * len(src_ids)
        real = [i for i, s in enumerate(src_ids) if len(s)]
        extra = tf.constant(self.hp.max_len_extra, tf.int32)
        batches = list(data_load.eval_batches([src_ids[i] for i in real],
                                              self.hp.eval_batch_size,
                                              MD.source_limit(self.model)))
        for idx, batch in tqdm(batches, disable=not progress, file=sys.stderr, unit="batch"):
            result = self.decode(tf.constant(batch), extra)
            if self.k > 1:
                seqs, scores = result[0].numpy(), result[1].numpy()
            else:
                seqs, scores = result.numpy()[:, None], np.zeros((len(idx), 1), np.float32)
            for row, i in enumerate(idx):
                out[real[i]] = (seqs[row], scores[row])
        return out

    def translate_nbest(self, sentences: list[str], n: int = 1, progress: bool = False,
                        src_ids: list | None = None) -> list:
        """Per sentence the n best (translation, score) pairs; [] for an empty line.
        ``src_ids``, if given, are the sentences already encoded."""
        if src_ids is None:
            src_ids = self.tok.encode_src(sentences)
        outs = self.translate_ids(src_ids, progress)
        return [[] if o is None else
                [(self.tok.decode_tgt(o[0][r]), float(o[1][r])) for r in range(n)]
                for o in outs]

    def translate(self, sentences: list[str]) -> list[str]:
        """The best translation of each sentence; an empty line gives ''."""
        return [best[0][0] if best else "" for best in self.translate_nbest(sentences)]


def legacy_bleu(hyps: list[str], refs: list[str]) -> float:
    """The TF1 eval.py BLEU: see the module docstring."""
    from nltk.translate.bleu_score import corpus_bleu
    import data_load
    list_of_refs, hypotheses = [], []
    for hyp, ref in zip(hyps, refs):
        r, h = data_load.clean(ref).split(), data_load.clean(hyp).split()
        if len(r) > 3 and len(h) > 3:
            list_of_refs.append([r])
            hypotheses.append(h)
    if not hypotheses:
        return 0.0
    return 100 * corpus_bleu(list_of_refs, hypotheses)


def scores(hyps: list[str], refs: list[str]) -> dict:
    """Every figure of the module docstring for detokenized hypotheses and references."""
    import sacrebleu
    std = sacrebleu.metrics.BLEU()
    raw = sacrebleu.metrics.BLEU(tokenize="none")
    chrf = sacrebleu.metrics.CHRF()
    b = std.corpus_score(hyps, [refs])
    return {
        "legacy_bleu": legacy_bleu(hyps, refs),
        "sacrebleu": b.score,
        "sacrebleu_signature": str(std.get_signature()),
        "bleu_tokenize_none": raw.corpus_score(hyps, [refs]).score,
        "bleu_tokenize_none_signature": str(raw.get_signature()),
        "chrf": chrf.corpus_score(hyps, [refs]).score,
        "chrf_signature": str(chrf.get_signature()),
    }


def load_run(logdir: str, overrides: dict, ckpt: str = ""):
    """Hparams, tokenizer and restored model of a training run.

    ``overrides`` may change decoding settings; changing the model's shape is an error.
    """
    import tensorflow as tf
    import data_load
    import model as MD
    import train as T
    saved = H.load(os.path.join(logdir, "hparams.json"))
    wanted = H.apply(saved, overrides)
    H.check_same(saved, wanted, H.MODEL_KEYS, f"the checkpoint in {logdir}",
                 "evaluate with the settings it was trained with (drop those options)")
    ignored = sorted(k for k in overrides if k not in DECODE_KEYS + H.MODEL_KEYS + ("logdir",))
    if ignored:
        print(f"eval: ignoring {', '.join('--' + k for k in ignored)}: the run's own "
              f"settings in {logdir}/hparams.json are used", file=sys.stderr)
    hp = H.apply(saved, {**{k: v for k, v in overrides.items() if k in DECODE_KEYS},
                         "logdir": logdir})  # the run may have been moved
    tok = data_load.load_tokenizer(hp)
    data_load.check_vocab_fingerprint(hp)
    T.setup_devices(hp)
    model = MD.Transformer.from_hparams(hp, tok.src_vocab_size, tok.tgt_vocab_size)
    path = ckpt or tf.train.latest_checkpoint(logdir)
    if not path:
        raise UserError(f"no checkpoint in {logdir}: run train.py first or pass --ckpt")
    if not tf.io.gfile.exists(path + ".index"):
        raise UserError(f"checkpoint {path} not found (expected {path}.index)")
    try:
        tf.train.Checkpoint(model=model).restore(path).expect_partial() \
            .assert_existing_objects_matched()
    except (ValueError, AssertionError, IndexError, tf.errors.OpError) as e:
        raise UserError(f"checkpoint {path} does not fit this model or is damaged "
                        f"({str(e).splitlines()[0][:200]}); was it trained with other "
                        f"hparams?") from None
    return hp, tok, model, path


def write_results(path: str, sources, refs, hyps, figures: dict, settings: dict) -> None:
    """The legacy results file plus a JSON summary beside it."""
    blocks = [f"- source: {s}\n- expected: {r}\n- got: {h}\n" for s, r, h in
              zip(sources, refs, hyps)]
    tail = (f"Bleu Score = {figures['legacy_bleu']}\n"
            f"sacreBLEU = {figures['sacrebleu']:.2f} ({figures['sacrebleu_signature']})\n"
            f"BLEU (tokenize=none, as multi-bleu.perl on raw text) = "
            f"{figures['bleu_tokenize_none']:.2f}\n"
            f"chrF = {figures['chrf']:.2f} ({figures['chrf_signature']})\n"
            f"decoding: {json.dumps(settings, sort_keys=True)}\n")
    H.atomic_write(path, "\n".join(blocks) + "\n" + tail)
    H.atomic_write(path + ".json", json.dumps({**figures, "decoding": settings,
                                               "sentences": len(hyps)}, indent=2) + "\n")


def evaluate(logdir: str, overrides: dict, ckpt: str = "", test_src: str = "",
             test_ref: str = "", show: int = 5) -> dict:
    import data_load
    import prepro
    hp, tok, model, path = load_run(logdir, overrides, ckpt)
    if bool(test_src) != bool(test_ref):
        raise UserError("--test_src and --test_ref go together")
    if test_src:
        sources, refs = prepro.read_lines(test_src), prepro.read_lines(test_ref)
        if len(sources) != len(refs):
            raise UserError(f"{test_src} has {len(sources)} lines but {test_ref} has "
                            f"{len(refs)}; they must be aligned")
    else:
        sources, refs = data_load.read_raw(hp, "test")
    if not sources:
        raise UserError(f"the test set is empty ({test_src or hp.prepro_dir + '/test.src'})")
    import time
    t0 = time.time()
    hyps = Translator(model, tok, hp).translate(sources)
    seconds = time.time() - t0
    figures = scores(hyps, refs)
    name = f"{os.path.basename(os.path.normpath(logdir))}_{os.path.basename(path)}"
    if hp.beam_size > 1:
        name += f"_beam{hp.beam_size}"
    out = os.path.join(hp.results_dir, name)
    settings = {"search": "greedy" if hp.beam_size <= 1 else "beam",
                "beam_size": hp.beam_size, "max_len_extra": hp.max_len_extra,
                "max_len": hp.max_len, "checkpoint": path}
    if hp.beam_size > 1:
        settings["length_penalty"] = hp.length_penalty
    write_results(out, sources, refs, hyps, figures, settings)
    for s, r, h in list(zip(sources, refs, hyps))[:show]:
        print(f"- source: {s}\n- expected: {r}\n- got: {h}\n")
    print(f"eval: {len(hyps)} sentences in {seconds:.1f}s ({len(hyps) / seconds:.1f}/s)")
    print(f"Bleu Score = {figures['legacy_bleu']:.2f} (legacy nltk)")
    print(f"sacreBLEU = {figures['sacrebleu']:.2f} ({figures['sacrebleu_signature']})")
    print(f"BLEU (tokenize=none) = {figures['bleu_tokenize_none']:.2f}")
    print(f"chrF = {figures['chrf']:.2f}")
    print(f"eval: results written to {out}")
    return {**figures, "results": out, "seconds": seconds}


def main() -> None:
    hp, opts = H.parse_args(extra={"ckpt": "", "test_src": "", "test_ref": ""})
    overrides = {k: getattr(hp, k) for k in opts["_set"]}
    evaluate(hp.logdir, overrides, opts["ckpt"], opts["test_src"], opts["test_ref"])


if __name__ == "__main__":
    H.run_main(main)

"""Translate German text to English with a trained model, one sentence per line.

    echo "Die Frau liest ein Buch." | python translate.py --logdir log/demo
    python translate.py --preset multi30k --input talk.de > talk.en
    python translate.py --logdir log/demo --beam_size 4 --n_best 3 < sentences.de
    python translate.py --logdir log/demo --attention attn.png <<< "Der Hund schläft."

Reads stdin (or --input), applies the training preprocessing (BPE or the word
vocabulary), decodes in length-sorted batches and prints detokenized English on stdout in
the input order. An empty line gives an empty line; a line longer than the model can
take is truncated, with a warning on stderr. With --n_best N (beam search), each input
gives N lines ``rank<TAB>score<TAB>translation``. The input is UTF-8 (a byte-order mark
and CRLF line ends are fine; anything else is an error naming the line); stdout that
cannot be written (a full disk, a closed pipe) is an error too.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # quiet TensorFlow's C++ start-up logs

import sys

import matplotlib
import tensorflow as tf

import data_load
import decoding
import files
import hparams
from hparams import UserError

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the Agg backend)


def plot_attention(model, tok, sentence: str, path: str, max_len_extra: int) -> str:
    """Cross-attention of the last decoder layer (mean over heads) for one sentence,
    target tokens down, source tokens across; returns the translation."""
    limit = decoding.source_limit(model)
    src_ids = tok.encode_src([sentence])[0][: limit - 1] + [data_load.EOS_ID]
    src = tf.constant([src_ids], tf.int32)
    out = decoding.greedy_decoder(model)(src, tf.constant(max_len_extra, tf.int32)).numpy()[0]
    out = [int(t) for t in out if t != data_load.PAD_ID]
    tgt_in = tf.constant([[data_load.BOS_ID] + out[:-1]], tf.int32)  # one row per output token
    memory, mask = model.encode(src)
    _, weights = model.decode(tgt_in, memory, mask, return_attention=True)
    attn = weights[-1][1].numpy()[0].mean(axis=0)  # (T2, T1)
    fig, ax = plt.subplots(figsize=(0.5 * len(src_ids) + 2, 0.45 * len(out) + 2), dpi=100)
    ax.imshow(attn, cmap="viridis", aspect="auto", vmin=0.0)
    ax.set_xticks(range(len(src_ids)), tok.src_tokens(src_ids), rotation=90)
    ax.set_yticks(range(len(out)), tok.tgt_tokens(out))
    ax.set_xlabel("source")
    ax.set_ylabel("translation")
    fig.tight_layout()
    with files.atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")
    plt.close(fig)
    return tok.decode_tgt(out)


def main() -> None:
    hp, opts = hparams.parse_args(extra={"ckpt": "", "input": "", "n_best": 1, "attention": ""})
    overrides = {k: getattr(hp, k) for k in opts["_set"]}
    hp, tok, model, _ = decoding.load_run(hp.logdir, overrides, opts["ckpt"], "translate")
    n_best = opts["n_best"]
    if n_best < 1:
        raise UserError(f"--n_best must be at least 1; got {n_best}")
    if n_best > max(hp.beam_size, 1):
        raise UserError(f"--n_best {n_best} needs --beam_size of at least {n_best}")
    if opts["input"]:
        lines = data_load.read_lines(opts["input"])
    else:
        lines = data_load.split_lines(data_load.decode_text(sys.stdin.buffer.read(), "stdin"))
    if opts["attention"]:
        if len([s for s in lines if s]) != 1:
            raise UserError("--attention takes exactly one sentence")
        sentence = next(s for s in lines if s)
        files.print_text(
            plot_attention(model, tok, sentence, opts["attention"], hp.max_len_extra) + "\n"
        )
        print(f"translate: attention written to {opts['attention']}", file=sys.stderr)
        return
    out = translate_lines(model, tok, hp, lines, n_best, progress=bool(opts["input"]))
    files.print_text("".join(line + "\n" for line in out))


def translate_lines(
    model,
    tok,
    hp: hparams.Hparams,
    lines: list[str],
    n_best: int = 1,
    progress: bool = False,
    translator: decoding.Translator | None = None,
) -> list[str]:
    """Output lines for input lines (see the module docstring); ``translator``: one to
    reuse (its compiled decoding loop) instead of a new one."""
    limit = decoding.source_limit(model)
    ids = tok.encode_src(lines)  # encoded once, for the warnings and the decoding
    for n, seq in enumerate(ids, 1):
        if len(seq) + 1 > limit:
            print(
                f"translate: warning: line {n} has {len(seq)} tokens; only the first "
                f"{limit - 1} are translated",
                file=sys.stderr,
            )
    lines_out = []
    translator = translator or decoding.Translator(model, tok, hp)
    for best in translator.translate_nbest(lines, n_best, progress, ids):
        if not best:  # empty input line
            lines_out.extend([""] if n_best == 1 else [f"{r + 1}\t\t" for r in range(n_best)])
        elif n_best == 1:
            lines_out.append(best[0][0])
        else:
            lines_out.extend(f"{r + 1}\t{s:.4f}\t{t}" for r, (t, s) in enumerate(best))
    return lines_out


if __name__ == "__main__":
    hparams.run_main(main)

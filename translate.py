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

For a model with document context (``memory_sentences``), a blank line separates
documents (and stays a blank line in the output): each document is translated in order,
every sentence with the encoder states of the ones before it.
"""

from __future__ import annotations

import cli
import hparams

SCRIPT = cli.Script(
    "translate",
    __doc__,
    fields=cli.DECODING_FIELDS,
    options={
        "ckpt": ("", "checkpoint: a path, last or best (default: the run's default model)"),
        "input": ("", "a file of German sentences, one per line (default: stdin)"),
        "n_best": (1, "print the N best translations of each line (needs --beam_size >= N)"),
        "attention": ("", "PNG path: the cross-attention of one sentence, one panel per head"),
    },
    note=cli.DECODING_NOTE,
)
if __name__ == "__main__":
    cli.start(SCRIPT)  # --help and option errors answer before TensorFlow loads


import sys

import data_load
import decoding
import files
import plots
from hparams import UserError


def plot_attention(model, tok, sentence: str, path: str, max_len_extra: int) -> str:
    """A PNG of the last decoder layer's cross-attention for one sentence, one panel per
    head: translation tokens down, source tokens across (plots.py). Returns the greedy
    translation."""
    att = plots.attention(model, tok, sentence, max_len_extra)
    files.atomic_write(path, plots.png(plots.figures(att)["decoder_cross"]))
    return att.text


def main() -> None:
    hp, opts = cli.parse_args(script=SCRIPT)
    overrides = {k: getattr(hp, k) for k in opts["_set"]}
    # before TensorFlow starts; stdin is read after the run loads (its errors come first)
    decoding.one_thread_per_stream(hp, files.count_lines(opts["input"]))  # None: stdin
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
    docs = decoding.documents_of_lines(lines)  # read by a model with memory only
    for best in translator.translate_nbest(lines, n_best, progress, ids, docs):
        if not best:  # empty input line
            lines_out.extend([""] if n_best == 1 else [f"{r + 1}\t\t" for r in range(n_best)])
        elif n_best == 1:
            lines_out.append(best[0][0])
        else:
            lines_out.extend(f"{r + 1}\t{s:.4f}\t{t}" for r, (t, s) in enumerate(best))
    return lines_out


if __name__ == "__main__":
    hparams.run_main(main)

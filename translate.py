"""Translate German text to English with a trained model, one sentence per line.

    echo "Die Frau liest ein Buch." | python translate.py --logdir log/demo
    python translate.py --preset multi30k --input talk.de > talk.en
    python translate.py --logdir log/demo --beam_size 4 --n_best 3 < sentences.de
    python translate.py --logdir log/demo --sampling_topk 10 --n_best 3 --seed 1 < mono.de
    python translate.py --ensemble log/a,log/b --beam_size 4 < sentences.de
    python translate.py --logdir log/demo --prefix starts.en < sentences.de
    python translate.py --logdir log/demo --score sentences.en --score_tokens < sentences.de
    python translate.py --logdir log/demo --alignments < sentences.de
    python translate.py --logdir log/demo --attention attn.png <<< "Der Hund schläft."

Reads stdin (or --input), applies the training preprocessing (BPE or the word
vocabulary), decodes in length-sorted batches and prints detokenized English on stdout in
the input order. From a pipe or a terminal it answers line by line: the lines waiting
(at most --eval_batch_size) are decoded together, printed and flushed before it reads on,
so each line is answered without waiting for the end of the input; a file (--input, or
stdin redirected from a file) is read whole and decoded in batches sorted by length.
--prefix, --score and --attention read stdin whole. An empty line gives an empty line;
a line longer than the model can take is truncated, with a warning on stderr. With
--n_best N (beam search, or N samples with --sampling_topk), each input gives N lines
``rank<TAB>score<TAB>translation``. The
input is UTF-8 (a byte-order mark and CRLF line ends are fine; anything else is an error
naming the line); stdout that cannot be written (a full disk, a closed pipe) is an error
too.

--sampling_topk K draws each token from the K most probable (0: from every token),
shaped by --sampling_topp and --sampling_temperature; --seed fixes the draws, whatever
the batches and streams. --ensemble decodes with several runs of one vocabulary as one
model (their probabilities averaged at each step). --prefix FILE forces each line's
translation to start with that file's line (an empty line: no prefix). --score FILE
prints, for each line and that file's translation of it, ``score<TAB>translation``: the
summed log-probability of its tokens and </S>; --score_tokens adds a third column, each
token=log-probability. --alignments appends a tab and the Pharaoh word alignment
(``0-0 1-2``: source word - target word) from the cross-attention (scoring.py).

For a model with document context (``memory_sentences``), a blank line separates
documents (and stays a blank line in the output): each document is translated in order,
every sentence with the encoder states of the ones before it.
"""

# ruff: noqa: E402  (the script answers --help before TensorFlow is imported: cli.start)
from __future__ import annotations

from transformer_tf2.config import cli, hparams

SCRIPT = cli.Script(
    "translate",
    __doc__,
    fields=cli.DECODING_FIELDS,
    reads_run=True,
    options={
        "ckpt": ("", "checkpoint: a path, last or best (default: the run's default model)"),
        "input": ("", "a file of German sentences, one per line (default: stdin)"),
        "n_best": (1, "print N translations of each line: the beam's best, or N samples"),
        "ensemble": ("", "LOGDIR,LOGDIR,...: decode with these runs as one (instead of --logdir)"),
        "prefix": ("", "a file of target prefixes, one per input line (empty: none)"),
        "score": ("", "a file of translations, one per input line: print their scores"),
        "score_tokens": (False, "with --score: each token's log-probability too"),
        "alignments": (False, "append a tab and the word alignment (Pharaoh: 0-0 1-2 ...)"),
        "attention": ("", "PNG path: the cross-attention of one sentence, one panel per head"),
    },
    note=cli.DECODING_NOTE,
    text_inputs=("input", "prefix", "score"),
)
if __name__ == "__main__":
    cli.start(SCRIPT)  # --help and option errors answer before TensorFlow loads


import sys

from transformer_tf2.api import Translator
from transformer_tf2.config.hparams import UserError
from transformer_tf2.decoding import plots, translator
from transformer_tf2.utils import files, line_batches


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
    runs = cli.ensemble_runs(opts, "translate") or [hp.logdir]
    check_options(hp, opts)
    # before TensorFlow starts; stdin is read after the run loads (its errors come first)
    translator.decoding_process(hp, files.count_lines(opts["input"]))  # None: stdin
    engine = Translator.from_settings(runs, overrides, opts["ckpt"], "translate")
    hp = engine.hparams
    if not opts["input"] and line_by_line(opts) and line_batches.is_stream(sys.stdin):
        answer_line_by_line(engine, opts, sys.stdin.buffer)
        return
    if opts["input"]:
        lines = files.read_lines(opts["input"])
    else:
        lines = files.split_lines(files.decode_text(sys.stdin.buffer.read(), "stdin"))
    if opts["attention"]:
        if len(runs) > 1:
            raise UserError("--attention plots one run's attention: drop --ensemble")
        if len([s for s in lines if s]) != 1:
            raise UserError("--attention takes exactly one sentence")
        sentence = next(s for s in lines if s)
        text = plot_attention(
            engine.model, engine.tok, sentence, opts["attention"], hp.max_len_extra
        )
        files.print_text(text + "\n")
        print(f"translate: attention written to {opts['attention']}", file=sys.stderr)
        return
    given = {key: aligned_lines(opts[key], lines, key) for key in ("prefix", "score")}
    if opts["score"]:
        out = score_lines(engine, lines, given["score"], opts["score_tokens"])
    else:
        out = translate_lines(
            engine,
            lines,
            opts["n_best"],
            progress=bool(opts["input"]),
            prefixes=given["prefix"],
            alignments=opts["alignments"],
        )
    files.print_text("".join(line + "\n" for line in out))


def line_by_line(opts: dict) -> bool:
    """Whether stdin is answered line by line where it is a pipe or a terminal: not with
    --prefix or --score (a file of one line per input line, checked against the input's
    length) nor --attention (one sentence)."""
    return not (opts["prefix"] or opts["score"] or opts["attention"])


def answer_line_by_line(engine: Translator, opts: dict, stream) -> None:
    """Translate the lines of ``stream`` as they arrive: each batch of the lines waiting
    (at most eval_batch_size; for a model with document context, whole documents, each
    ended by a blank line) is decoded, printed and flushed before the next is taken
    (utils/line_batches.py), so a pipe that waits for each answer gets it."""
    reader = line_batches.LineReader(stream, "stdin")
    size = max(1, engine.hparams.eval_batch_size)
    for first, lines in line_batches.batches(reader, size, engine.model.reads_documents):
        out = translate_lines(
            engine, lines, opts["n_best"], alignments=opts["alignments"], first=first
        )
        files.print_text("".join(line + "\n" for line in out))


def check_options(hp: hparams.Hparams, opts: dict) -> None:
    """The script's options that do not go together, each one UserError line, before the
    run loads."""
    n_best, sampling = opts["n_best"], hp.sampling_topk != 1
    if n_best < 1:
        raise UserError(f"--n_best must be at least 1; got {n_best}")
    if n_best > max(hp.beam_size, 1) and not sampling:
        raise UserError(
            f"--n_best {n_best} needs --beam_size of at least {n_best} (or sampling: "
            "--sampling_topk 0 or K > 1)"
        )
    if opts["score_tokens"] and not opts["score"]:
        raise UserError("--score_tokens goes with --score FILE")
    if opts["score"]:
        for other in ("prefix", "alignments", "attention"):
            if opts[other]:
                raise UserError(f"--score scores given translations: drop --{other}")
        if n_best > 1:
            raise UserError("--score scores one translation per line: drop --n_best")
    if opts["alignments"] and n_best > 1:
        raise UserError("--alignments aligns the best translation: drop --n_best")


def aligned_lines(path: str, lines: list[str], option: str) -> list[str] | None:
    """The lines of ``path`` (None if no path), one per input line, or one UserError."""
    if not path:
        return None
    given = files.read_lines(path)
    if len(given) != len(lines):
        raise UserError(
            f"--{option} {path} has {len(given)} lines but the input has {len(lines)}: "
            "give one per input line (an empty line where there is none)"
        )
    return given


def score_lines(
    engine: Translator, lines: list[str], targets: list[str], tokens: bool
) -> list[str]:
    """``score<TAB>translation`` per (line, target) pair: the summed log-probability of
    the target's tokens and </S> given the line; with ``tokens``, a third column of
    piece=log-probability, </S> last (Translator.score)."""
    out = []
    for target, scored in zip(targets, engine.score(lines, targets, tokens=True)):
        line = f"{scored.score:.4f}\t{target}"
        if tokens:
            line += "\t" + " ".join(f"{p}={x:.4f}" for p, x in scored.tokens)
        out.append(line)
    return out


def translate_lines(
    engine: Translator,
    lines: list[str],
    n_best: int = 1,
    progress: bool = False,
    prefixes: list[str] | None = None,
    alignments: bool = False,
    first: int = 1,
) -> list[str]:
    """Output lines for input lines (see the module docstring), decoded by ``engine``
    (its compiled loops kept from call to call); ``prefixes``: per line the text its
    translation starts with; ``alignments``: append each line's alignment; ``first``:
    the input's number of the first line (for the warnings)."""
    for i, tokens in engine.long_lines(lines):
        print(
            f"translate: warning: line {first + i} has {tokens} tokens; only the first "
            f"{engine.source_limit - 1} are translated",
            file=sys.stderr,
        )
    results = engine.translate_batch(lines, n_best, prefixes, alignments, progress=progress)
    lines_out = []
    for best in results:
        if not best:  # empty input line
            lines_out.extend([""] if n_best == 1 else [f"{r + 1}\t\t" for r in range(n_best)])
        elif alignments:
            lines_out.append(f"{best[0].text}\t{best[0].alignment}")
        elif n_best == 1:
            lines_out.append(best[0].text)
        else:
            lines_out.extend(f"{r + 1}\t{h.score:.4f}\t{h.text}" for r, h in enumerate(best))
    return lines_out


if __name__ == "__main__":
    cli.run_main(main)

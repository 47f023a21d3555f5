"""translate.py from a pipe answers line by line (utils/line_batches.py): a line's
translation is printed and flushed before the next line is read, the lines already
waiting are decoded together, and a model with document context gets whole documents."""

import os
import select
import subprocess
import sys
import threading
import time

import pytest

from helpers import ROOT
from transformer_tf2 import Translator
from transformer_tf2.config.hparams import UserError
from transformer_tf2.utils import line_batches


class Pipe:
    """A pipe whose read end a LineReader reads; lines written as the test goes."""

    def __init__(self):
        read, self.write_fd = os.pipe()
        self.reader = line_batches.LineReader(os.fdopen(read, "rb"), "stdin")

    def send(self, data: bytes) -> None:
        os.write(self.write_fd, data)
        time.sleep(0.05)  # the reader thread queues it

    def close(self) -> None:
        os.close(self.write_fd)


def test_a_batch_is_what_is_waiting_at_most_the_batch_size():
    pipe = Pipe()
    got = line_batches.batches(pipe.reader, size=3)
    pipe.send("\ufeffeins\r\n".encode())
    assert next(got) == (1, ["eins"])  # one line waiting: answered alone, BOM and CR gone
    pipe.send(b"zwei\ndrei\n  vier  \nfunf\n")
    assert next(got) == (2, ["zwei", "drei", "vier"])  # four waiting, three at most
    assert next(got) == (5, ["funf"])
    pipe.send("\ufeffsechs\n".encode())
    pipe.close()
    assert list(got) == [(6, ["\ufeffsechs"])]  # a BOM is dropped on the first line only


def test_whole_documents_wait_for_their_blank_line():
    pipe = Pipe()
    got = line_batches.batches(pipe.reader, size=2, whole_documents=True)
    pipe.send(b"a1\na2\na3\n")
    answers = []
    thread = threading.Thread(target=lambda: answers.append(next(got)))
    thread.start()
    thread.join(0.3)
    assert answers == []  # the document has not ended: nothing is decoded yet
    pipe.send(b"\nb1\n")
    thread.join(5)
    assert answers == [(1, ["a1", "a2", "a3", ""])]  # longer than size: whole, at its end
    pipe.send(b"b2\n\nc1\n")
    assert next(got) == (5, ["b1", "b2", ""])
    pipe.close()
    assert list(got) == [(8, ["c1"])]  # the end of the input ends the last document


def test_bytes_that_are_not_utf8_name_their_line():
    pipe = Pipe()
    got = line_batches.batches(pipe.reader, size=8)
    pipe.send(b"gut\n")
    assert next(got) == (1, ["gut"])
    pipe.send(b"Stra\xdfe\n")
    with pytest.raises(UserError, match=r"stdin:2: not valid UTF-8 \(byte 0xdf\)"):
        next(got)


def test_only_pipes_and_terminals_are_streams(tmp_path):
    path = tmp_path / "f.txt"
    path.write_text("x\n")
    with open(path, "rb") as f:
        assert not line_batches.is_stream(f)
    read, write = os.pipe()
    with os.fdopen(read, "rb") as r, os.fdopen(write, "wb"):
        assert line_batches.is_stream(r)
    assert not line_batches.is_stream(object())


def read_answer(proc, seconds: float) -> str:
    """The next line translate.py prints, or a failed test after ``seconds``."""
    ready, _, _ = select.select([proc.stdout], [], [], seconds)
    assert ready, f"no answer within {seconds} s: {proc.stderr.read1(4000)!r}"
    return proc.stdout.readline().decode("utf-8").rstrip("\n")


@pytest.mark.slow
def test_translate_py_answers_each_line_before_the_next_is_written(quick_run):
    """Through a pipe: a line written, its answer read before the next is written, three
    times, each within a time limit; the answers are the API's translations."""
    logdir = quick_run[0].logdir
    proc = subprocess.Popen(
        [sys.executable, "translate.py", "--logdir", logdir, "--max_len", "12"],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    lines = ["Die Frau liest ein Buch.", "Der Hund schläft.", "Meine Tante trinkt Kaffee."]
    answers = []
    try:
        for k, line in enumerate(lines):
            proc.stdin.write(line.encode() + b"\n")
            proc.stdin.flush()
            answers.append(read_answer(proc, 120 if k == 0 else 20))  # the first loads TF
        proc.stdin.write(b"\n")
        proc.stdin.flush()
        assert read_answer(proc, 20) == ""  # a blank line is answered by a blank line
        proc.stdin.close()
        assert proc.wait(60) == 0
    finally:
        proc.kill()
    engine = Translator.from_run(logdir, max_len=12)
    assert answers == engine.translate(lines)

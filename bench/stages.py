"""What the benchmarks that run the project's scripts share: one stage (prepro.py,
train.py or eval.py) run to completion with its output kept in a log file."""

import os
import shlex
import subprocess
import sys


def run_logged(who: str, command: list[str], log: str, cwd: str) -> None:
    """Runs ``command`` in ``cwd``, appending a ``$ command`` line and then its output
    (standard output and error) to ``log``. A failure ends the benchmark in one line that
    names the script, its exit status and the log; the benchmark's same command again
    resumes."""
    with open(log, "a", encoding="utf-8") as f:
        f.write("$ " + shlex.join(command) + "\n")
        f.flush()
        code = subprocess.call(command, stdout=f, stderr=subprocess.STDOUT, cwd=cwd)
    if code:
        sys.exit(f"{who}: {os.path.basename(command[1])} failed (exit {code}); see {log}")

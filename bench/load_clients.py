"""The load generators of bench/serve_load.py, each sending single-sentence LibreTranslate
requests (``{"q": sentence, "source": "de", "target": "en"}``) to a server on loopback:

* **closed loop**, Debian's ``wrk`` (compiled, so that the client leaves the cores to the
  server it measures), with bench/libretranslate.lua: N connections, each sending its
  next request as soon as its answer came, cycling through the sentences;
* **open loop**, :func:`open_loop`: requests sent at fixed arrival times (a Poisson
  process of a given rate, seeded), whatever the answers, each on a free keep-alive
  connection or a new one, its latency counted from when it was due. A slow answer then
  delays no later request, so the tail is not hidden (no coordinated omission, which a
  closed loop has: a stalled connection sends nothing while it waits). Debian's wrk 4.1
  has no rate option; this client is asyncio on raw sockets, a few percent of a core at
  the rates measured.

Each returns the same figures: answers by status, latency percentiles in ms, the wall
time and the client's own CPU seconds.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import time

LUA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libretranslate.lua")
WRK_LINE = re.compile(r"^WRK (\{.*\})$", re.M)


def find_wrk(install: bool = True) -> str | None:
    """wrk's path; where it is missing and this is a Debian machine run as root, it is
    installed with apt-get first (one line on stderr either way). None: not to be had."""
    path = shutil.which("wrk")
    if path or not install:
        return path
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        print("bench: wrk is not installed (apt-get install wrk); using httpx", file=sys.stderr)
        return None
    print("bench: installing Debian's wrk (apt-get install wrk)", file=sys.stderr, flush=True)
    quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    subprocess.run(["apt-get", "update", "-qq"], **quiet)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "install", "-y", "-qq", "wrk"], env=env, **quiet)
    path = shutil.which("wrk")
    if not path:
        print("bench: wrk could not be installed; using httpx", file=sys.stderr)
    return path


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank ``q`` percentile (0 < q <= 100)."""
    ranked = sorted(values)
    return ranked[max(0, math.ceil(q / 100 * len(ranked)) - 1)] if ranked else float("nan")


def wrk_closed(
    wrk: str, url: str, sentences_file: str, connections: int, seconds: float, timeout: float
) -> dict:
    """wrk with ``connections`` connections on one thread for ``seconds``: {"answers"
    by status, "p50" and "p99" ms, "failed" (socket errors and time-outs), "wall",
    "client_cpu" (wrk's own CPU seconds)}."""
    command = [wrk, "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s"]
    command += [f"--timeout={max(1, round(timeout))}s", "-s", LUA, url + "/translate"]
    proc = subprocess.Popen(
        command + ["--", sentences_file], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    out, err = proc.stdout.read().decode(), proc.stderr.read().decode()
    found = WRK_LINE.search(out)
    if proc.returncode != 0 or not found:
        sys.exit(f"bench: wrk failed (exit {proc.returncode}): {(out + err)[-2000:]}")
    got = json.loads(found.group(1))
    answers = {int(k): n for k, n in got["statuses"].items()}
    return dict(
        answers=answers,
        p50=got["p50_us"] / 1000,
        p99=got["p99_us"] / 1000,
        failed=got["connect"] + got["read"] + got["write"] + got["timeout"],
        wall=got["duration_us"] / 1e6,
        client_cpu=usage.ru_utime + usage.ru_stime,
    )


def request_bytes(host: str, port: int, sentence: str) -> bytes:
    body = json.dumps({"q": sentence, "source": "de", "target": "en"}).encode()
    head = (
        f"POST /translate HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def read_answer(reader: asyncio.StreamReader) -> tuple[int, bool]:
    """(status, whether the server closes the connection) of one HTTP/1.1 answer."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    await reader.readexactly(int(headers.get("content-length", "0")))
    return status, headers.get("connection", "").lower() == "close"


async def _open_loop(host, port, sentences, rate, seconds, timeout, seed) -> dict:
    rng = random.Random(seed)
    idle: list[tuple] = []  # keep-alive connections free to take a request
    latencies: list[float] = []
    answers: dict = {}
    failed = 0
    start = time.perf_counter() + 0.05
    due, k, tasks = start, 0, []

    async def send(sentence: str, when: float) -> None:
        nonlocal failed
        conn = idle.pop() if idle else None
        try:
            if conn is None:
                conn = await asyncio.open_connection(host, port)
            reader, writer = conn
            writer.write(request_bytes(host, port, sentence))
            status, closing = await asyncio.wait_for(read_answer(reader), timeout)
        except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError, ValueError):
            failed += 1
            if conn is not None:
                conn[1].close()
            return
        answers[status] = answers.get(status, 0) + 1
        if status == 200:
            latencies.append(1000 * (time.perf_counter() - when))
        if closing:
            writer.close()
        else:
            idle.append(conn)

    while due < start + seconds:
        wait = due - time.perf_counter()
        if wait > 0:
            await asyncio.sleep(wait)
        tasks.append(asyncio.ensure_future(send(sentences[k % len(sentences)], due)))
        k += 1
        due += rng.expovariate(rate)
    await asyncio.gather(*tasks)
    wall = time.perf_counter() - start
    for _, writer in idle:
        writer.close()
    return dict(
        answers=answers,
        p50=percentile(latencies, 50),
        p99=percentile(latencies, 99),
        failed=failed,
        wall=wall,
        sent=k,
    )


def open_loop(
    url: str,
    sentences: list[str],
    rate: float,
    seconds: float,
    timeout: float,
    seed: int = 0,
) -> dict:
    """Requests arriving at ``rate`` a second (exponential gaps, ``seed``) for
    ``seconds``, each sentence in turn: the figures of :func:`wrk_closed` and "sent"."""
    host, port = re.match(r"http://([^:/]+):(\d+)", url).groups()
    before = resource.getrusage(resource.RUSAGE_SELF)
    got = asyncio.run(_open_loop(host, int(port), sentences, rate, seconds, timeout, seed))
    after = resource.getrusage(resource.RUSAGE_SELF)
    got["client_cpu"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return got

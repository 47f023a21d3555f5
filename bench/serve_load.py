"""The server under load: serve.py on loopback, sent one sentence per request, against
the same decoder on the same sentences in-process (bench/serve_references.py): in
batches in its best layout, and one sentence decoded alone.

    pip install -e ".[serve,bench]"     # FastAPI and uvicorn; httpx, CTranslate2
    apt-get install wrk                 # the closed-loop client (installed if missing, as root)
    python bench/serve_load.py --logdir log/multi30k_sinusoid \
        --src data/multi30k/test_2016_flickr.de.gz \
        --ref data/multi30k/test_2016_flickr.en.gz [--ctranslate2] \
        [--sents 1000] [--concurrency 1,8,64] [--beams 1,4] [--repeats 3] \
        [--open_loop 0.25,0.5,0.75,0.9,1.1]
    python bench/serve_load.py --logdir log/multi30k_sinusoid --beams 1 \
        --concurrency 1,64 --wait_ms 0,2,5,10     # how long the batcher should wait
    python bench/serve_load.py --logdir log/multi30k_sinusoid --beams 1 --concurrency 1,64 \
        --serve_args="--workers 1;--workers 2" --diagnose    # the layouts, and the gaps
    python bench/serve_load.py --logdir log/demo --sents 12 --concurrency 1,4 --beams 1 \
        --repeats 1 --single 4 --port 0 --max_batch 64 --warmup 4 --seconds 2

For each configuration (engine, beam, wait; with ``--serve_args "A;B"`` each variant
too) a fresh ``python serve.py`` (what a user runs: --wait_ms, --max_batch and
--serve_args passed on) on 127.0.0.1, waited for on /health; one warm-up pass of
--warmup requests, then:

* **closed loop**, one pass per level of --concurrency: that many connections, each
  sending its next request as soon as its answer came, for --seconds, cycling through
  the first --sents sentences of --src (plain or .gz, one per line; default the run's
  test split), each a LibreTranslate request ``{"q": sentence, "source": "de", "target":
  "en"}``. The client is Debian's wrk (``--client wrk``, the default: compiled, so that
  it leaves the cores to the server; bench/load_clients.py), or httpx clients in this
  process (``--client httpx``: every sentence once, at most --pass_seconds);
* **open loop** (``--open_loop F,...``): requests arriving at F x the closed loop's
  throughput at its largest concurrency (a Poisson process, seeded), whatever the
  answers, for --seconds each, latency counted from when each was due
  (bench/load_clients.py: no coordinated omission);

then SIGTERM, which must end it with status 0. A row: sentences/s (answered sentences
over the pass's wall time), the p50 and p99 latency of a request in ms, the 503 answers,
and from the server's /info the mean sentences per decoded batch and the share of the
pass's wall time its workers spent decoding (summed over the workers: up to --workers),
and the client's own CPU seconds per second of the pass.

Then the targets, each side measured in the same run, interleaved (common.interleaved:
server, reference, reference, server, ...) and each figure the median of --repeats:
* throughput: sentences/s at the largest concurrency, at least 0.8x the same decoder in
  batches in its best layout;
* latency: the p50 at the smallest concurrency (1), at most 1.3x one sentence decoded
  alone in-process;
* open loop at 0.75 of capacity (where --open_loop has it): p99 at most 3x one batch's
  decoding time at the largest concurrency (the server's decode seconds per batch), and
  no 503.
--ctranslate2 adds the CTranslate2 engine: the run is exported once (``python export.py
--logdir RUN --format ctranslate2 --export_dir TMP``; its position family must convert,
e.g. sinusoid, not xl) and served with ``--engine ctranslate2 --model TMP``.
--diagnose adds, per beam, each engine's own decoding of the chunks a full server makes
(--max_batch sentences in their order) in the server's layout without HTTP: what is left
of the gap is the HTTP and batching cost.
"""

import argparse
import asyncio
import collections
import gzip
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import common

import load_clients
from serve_references import env, export_ctranslate2, reference

ROOT = common.ROOT
THROUGHPUT_TARGET = 0.8  # at least this share of the batched sentences/s at the top concurrency
LATENCY_TARGET = 1.3  # at most this multiple of one sentence alone, at concurrency 1
OPEN_LOOP_SHARE = 0.75  # the open-loop rate (of capacity) of the tail latency target
TAIL_TARGET = 3.0  # there: p99 at most this multiple of one batch's decoding time


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def read_lines(path: str, n: int) -> list[str]:
    """The first ``n`` lines of a plain or gzipped text file, surrounding space removed."""
    opener = gzip.open if path.endswith(".gz") else open
    out = []
    with opener(path, "rt", encoding="utf-8") as f:
        for line in f:
            if len(out) == n:
                break
            out.append(line.strip())
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


class Server:
    """``python serve.py ARGS`` on 127.0.0.1 as a child, its output in ``log``; started
    and waited for on /health by :meth:`start`, ended by SIGTERM in :meth:`stop`."""

    def __init__(self, args: list[str], log: str, port: int, startup_seconds: float):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = [sys.executable, "serve.py", *args, "--port", str(self.port)]
        self.log, self.startup_seconds, self.proc = log, startup_seconds, None

    def tail(self) -> str:
        with open(self.log, encoding="utf-8", errors="replace") as f:
            return f.read()[-2000:]

    def start(self) -> None:
        import httpx

        with open(self.log, "a", encoding="utf-8") as f:
            f.write("$ " + shlex.join(self.args) + "\n")
            f.flush()
            self.proc = subprocess.Popen(
                self.args, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, env=env()
            )
        deadline = time.monotonic() + self.startup_seconds
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                sys.exit(f"bench: serve.py exited ({self.proc.returncode}): {self.tail()}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.kill()
        sys.exit(f"bench: serve.py did not answer /health in {self.startup_seconds:g} s")

    def info(self) -> dict:
        import httpx

        return httpx.get(self.url + "/info", timeout=30).json()

    def stop(self, seconds: float = 60) -> int:
        """SIGTERM, then its exit status (killed after ``seconds``: -9)."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(seconds)
        except subprocess.TimeoutExpired:
            self.kill()
            return -9

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


async def load_pass(
    url: str, sentences: list[str], concurrency: int, pass_seconds: float, request_seconds: float
) -> dict:
    """``concurrency`` clients sending ``sentences`` one per request, each client its
    next sentence as soon as its answer came; stops taking sentences after
    ``pass_seconds``. Latencies (ms) of the answered requests, the status counts, the
    wall time and this process's CPU seconds."""
    import httpx

    todo = iter(sentences)
    latencies: list[float] = []
    codes: collections.Counter = collections.Counter()
    # a client each, one connection each: one pool of many connections costs httpx
    # (httpcore 1.0) time quadratic in them, which capped it near 85 requests/s at 64
    clients = [
        httpx.AsyncClient(
            base_url=url,
            timeout=request_seconds,
            verify=False,  # loopback HTTP: no certificates to load per client
            limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
        )
        for _ in range(concurrency)
    ]
    t0, cpu0 = time.perf_counter(), time.process_time()
    stop = t0 + pass_seconds

    async def client_loop(client):
        for sentence in todo:
            if time.perf_counter() > stop:
                codes["unsent"] += 1
                continue
            start = time.perf_counter()
            body = {"q": sentence, "source": "de", "target": "en"}
            try:
                response = await client.post("/translate", json=body)
                code = response.status_code
                if code == 200 and not isinstance(response.json()["translatedText"], str):
                    code = "bad answer"
            except httpx.HTTPError as e:
                code = type(e).__name__
            codes[code] += 1
            if code == 200:
                latencies.append(1000 * (time.perf_counter() - start))

    try:
        await asyncio.gather(*(client_loop(client) for client in clients))
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    finally:
        for client in clients:
            await client.aclose()
    return dict(latencies=latencies, codes=dict(codes), wall=wall, cpu=cpu)


def batch_figures(before: dict, after: dict, wall: float) -> dict:
    """From the server's /info before and after a pass: sentences per batch, the share
    of the wall time spent decoding (summed over the workers) and seconds per batch."""
    batches = after["batches"] - before["batches"]
    decoded = after["sentences"] - before["sentences"]
    busy = after["decode_seconds"] - before["decode_seconds"]
    return dict(
        batch=decoded / batches if batches else 0.0,
        busy=busy / wall,
        batch_seconds=busy / batches if batches else float("nan"),
    )


def closed_pass(server: Server, sentences: list[str], level: int, args) -> dict:
    """One closed-loop pass of ``level`` connections: the row's figures."""
    if args.client == "wrk":
        got = load_clients.wrk_closed(
            args.wrk, server.url, args.src_file, level, args.seconds, args.request_seconds
        )
        return client_row(got)
    got = asyncio.run(
        load_pass(server.url, sentences, level, args.pass_seconds, args.request_seconds)
    )
    lat = got["latencies"]
    return dict(
        rate=len(lat) / got["wall"],
        p50=common.median(lat) if lat else float("nan"),
        p99=load_clients.percentile(lat, 99),
        s503=got["codes"].get(503, 0),
        failed=sum(n for code, n in got["codes"].items() if code not in (200, 503)),
        client_cpu=got["cpu"] / got["wall"],
        wall=got["wall"],
    )


def open_pass(server: Server, sentences: list[str], rate: float, args) -> dict:
    """Requests arriving at ``rate`` a second for --seconds: the row's figures."""
    got = load_clients.open_loop(
        server.url, sentences, rate, args.seconds, args.request_seconds, seed=1
    )
    return client_row(got)


def client_row(got: dict) -> dict:
    """A row's figures from a load_clients pass (wrk's or the open loop's)."""
    answers = got["answers"]
    return dict(
        rate=answers.get(200, 0) / got["wall"],
        p50=got["p50"],
        p99=got["p99"],
        s503=answers.get(503, 0),
        failed=got["failed"] + sum(n for c, n in answers.items() if c not in (200, 503)),
        client_cpu=got["client_cpu"] / got["wall"],
        wall=got["wall"],
    )


def server_passes(server: Server, sentences: list[str], levels: list[int], args) -> dict:
    """The warm-up, one closed pass per concurrency level, then the open-loop passes at
    shares of the top level's throughput, on a started server: {level or "open F":
    figures}."""
    warm = sentences[: args.warmup] or sentences[:1]
    asyncio.run(load_pass(server.url, warm, max(levels), args.pass_seconds, args.request_seconds))
    out = {}
    passes = [(level, None) for level in levels] + [(None, f) for f in args.open_shares]
    for level, share in passes:
        before = server.info()["batches"]
        if share is None:
            got = closed_pass(server, sentences, level, args)
        else:
            got = open_pass(server, sentences, share * out[max(levels)]["rate"], args)
        got.update(batch_figures(before, server.info()["batches"], got.pop("wall")))
        out[level if share is None else f"open {share:g}"] = got
    return out


def progress(line: str) -> None:
    """A line on stderr: where a long run is."""
    print(f"bench: {time.strftime('%H:%M:%S')} {line}", file=sys.stderr, flush=True)


def serve_command(args, engine: str, beam: int, setting: tuple, model: str) -> list[str]:
    """serve.py's options for ``engine`` at ``beam`` and ``setting``: (wait_ms, the
    --serve_args variant)."""
    wait, extra = setting
    command = ["--logdir", args.logdir, "--beam_size", str(beam), "--wait_ms", f"{wait:g}"]
    command += ["--max_batch", str(args.max_batch)]
    if engine == "ctranslate2":
        command += ["--engine", "ctranslate2", "--model", model]
    return command + shlex.split(extra)


def settings_of(waits: list[float], serve_args: str) -> list[tuple[float, str]]:
    """Each server setting to run: every --wait_ms with every ;-separated variant of
    --serve_args."""
    variants = [v.strip() for v in serve_args.split(";")] or [""]
    return [(wait, extra) for extra in variants for wait in waits]


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--logdir", required=True, help="a trained run (its default model)")
    ap.add_argument("--src", default="", help="source sentences, plain or .gz (default: test)")
    ap.add_argument("--ref", default="", help="their references, for eval.py (default: --src)")
    ap.add_argument("--sents", type=int, default=1000, help="the first N sentences of --src")
    ap.add_argument("--concurrency", default="1,8,64", help="clients at once, one pass each")
    ap.add_argument(
        "--client", default="wrk", choices=("wrk", "httpx"), help="the closed-loop client"
    )
    ap.add_argument("--seconds", type=float, default=20, help="a wrk or open-loop pass's time")
    ap.add_argument(
        "--open_loop", default="", help="open-loop rates, as shares of the top level's sent/s"
    )
    ap.add_argument("--beams", default="1,4", help="beam sizes (1: greedy), a server each")
    ap.add_argument("--wait_ms", default="5", help="serve.py's --wait_ms values, a server each")
    ap.add_argument("--max_batch", type=int, default=64, help="serve.py's --max_batch")
    ap.add_argument(
        "--serve_args",
        default="",
        help='more serve.py options, e.g. "--x 1"; "A;B": a server with each, in turn',
    )
    ap.add_argument("--ctranslate2", action="store_true", help="the CTranslate2 engine too")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each side, interleaved")
    ap.add_argument("--single", type=int, default=100, help="sentences decoded alone")
    ap.add_argument("--warmup", type=int, default=16, help="requests of the warm-up pass")
    ap.add_argument("--port", type=int, default=0, help="serve.py's port (0: a free one)")
    ap.add_argument("--pass_seconds", type=float, default=600, help="an httpx pass's most")
    ap.add_argument("--request_seconds", type=float, default=300, help="a request's timeout")
    ap.add_argument("--startup_seconds", type=float, default=300, help="wait for /health")
    ap.add_argument(
        "--diagnose", action="store_true", help="the server's layout and batches without HTTP"
    )
    return ap


def main() -> None:
    ap = parser()
    args = ap.parse_args()
    levels, beams, waits = ints(args.concurrency), ints(args.beams), floats(args.wait_ms)
    if not levels or min(levels) < 1 or not beams or min(beams) < 1 or not waits:
        ap.error("--concurrency, --beams and --wait_ms take comma-separated values (>= 1)")
    if args.sents < 1 or args.repeats < 1 or args.single < 1:
        ap.error("--sents, --repeats and --single must be at least 1")
    args.open_shares = floats(args.open_loop)
    if any(f <= 0 for f in args.open_shares) or args.seconds <= 0:
        ap.error("--open_loop takes comma-separated shares > 0, and --seconds must be > 0")
    args.wrk = load_clients.find_wrk() if args.client == "wrk" else None
    if args.client == "wrk" and args.wrk is None:
        args.client = "httpx"
    args.logdir = os.path.abspath(args.logdir)
    if not args.src:
        with open(os.path.join(args.logdir, "hparams.json"), encoding="utf-8") as f:
            prepro = os.path.join(ROOT, json.load(f)["prepro_dir"])
        args.src, args.ref = os.path.join(prepro, "test.src"), os.path.join(prepro, "test.tgt")
    sentences = read_lines(args.src, args.sents)
    refs = read_lines(args.ref, args.sents) if args.ref else sentences
    if len(refs) != len(sentences) or not sentences:
        sys.exit(f"bench: {len(sentences)} sentences of {args.src} but {len(refs)} references")
    tmp = tempfile.mkdtemp(prefix="bench_serve_load_")
    try:
        measure(args, sentences, refs, levels, beams, settings_of(waits, args.serve_args), tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def measure(args, sentences, refs, levels, beams, settings, tmp) -> None:
    src, ref = os.path.join(tmp, "src.txt"), os.path.join(tmp, "ref.txt")
    args.src_file = src  # what wrk's script cycles through
    for path, lines in ((src, sentences), (ref, refs)):
        with open(path, "w", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))
    engines = ["tensorflow"] + (["ctranslate2"] if args.ctranslate2 else [])
    model = os.path.join(tmp, "ct2")
    if args.ctranslate2:
        export_ctranslate2(args.logdir, model)
    log = os.path.join(tmp, "serve.log")
    rows: dict[tuple, list[dict]] = collections.defaultdict(list)
    refs_of: dict[tuple, list[dict]] = collections.defaultdict(list)
    exits: list[int] = []
    groups = [(engine, beam) for engine in engines for beam in beams]
    for r in range(args.repeats):
        for engine, beam in groups if r % 2 == 0 else groups[::-1]:
            for side in common.interleaved(r, "server", "reference"):
                progress(f"run {r + 1}/{args.repeats}: {engine}, beam {beam}, {side}")
                if side == "reference":
                    refs_of[engine, beam].append(
                        reference(args, engine, beam, src, ref, tmp, model)
                    )
                    continue
                for setting in settings if r % 2 == 0 else settings[::-1]:
                    command = serve_command(args, engine, beam, setting, model)
                    server = Server(command, log, args.port, args.startup_seconds)
                    try:
                        server.start()
                        got = server_passes(server, sentences, levels, args)
                    finally:
                        exits.append(server.stop())
                    for level, figures in got.items():
                        rows[engine, beam, setting, level].append(figures)
    report(args, rows, refs_of, exits, engines, beams, settings, levels, len(sentences))


def report(args, rows, refs_of, exits, engines, beams, settings, levels, n) -> None:
    """The table, the references and the targets' ratios with PASS or FAIL."""
    what = f"{n} sentences of {args.src}"
    print(f"serve.py under load: {args.logdir}, {what}; median of {args.repeats} runs")
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores; serve.py --max_batch {args.max_batch}")
    client = "wrk, one thread" if args.client == "wrk" else "httpx clients in this process"
    print(f"closed loop: {client}; open loop: asyncio on raw sockets, Poisson arrivals")
    levels = levels + [f"open {f:g}" for f in args.open_shares]
    columns = ("engine", "beam", "wait_ms", "clients", "sent/s", "p50 ms", "p99 ms", "503s")
    columns += ("batch", "busy", "client cpu")
    widths = (12, 5, 8, 10, 9, 9, 9, 6, 7, 6, 11)
    variants = any(extra for _, extra in settings)
    print(
        "".join(f"{c:>{w}}" for c, w in zip(columns, widths)) + ("  serve_args" if variants else "")
    )
    med = {}
    for engine in engines:
        for beam in beams:
            for setting in settings:
                for level in levels:
                    runs = rows[engine, beam, setting, level]
                    m = {k: common.median([x[k] for x in runs]) for k in runs[0]}
                    m["s503"] = sum(x["s503"] for x in runs)
                    m["failed"] = sum(x["failed"] for x in runs)
                    med[engine, beam, setting, level] = m
                    cells = (engine, beam, f"{setting[0]:g}", level, f"{m['rate']:.1f}")
                    cells += (f"{m['p50']:.1f}", f"{m['p99']:.1f}", m["s503"])
                    cells += (f"{m['batch']:.1f}", f"{m['busy']:.2f}", f"{m['client_cpu']:.2f}")
                    line = "".join(f"{str(c):>{w}}" for c, w in zip(cells, widths))
                    print(line + (f"  {setting[1]}" if variants else ""))
    failed = sum(m["failed"] for m in med.values())
    if failed:
        print(f"requests that failed otherwise (not 200, not 503): {failed}")
    if any(exits):
        print(f"serve.py's exit statuses after SIGTERM: {exits} (0 expected)")
    closed = [level for level in levels if isinstance(level, int)]
    top, low = max(closed), min(closed)
    for engine in engines:
        for beam in beams:
            got = refs_of[engine, beam]
            ref = {k: common.median([x[k] for x in got]) for k in got[0]}
            name = "greedy" if beam == 1 else f"beam {beam}"
            batched = "eval.py" if engine == "tensorflow" else "its engine, sorted batches"
            print(
                f"{engine} {name}: batched ({batched}) {ref['rate']:.1f} sent/s; one sentence "
                f"alone in-process {ref['single']:.1f} ms"
            )
            if engine == "ctranslate2" and "layout_chunks" in ref:
                print(
                    f"  its engine on chunks of {args.max_batch} in order, no HTTP: "
                    f"{ref['layout_chunks']:.1f} sent/s"
                )
            elif "layout_chunks" in ref:
                print(
                    f"  the server's layout without HTTP: chunks of {args.max_batch} in order "
                    f"{ref['layout_chunks']:.1f} sent/s; one sentence alone "
                    f"{ref['layout_single']:.1f} ms"
                )
            for setting in settings:
                m_top, m_low = med[engine, beam, setting, top], med[engine, beam, setting, low]
                label = f"wait {setting[0]:g} ms" + (f", {setting[1]}" if setting[1] else "")
                ratio = m_top["rate"] / ref["rate"]
                verdict = "PASS" if ratio >= THROUGHPUT_TARGET else "FAIL"
                print(
                    f"  {label}, {top} clients: {m_top['rate']:.1f} / {ref['rate']:.1f}"
                    f" sent/s = {ratio:.2f}x batched (target >= {THROUGHPUT_TARGET}): {verdict}"
                )
                ratio = m_low["p50"] / ref["single"]
                verdict = "PASS" if ratio <= LATENCY_TARGET else "FAIL"
                print(
                    f"  {label}, {low} client: p50 {m_low['p50']:.1f} / "
                    f"{ref['single']:.1f} ms = {ratio:.2f}x alone (target <= {LATENCY_TARGET}): "
                    f"{verdict}"
                )
                m_open = med.get((engine, beam, setting, f"open {OPEN_LOOP_SHARE:g}"))
                if m_open is not None:
                    ratio = m_open["p99"] / (1000 * m_top["batch_seconds"])
                    ok = ratio <= TAIL_TARGET and m_open["s503"] == 0
                    print(
                        f"  {label}, open loop at {OPEN_LOOP_SHARE:g} of capacity: p99 "
                        f"{m_open['p99']:.1f} ms = {ratio:.2f}x one batch's decoding "
                        f"({1000 * m_top['batch_seconds']:.1f} ms at {top} clients; target <= "
                        f"{TAIL_TARGET:g}), {m_open['s503']} 503s: {'PASS' if ok else 'FAIL'}"
                    )


if __name__ == "__main__":
    main()

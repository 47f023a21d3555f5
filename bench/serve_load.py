"""The server under load: serve.py on loopback, sent one sentence per request by many
clients at once, against the same decoder on the same sentences in batches (eval.py) and
one sentence decoded alone in-process.

    pip install -e ".[serve,bench]"     # FastAPI and uvicorn; httpx, CTranslate2
    python bench/serve_load.py --logdir log/multi30k_sinusoid \
        --src data/multi30k/test_2016_flickr.de.gz \
        --ref data/multi30k/test_2016_flickr.en.gz [--ctranslate2] \
        [--sents 1000] [--concurrency 1,8,64] [--beams 1,4] [--repeats 3]
    python bench/serve_load.py --logdir log/multi30k_sinusoid --beams 1 \
        --concurrency 1,64 --wait_ms 0,2,5,10     # how long the batcher should wait
    python bench/serve_load.py --logdir log/multi30k_sinusoid --beams 1 --concurrency 1,64 \
        --serve_args=";--eval_batch_size 32;--decode_streams 1" --diagnose    # the gaps
    python bench/serve_load.py --logdir log/demo --sents 12 --concurrency 1,4 --beams 1 \
        --repeats 1 --single 4 --port 0 --max_batch 64 --warmup 4 --pass_seconds 600

For each configuration (engine, beam, wait; with ``--serve_args "A;B"`` each variant
too) a fresh ``python serve.py`` (what a user runs: --wait_ms, --max_batch and
--serve_args passed on) on 127.0.0.1, waited for on /health; one warm-up pass of
--warmup requests, then one pass per concurrency level of --concurrency: the first
--sents sentences of --src (plain or .gz, one per line; default the run's test split),
each a LibreTranslate request ``{"q": sentence, "source": "de", "target": "en"}``, sent
by that many clients at once (asyncio in this process, which imports no TensorFlow; an
httpx.AsyncClient and one connection per client); then SIGTERM, which must end it with
status 0. A row: sentences/s (answered sentences over the pass's wall time), the p50 and
p99 latency of a request in ms, the 503 answers, and from the server's /info the mean
sentences per decoded batch and the share of the pass's wall time its batcher spent
decoding. A pass stops taking sentences after --pass_seconds and a request waits at most
--request_seconds: the run is bounded in count and time.

Then the two targets, each side measured in the same run, interleaved (common.interleaved:
server, reference, reference, server, ...) and each figure the median of --repeats:
* throughput: sentences/s at the largest concurrency against the same decoder on the same
  sentences in batches: eval.py's own timing line (``python eval.py --logdir RUN
  --test_src FILE --test_ref FILE [--beam_size 4]``: batches of eval_batch_size sorted by
  length, one stream per core); for CTranslate2 the server's own engine
  (ctranslate2_engine.py) given the sentences in the same sorted batches, in a fresh
  process; the target is at least 0.8x;
* latency: the p50 at the smallest concurrency (1) against one sentence decoded alone
  in-process (``Translator.from_run(RUN, beam_size=B).translate([s])``, or the
  CTranslate2 engine's translate, for each of the first --single sentences after a
  warm-up, in a fresh process: the median ms); the target is at most 2x.
--ctranslate2 adds the CTranslate2 engine: the run is exported once (``python export.py
--logdir RUN --format ctranslate2 --export_dir TMP``; its position family must convert,
e.g. sinusoid, not xl) and served with ``--engine ctranslate2 --model TMP``.
--diagnose adds, per TensorFlow beam, a fresh process laid out as the server (one thread
per stream, serve.py's decoding_process) that decodes the sentences without HTTP: in
chunks of --max_batch in their order (the batches a full server makes) and one sentence
alone; per CTranslate2 beam, its engine on those chunks and how many translate_batch
calls a chunk takes (one per decoding budget). What is left of the gap is the HTTP and
batching cost.
"""

import argparse
import asyncio
import collections
import gzip
import json
import math
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import common

ROOT = common.ROOT
THROUGHPUT_TARGET = 0.8  # at least this share of eval.py's sentences/s at the top concurrency
LATENCY_TARGET = 2.0  # at most this multiple of one sentence alone, at concurrency 1
# eval.py's own timing line: "eval: N sentences in S s (R/s)"
TIMING = re.compile(r"^eval: (\d+) sentences in [\d.]+s \(([\d.]+)/s\)", re.M)

# A fresh process: one sentence alone through the Python API, and (layout "server") the
# server's thread layout and batches without HTTP.
TF_CHILD = r"""
import json, sys, time
run, beam, path, single, layout, max_batch = sys.argv[1:7]
if layout == "server":  # serve.py's set-up: one thread per stream, before TensorFlow runs
    from transformer_tf2.config import hparams
    from transformer_tf2.decoding import translator
    translator.decoding_process(hparams.load(run + "/hparams.json"), None)
from transformer_tf2.api import Translator
t = Translator.from_run(run, beam_size=int(beam))
with open(path, encoding="utf-8") as f:
    lines = f.read().split("\n")[:-1]
for s in lines[:3]:
    t.translate([s])
ms = []
for s in lines[: int(single)]:
    t0 = time.perf_counter()
    t.translate([s])
    ms.append(1000 * (time.perf_counter() - t0))
out = {"ms": ms}
if layout == "server":
    size = int(max_batch)
    t0 = time.perf_counter()
    for start in range(0, len(lines), size):
        t.translate(lines[start : start + size])
    out["chunks_rate"] = len(lines) / (time.perf_counter() - t0)
print("RESULT " + json.dumps(out))
"""

# A fresh process: the server's CTranslate2 engine on the sentences in batches of
# eval_batch_size sorted by length (as eval.py batches), and one sentence alone.
CT2_CHILD = r"""
import json, sys, time
from transformer_tf2.config import hparams
from transformer_tf2.serving.ctranslate2_engine import CTranslate2Engine
model, run, beam, path, single, max_batch = sys.argv[1:7]
hp = hparams.apply(hparams.load(run + "/hparams.json"), {"logdir": run})
engine = CTranslate2Engine(model, hp, {"beam_size": int(beam)})
with open(path, encoding="utf-8") as f:
    lines = f.read().split("\n")[:-1]
for s in lines[:3]:
    engine.translate([s])
ms = []
for s in lines[: int(single)]:
    t0 = time.perf_counter()
    engine.translate([s])
    ms.append(1000 * (time.perf_counter() - t0))
size = engine.hp.eval_batch_size
t0 = time.perf_counter()
lengths = [len(ids) for ids in engine.tok.encode_src(lines)]
order = sorted(range(len(lines)), key=lengths.__getitem__)
for start in range(0, len(order), size):
    engine.translate([lines[i] for i in order[start : start + size]])
out = {"ms": ms, "rate": len(lines) / (time.perf_counter() - t0)}
if int(max_batch):  # --diagnose: the batches a full server makes, in their order
    size = int(max_batch)
    t0 = time.perf_counter()
    for start in range(0, len(lines), size):
        engine.translate(lines[start : start + size])
    out["chunks_rate"] = len(lines) / (time.perf_counter() - t0)
    # CTranslate2 takes one budget per call: the engine's calls per chunk (distinct budgets)
    calls = [len(set(lengths[start : start + size])) for start in range(0, len(lines), size)]
    out["calls"] = sum(calls) / len(calls)
print("RESULT " + json.dumps(out))
"""


def env() -> dict:
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")


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


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank ``q`` percentile (0 < q <= 100)."""
    ranked = sorted(values)
    return ranked[max(0, math.ceil(q / 100 * len(ranked)) - 1)] if ranked else float("nan")


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


def server_passes(server: Server, sentences: list[str], levels: list[int], args) -> dict:
    """The warm-up and one pass per concurrency level on a started server: {level:
    figures}."""
    warm = sentences[: args.warmup] or sentences[:1]
    asyncio.run(load_pass(server.url, warm, max(levels), args.pass_seconds, args.request_seconds))
    out = {}
    for level in levels:
        before = server.info()["batches"]
        got = asyncio.run(
            load_pass(server.url, sentences, level, args.pass_seconds, args.request_seconds)
        )
        after = server.info()["batches"]
        batches = after["batches"] - before["batches"]
        decoded = after["sentences"] - before["sentences"]
        busy = after["decode_seconds"] - before["decode_seconds"]
        lat = got["latencies"]
        out[level] = dict(
            rate=len(lat) / got["wall"],
            p50=common.median(lat) if lat else float("nan"),
            p99=percentile(lat, 99),
            s503=got["codes"].get(503, 0),
            failed=sum(n for code, n in got["codes"].items() if code not in (200, 503)),
            batch=decoded / batches if batches else 0.0,
            busy=busy / got["wall"],
            client_cpu=got["cpu"] / got["wall"],
        )
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


def eval_rate(args, beam: int, src: str, ref: str, results: str) -> float:
    """eval.py's own sentences/s on the sentences of ``src`` (references ``ref``)."""
    command = [sys.executable, "eval.py", "--logdir", args.logdir, "--test_src", src]
    command += ["--test_ref", ref, "--results_dir", results, "--beam_size", str(beam)]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env())
    timing = TIMING.search(proc.stdout)
    if proc.returncode != 0 or not timing:
        sys.exit(f"bench: eval.py failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
    return float(timing.group(2))


def reference(args, engine: str, beam: int, src: str, ref: str, tmp: str, model: str) -> dict:
    """The batched sentences/s and the one-sentence-alone latencies of ``engine``."""
    if engine == "ctranslate2":
        child = [sys.executable, "-c", CT2_CHILD, model, args.logdir, str(beam), src]
        child += [str(args.single), str(args.max_batch if args.diagnose else 0)]
        got = common.run_child(child, "bench (CTranslate2)", ROOT, env())
        out = dict(rate=got["rate"], single=common.median(got["ms"]))
        if args.diagnose:
            out.update(layout_chunks=got["chunks_rate"], calls=got["calls"])
        return out
    rate = eval_rate(args, beam, src, ref, os.path.join(tmp, "results"))
    child = [sys.executable, "-c", TF_CHILD, args.logdir, str(beam), src, str(args.single)]
    got = common.run_child(child + ["api", "0"], "bench (alone)", ROOT, env())
    out = dict(rate=rate, single=common.median(got["ms"]))
    if args.diagnose:
        got = common.run_child(
            child + ["server", str(args.max_batch)], "bench (server layout)", ROOT, env()
        )
        out.update(layout_single=common.median(got["ms"]), layout_chunks=got["chunks_rate"])
    return out


def export_ctranslate2(logdir: str, folder: str) -> None:
    command = [sys.executable, "export.py", "--logdir", logdir, "--format", "ctranslate2"]
    proc = subprocess.run(
        command + ["--export_dir", folder], cwd=ROOT, capture_output=True, text=True, env=env()
    )
    if proc.returncode != 0:
        sys.exit(f"bench: export.py --format ctranslate2 failed: {proc.stderr[-2000:]}")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--logdir", required=True, help="a trained run (its default model)")
    ap.add_argument("--src", default="", help="source sentences, plain or .gz (default: test)")
    ap.add_argument("--ref", default="", help="their references, for eval.py (default: --src)")
    ap.add_argument("--sents", type=int, default=1000, help="the first N sentences of --src")
    ap.add_argument("--concurrency", default="1,8,64", help="clients at once, one pass each")
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
    ap.add_argument("--pass_seconds", type=float, default=600, help="a pass stops after it")
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
    columns = ("engine", "beam", "wait_ms", "clients", "sent/s", "p50 ms", "p99 ms", "503s")
    columns += ("batch", "busy", "client cpu")
    widths = (12, 5, 8, 8, 9, 9, 9, 6, 7, 6, 11)
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
    top, low = max(levels), min(levels)
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
            if "calls" in ref:
                print(
                    f"  its engine on chunks of {args.max_batch} in order, no HTTP: "
                    f"{ref['layout_chunks']:.1f} sent/s, {ref['calls']:.1f} translate_batch "
                    "calls a chunk (one per budget)"
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


if __name__ == "__main__":
    main()

"""Serve a trained run over HTTP: LibreTranslate's API, this project's own endpoints and a
page to try it, with concurrent requests decoded together on the warm model.

    python serve.py --logdir log/demo                      # http://127.0.0.1:8000
    python serve.py --logdir log/demo --beam_size 4 --port 5000
    python serve.py --engine ctranslate2 --model exported/demo_ct2 --logdir log/demo

Endpoints: ``POST /translate`` and ``GET /languages`` (LibreTranslate's: its clients work
unchanged), ``POST /v1/translate`` (n-best lists with scores, alignments, prefixes, a
seed), ``POST /v1/score``, ``GET /health``, ``GET /info``, ``GET /`` (the page) and
``GET /docs`` (the API in OpenAPI). --workers threads decode (one per core by default),
each one batch at a time: a free worker takes the oldest request waiting at once, with the
waiting requests closest to it in length, up to --max_batch sentences and --max_tokens
padded source tokens, and waits (at most --wait_ms) for more only while another worker
is busy and requests keep arriving (docs/serving.md); past --max_queue sentences waiting
the server answers 503 with Retry-After; a request over --max_sentences sentences or
--max_chars characters in a sentence gets 413. SIGTERM stops taking requests, answers
those accepted and exits 0, all within --drain_seconds: a request not answered by then
gets 503, and a batch still decoding is abandoned.

It binds to 127.0.0.1 unless --host says otherwise, and has no authentication: put it
behind a proxy that authenticates before opening it to a network (docs/serving.md).
--engine ctranslate2 serves an ``export.py --format ctranslate2`` model (--model) with
CTranslate2's decoder; --logdir then names the run it was exported from.
"""

# ruff: noqa: E402  (the script answers --help before TensorFlow is imported: cli.start)
from __future__ import annotations

from transformer_tf2.config import cli

# how long an idle keep-alive connection stays open: longer than the clients' and proxies'
# own idle limits (httpx 5 s, load balancers 60 s), so that the client closes it first. With
# uvicorn's 5 s a pooled connection could be closed by the server just as a client sent on
# it (8 of 3,000 requests of 64 concurrent httpx clients failed with a ReadError)
KEEP_ALIVE_SECONDS = 75

SCRIPT = cli.Script(
    "serve",
    __doc__,
    fields=cli.DECODING_FIELDS,
    reads_run=True,
    options={
        "ckpt": ("", "checkpoint: a path, last or best (default: the run's default model)"),
        "host": ("127.0.0.1", "the address to listen on (0.0.0.0: every network; no auth)"),
        "port": (8000, "the port to listen on"),
        "engine": ("tensorflow", "tensorflow (the run's model) | ctranslate2 (--model)"),
        "model": ("", "with --engine ctranslate2: the exported model's folder"),
        "max_sentences": (128, "sentences per request; past it: 413"),
        "max_chars": (2000, "characters per sentence; past it: 413"),
        "workers": (0, "batches decoded at once, one thread each (0: one per core)"),
        "max_batch": (64, "sentences decoded in one batch"),
        "max_tokens": (4096, "padded source tokens in one batch (0: no bound)"),
        "wait_ms": (5.0, "the most a request waits for company, only while a worker is busy"),
        "max_queue": (1024, "sentences waiting or being decoded; past it: 503"),
        "drain_seconds": (30.0, "on SIGTERM, how long accepted requests may take"),
    },
    note=cli.DECODING_NOTE,
)
if __name__ == "__main__":
    cli.start(SCRIPT)  # --help and option errors answer before TensorFlow loads

import os
import signal
import sys

import uvicorn

from transformer_tf2.api import Translator
from transformer_tf2.config import hparams
from transformer_tf2.config.hparams import UserError
from transformer_tf2.decoding import translator
from transformer_tf2.serving import app as serving
from transformer_tf2.serving import ctranslate2_engine, engines


def limits_of(opts: dict) -> serving.Limits:
    """The --max_* and --wait_ms options as Limits, each checked (one UserError line)."""
    for name in ("max_sentences", "max_chars", "max_batch", "max_queue"):
        if opts[name] < 1:
            raise UserError(f"--{name} must be at least 1; got {opts[name]}")
    for name in ("workers", "max_tokens"):
        if opts[name] < 0:
            raise UserError(f"--{name} must not be negative; got {opts[name]}")
    if not 0 <= opts["wait_ms"] <= 1000:
        raise UserError(f"--wait_ms must be between 0 and 1000; got {opts['wait_ms']}")
    if opts["drain_seconds"] < 0:
        raise UserError(f"--drain_seconds must not be negative; got {opts['drain_seconds']}")
    return serving.Limits(
        opts["max_sentences"],
        opts["max_chars"],
        opts["max_batch"],
        opts["wait_ms"],
        opts["max_queue"],
        opts["max_tokens"],
        opts["workers"] or cores(),
    )


def cores() -> int:
    """The cores this process may use: one decoding worker each by default."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def build_engine(hp, opts: dict, workers: int) -> engines.Engine:
    """The engine --engine names, loaded (one UserError line for a wrong combination)."""
    overrides = {k: getattr(hp, k) for k in opts["_set"]}
    if opts["engine"] == "tensorflow":
        if opts["model"]:
            raise UserError("--model names a CTranslate2 model: add --engine ctranslate2")
        return engines.TensorFlowEngine(
            Translator.from_settings([hp.logdir], overrides, opts["ckpt"], "serve")
        )
    if opts["engine"] == "ctranslate2":
        if not opts["model"]:
            raise UserError(
                "--engine ctranslate2 needs --model DIR: a model of python export.py "
                "--format ctranslate2"
            )
        return ctranslate2_engine.CTranslate2Engine(opts["model"], hp, overrides, workers)
    raise UserError(f"--engine must be tensorflow or ctranslate2; got {opts['engine']!r}")


def main() -> None:
    hp, opts = cli.parse_args(script=SCRIPT)
    limits = limits_of(opts)
    # before TensorFlow starts: one thread per worker (one worker: TensorFlow's own pools)
    translator.decoding_process(hparams.apply(hp, {"decode_streams": limits.workers}), None)
    engine = build_engine(hp, opts, limits.workers)
    application = serving.create_app(engine, limits, opts["drain_seconds"])
    print(
        f"serve: http://{opts['host']}:{opts['port']}/ ({engine.name} engine, {hp.logdir}, "
        f"{limits.workers} worker{'s' if limits.workers > 1 else ''}); "
        "no authentication: keep it on 127.0.0.1 or behind an authenticating proxy",
        file=sys.stderr,
        flush=True,
    )
    config = uvicorn.Config(
        application,
        host=opts["host"],
        port=opts["port"],
        log_level="warning",
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        # the application answers every request by the drain's deadline (503 past it);
        # uvicorn's own limit, a second later, is only a backstop
        timeout_graceful_shutdown=opts["drain_seconds"] + 1,
    )
    # uvicorn drains on SIGTERM, then raises it again with the handler found at its start:
    # a handler that returns makes a drained server's exit status 0
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    Server(config, application).run()
    counts = application.state.counts
    unanswered = counts.unanswered()
    print(
        f"serve: stopped; requests {counts.summary()}"
        + (f"; {unanswered} read and not answered" if unanswered else ""),
        file=sys.stderr,
        flush=True,
    )
    if application.state.batcher.alive:
        # a batch still decoding at the drain's deadline (nobody waits for it now): the
        # process ends without waiting for it, as at exit Python would (its decoding
        # threads are not daemons)
        sys.stdout.flush()
        os._exit(0)


class Server(uvicorn.Server):
    """uvicorn's server with the application's drain (serving/drain.py): the first
    SIGTERM or Ctrl-C starts it, and the listening socket closes at once; the open
    connections are kept until every accepted request is answered (or the drain's time
    is up), so that a request already sent on one gets its answer (503 for a new one,
    with Connection: close), not a closed connection. Then uvicorn's own shutdown. A
    second Ctrl-C stops at once."""

    def __init__(self, config: uvicorn.Config, application):
        super().__init__(config)
        self.application = application
        self.draining = self.listening_closed = False

    def handle_exit(self, sig, frame) -> None:
        if self.draining:  # a second signal: uvicorn's (Ctrl-C: stop now)
            super().handle_exit(sig, frame)
            return
        self.draining = True
        self.application.state.drain()
        print(
            f"serve: draining ({signal.Signals(sig).name}): no new connection, new "
            "requests get 503, the accepted ones are answered",
            file=sys.stderr,
            flush=True,
        )

    async def on_tick(self, counter: int) -> bool:
        if self.draining and not self.listening_closed:
            self.listening_closed = True
            for server in self.servers:
                server.close()
        if self.draining and self.application.state.drained():
            self.should_exit = True
        return await super().on_tick(counter)


if __name__ == "__main__":
    cli.run_main(main)

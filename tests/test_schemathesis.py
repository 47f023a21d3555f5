"""The server against its own contract, by a tool that looks for what breaks it:
schemathesis (all its checks) draws requests from the server's OpenAPI schema, valid and
invalid, and sends them to a server of a tiny run on 127.0.0.1. No request gets a 500, a
valid one is never refused, an invalid one never accepted, every status and answer is the
one the schema documents (serving/schema.py), and the server answers /health afterwards.

The server is serve.py's application (app.create_app) on uvicorn in a thread of this
process, for three engines whose schemas differ: beam search (alternatives, alignments),
sampling (a seed) and CTranslate2 (no alignments). schemathesis runs as a command, with a
fixed seed and a bounded number of cases; a 413 (over the size limits) counts as a
refusal of an invalid request, as the schema says; tests/schemathesis_hooks.py keeps the
one rule JSON Schema cannot say (a list of prefixes or targets, one per sentence)."""

import os
import re
import subprocess
import sys
import threading
import time

import httpx
import pytest

from helpers import ROOT, free_port
from transformer_tf2.api import Translator
from transformer_tf2.serving import app as serving
from transformer_tf2.serving import engines

pytestmark = pytest.mark.slow

pytest.importorskip("schemathesis")
uvicorn = pytest.importorskip("uvicorn")

LIMITS = serving.Limits(max_sentences=8, max_chars=200, max_batch=16, wait_ms=1, max_queue=64)
EXAMPLES = 25  # cases per operation and phase
CONFIG = """[checks.negative_data_rejection]
expected-statuses = [400, 401, 403, 404, 405, 406, 409, 413, 415, 422, 428, 429, "5xx"]
"""


def engine_of(kind: str, hp, tmp_path) -> engines.Engine:
    logdir = hp.logdir
    if kind == "beam":
        return engines.TensorFlowEngine(Translator.from_run(logdir, beam_size=3))
    if kind == "sampling":
        return engines.TensorFlowEngine(Translator.from_run(logdir, sampling_topk=5, seed=1))
    pytest.importorskip("ctranslate2")
    import export
    from transformer_tf2.serving.ctranslate2_engine import CTranslate2Engine

    model = str(tmp_path / "ct2")
    export.export_ctranslate2(logdir, model, {}, "", "none")
    return CTranslate2Engine(model, hp, {"beam_size": 2})


class ThreadServer:
    """uvicorn serving ``application`` on a free port of 127.0.0.1, in a thread."""

    def __init__(self, application):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(application, host="127.0.0.1", port=self.port, log_level="error")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "no server"
            time.sleep(0.05)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(60)


@pytest.mark.parametrize("kind", ["beam", "sampling", "ctranslate2"])
def test_schemathesis_finds_no_request_the_server_mishandles(kind, quick_run, tmp_path):
    engine = engine_of(kind, quick_run[0], tmp_path)
    server = ThreadServer(serving.create_app(engine, LIMITS, drain_seconds=5))
    try:
        (tmp_path / "schemathesis.toml").write_text(CONFIG)
        command = [
            sys.executable,
            *("-m", "schemathesis.cli", "run", f"{server.url}/openapi.json"),
            *("--checks", "all", "--max-examples", str(EXAMPLES), "--seed", "2026"),
            *("--generation-database", "none", "--request-timeout", "60", "--no-color"),
        ]
        env = {
            **os.environ,
            "SCHEMATHESIS_HOOKS": "schemathesis_hooks",
            "PYTHONPATH": os.path.join(ROOT, "tests"),
        }
        done = subprocess.run(
            command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
        )
        out = done.stdout + done.stderr
        assert done.returncode == 0, out[-6000:]
        cases = re.search(r"(\d+) generated, (\d+) passed", out)
        assert cases and cases[1] == cases[2] and int(cases[1]) >= 100, out[-3000:]
        assert "Operations:       6 selected / 6 total" in out, out[-3000:]
        with httpx.Client(base_url=server.url, trust_env=False, timeout=30) as client:
            assert client.get("/health").json()["status"] == "ok"
            # the schema is the server's own, from its limits and its engine
            spec = client.get("/openapi.json").json()
        body = spec["paths"]["/v1/translate"]["post"]["requestBody"]["content"]
        properties = body["application/json"]["schema"]["properties"]
        assert properties["n_best"]["maximum"] == engine.max_n_best
        assert ("seed" in properties) == (kind == "sampling")
        assert properties["q"]["oneOf"][1]["maxItems"] == LIMITS.max_sentences
        refusals = spec["paths"]["/translate"]["post"]["responses"]
        assert {"200", "400", "413", "503"} <= set(refusals)
        assert "Retry-After" in refusals["503"]["headers"]
    finally:
        server.stop()

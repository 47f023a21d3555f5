"""bench/load_clients.py against a small HTTP server of the test's own on loopback (no
model): the open loop sends at its rate whatever the answers, counts each answer by
status and follows ``Connection: close``; wrk's script sends each sentence as valid JSON
(quotes, backslashes, tabs and umlauts escaped) and reports the answers by status."""

import asyncio
import json
import threading

import pytest

import load_clients

SENTENCES = ['Er sagt "ja".', "ein \\ Pfad\tmit Tab", "Größe über alles", "plain"]


class FakeServer:
    """POST /translate on 127.0.0.1: every 5th request gets 503, every 7th answer says
    ``Connection: close`` (and closes); records the bodies it read."""

    def __init__(self):
        self.bodies: list[dict] = []
        self.bad = 0
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self.thread.start()
        assert ready.wait(10)
        self.url = f"http://127.0.0.1:{self.port}"

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        ready.set()
        self.loop.run_forever()

    async def _serve(self, reader, writer) -> None:
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
                length = int(head.lower().split("content-length:")[1].split("\r\n")[0])
                body = await reader.readexactly(length)
                try:
                    self.bodies.append(json.loads(body.decode("utf-8")))
                except ValueError:
                    self.bad += 1
                n = len(self.bodies) + self.bad
                status = b"503 Service Unavailable" if n % 5 == 0 else b"200 OK"
                closing = n % 7 == 0
                answer = b'{"translatedText": "x"}'
                writer.write(
                    b"HTTP/1.1 "
                    + status
                    + b"\r\nContent-Type: application/json\r\n"
                    + f"Content-Length: {len(answer)}\r\n".encode()
                    + (b"Connection: close\r\n" if closing else b"")
                    + b"\r\n"
                    + answer
                )
                await writer.drain()
                if closing:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    def stop(self) -> None:
        async def cancel_connections():
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(cancel_connections(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def server():
    s = FakeServer()
    yield s
    s.stop()


def test_the_open_loop_sends_on_its_schedule_and_counts_every_answer(server):
    got = load_clients.open_loop(server.url, SENTENCES, rate=200, seconds=0.5, timeout=5, seed=3)
    # a Poisson process of 200/s over 0.5 s: about 100 requests, each answered
    assert 50 <= got["sent"] <= 170
    assert sum(got["answers"].values()) == got["sent"] and got["failed"] == 0
    assert got["answers"][503] == got["sent"] // 5
    assert len(server.bodies) == got["sent"] and server.bad == 0
    assert server.bodies[0] == {"q": SENTENCES[0], "source": "de", "target": "en"}
    assert [b["q"] for b in server.bodies[:5]] == SENTENCES + SENTENCES[:1]
    assert 0 < got["p50"] <= got["p99"] and got["client_cpu"] >= 0
    # the same seed, the same schedule
    again = load_clients.open_loop(server.url, SENTENCES, rate=200, seconds=0.5, timeout=5, seed=3)
    assert again["sent"] == got["sent"]


def test_wrk_sends_valid_json_of_every_sentence_and_counts_the_answers(server, tmp_path):
    wrk = load_clients.find_wrk(install=False)
    if wrk is None:
        pytest.skip("Debian's wrk is not installed (apt-get install wrk; .ci/run installs it)")
    lines = tmp_path / "sentences.txt"
    lines.write_text("".join(s + "\n" for s in SENTENCES), encoding="utf-8")
    got = load_clients.wrk_closed(wrk, server.url, str(lines), 2, 1, 5)
    assert server.bad == 0 and len(server.bodies) >= 8
    assert {b["q"] for b in server.bodies} == set(SENTENCES)
    assert all(b["source"] == "de" and b["target"] == "en" for b in server.bodies)
    answered = sum(got["answers"].values())
    assert got["answers"][200] > 0 and got["answers"].get(503, 0) > 0
    assert answered <= len(server.bodies) and 0 < got["p50"] <= got["p99"]
    assert 0.5 < got["wall"] < 5 and got["client_cpu"] > 0

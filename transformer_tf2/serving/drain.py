"""How the server stops: the drain (SIGTERM or Ctrl-C; serve.py starts it, app.py follows
it, docs/serving.md "Stopping it").

From the signal on, the server takes no new connection (serve.py closes its listening
socket at once), refuses new decoding with 503 and Retry-After, and says ``Connection:
close`` on every answer, so that no client sends another request on a connection that is
about to close. The requests already accepted are decoded and answered; one still waiting
when ``drain_seconds`` are up gets 503. The connections stay open until then, so that a
request a client had already sent on one is answered (503) rather than cut off; then the
server closes them and stops. Every request the server read is answered:
:class:`Counts` keeps, per path, the requests read and the statuses answered, which
serve.py prints as it stops.
"""

from __future__ import annotations

import asyncio
import collections
import time


class Drain:
    """The drain's state, shared by the application's requests (on the event loop) and
    serve.py's signal handling. ``draining`` from :meth:`start` on; ``deadline`` (a
    ``time.monotonic()``) when the accepted requests' time is up; :meth:`wait` returns
    once the drain starts."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.draining = False
        self.deadline: float | None = None
        self.event: asyncio.Event | None = None  # made on the event loop (:meth:`bind`)

    def bind(self) -> None:
        """On the event loop, before the first request: the event requests wait on."""
        self.event = asyncio.Event()
        if self.draining:
            self.event.set()

    def start(self) -> None:
        """The server stops: the accepted requests have ``seconds`` from now; those
        waiting hear of it at once. Called again, it changes nothing."""
        if self.deadline is None:
            self.deadline = time.monotonic() + self.seconds
        self.draining = True
        if self.event is not None:
            self.event.set()

    async def wait(self) -> None:
        await self.event.wait()

    def left(self) -> float | None:
        """Seconds until the deadline (at least 0); None before the drain."""
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - time.monotonic())


class Counts:
    """Per path of ``known`` (the application's routes, set once they are; any other
    path counts as "other", so that a client cannot grow the table), the requests read
    (their headers reached the application) and the statuses of the answers sent in
    full."""

    def __init__(self):
        self.known: set[str] = set()
        self.paths: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)

    def of(self, path: str) -> collections.Counter:
        return self.paths[path if path in self.known else "other"]

    def unanswered(self) -> int:
        return sum(
            c["read"] - sum(v for k, v in c.items() if k != "read") for c in self.paths.values()
        )

    def summary(self) -> str:
        """``"/translate: 812 read, answered 200 x760, 503 x52; /health: ..."``."""
        parts = []
        for path, c in sorted(self.paths.items()):
            statuses = sorted(k for k in c if k != "read")
            answers = ", ".join(f"{k} x{c[k]}" for k in statuses)
            parts.append(f"{path}: {c['read']} read, answered {answers or 'none'}")
        return "; ".join(parts) or "no request read"


class Middleware:
    """ASGI middleware: counts each request read and each answer sent (:class:`Counts`),
    and once the server drains, has every answer say ``Connection: close``."""

    def __init__(self, app, drain: Drain, counts: Counts):
        self.app, self.drain, self.counts = app, drain, counts

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        counts = self.counts.of(scope["path"])
        counts["read"] += 1
        status = None

        async def counted(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                if self.drain.draining:
                    headers = [(k, v) for k, v in message.get("headers", []) if k != b"connection"]
                    message = {**message, "headers": headers + [(b"connection", b"close")]}
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body"):
                counts[status] += 1

        await self.app(scope, receive, counted)

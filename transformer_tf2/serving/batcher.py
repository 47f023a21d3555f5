"""Requests that arrive together, decoded together: a bounded queue in front of one
decoding engine, drained by one worker thread.

Each HTTP request becomes a :class:`Job` (its sentences and the options that shape its
decoding). The worker takes the first job waiting, then waits up to ``wait_ms`` for more
jobs with the same options, up to ``max_batch`` sentences in all, decodes them in one call
of the engine (whose Translator batches and streams them, largest first) and hands each
job its own slice of the results. So 64 single-sentence requests arriving within a few
milliseconds cost about one batch of 64, not 64 decodings.

The queue is bounded in sentences (``max_queue``): a job that would pass the bound is
refused at once (:class:`Full`: the server answers 503 with Retry-After), so memory stays
bounded under overload and every accepted job is answered. A job whose client has gone
(its future cancelled) before its batch starts is dropped at once, freeing its place; the
worker itself never stops for a client, and a batch that fails is decoded again job by job,
so that one job's error is its own. :meth:`Batcher.close` stops taking jobs and lets the
worker finish those accepted (a server's drain on SIGTERM).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import threading
import time
from typing import Any, Callable


class Full(Exception):
    """The queue cannot take a job now; ``retry_after``: seconds a client should wait."""

    def __init__(self, retry_after: int):
        super().__init__(f"the queue is full; retry after {retry_after} s")
        self.retry_after = retry_after


class Closed(Exception):
    """The batcher is draining: it takes no new job."""


@dataclasses.dataclass(eq=False)
class Job:
    """One request's work: ``sentences`` decoded with the options of ``key`` (jobs of one
    key share a batch; ``alone`` jobs, e.g. sampling, whose draws depend on a sentence's
    place in its batch, never share one). ``future`` gets the per-sentence results."""

    sentences: list[str]
    key: tuple = ()
    extra: dict = dataclasses.field(default_factory=dict)  # per-sentence lists (prefixes)
    alone: bool = False
    future: Any = None  # asyncio.Future, set on the event loop's thread
    loop: Any = None
    queued_at: float = 0.0


@dataclasses.dataclass
class Stats:
    """What the worker did: batches run, sentences decoded, jobs dropped (client gone),
    jobs refused (queue full), the largest batch and its wait."""

    batches: int = 0
    sentences: int = 0
    dropped: int = 0
    refused: int = 0
    largest: int = 0
    decode_seconds: float = 0.0


class Batcher:
    """The queue and its worker thread. ``run(jobs) -> [result per job]`` decodes a
    batch: jobs of one key, whose sentences it decodes in one call (engines.run_jobs).
    ``max_batch``: most sentences in one batch;
    ``wait_ms``: how long the worker waits for more jobs after the first; ``max_queue``:
    most sentences waiting or being decoded."""

    def __init__(
        self,
        run: Callable[[list[Job]], list[list]],
        max_batch: int = 64,
        wait_ms: float = 5.0,
        max_queue: int = 1024,
    ):
        self.run, self.max_batch, self.wait = run, max(1, max_batch), wait_ms / 1000.0
        self.max_queue = max(1, max_queue)
        self.jobs: collections.deque[Job] = collections.deque()
        self.queued = 0  # sentences waiting or being decoded
        self.cond = threading.Condition()
        self.closed = False
        self.stats = Stats()
        self.recent = collections.deque(maxlen=32)  # (sentences, seconds) of the last batches
        self.thread = threading.Thread(target=self._work, name="batcher", daemon=True)
        self.thread.start()

    # ------------------------------------------------------------------ the event loop side
    def submit(self, job: Job) -> asyncio.Future:
        """Queue ``job`` (from a coroutine on the event loop) and return its future.
        Raises :class:`Full` or :class:`Closed` at once, queuing nothing."""
        loop = asyncio.get_running_loop()
        job.loop, job.future, job.queued_at = loop, loop.create_future(), time.monotonic()
        with self.cond:
            if self.closed:
                raise Closed()
            if self.queued + len(job.sentences) > self.max_queue:
                self.stats.refused += 1
                raise Full(self.retry_after())
            self.queued += len(job.sentences)
            self.jobs.append(job)
            self.cond.notify()
        # a client that goes (its future cancelled) frees its place now, not when the
        # worker reaches its job, so that the queue's bound counts live jobs only
        job.future.add_done_callback(lambda future: self._forget(job))
        return job.future

    def retry_after(self) -> int:
        """Seconds until the queue has drained, by the recent batches' speed (at least 1)."""
        done = sum(n for n, _ in self.recent)
        seconds = sum(s for _, s in self.recent)
        rate = done / seconds if seconds > 0 else 50.0
        return max(1, int(self.queued / max(rate, 1e-3) + 0.999))

    def close(self, timeout: float | None = None) -> bool:
        """Take no new job; the worker finishes the accepted ones and stops. Returns
        whether it stopped within ``timeout`` seconds."""
        with self.cond:
            self.closed = True
            self.cond.notify_all()
        self.thread.join(timeout)
        return not self.thread.is_alive()

    @property
    def pending(self) -> int:
        with self.cond:
            return self.queued

    def _forget(self, job: Job) -> None:
        """A job's future is done: if cancelled while its job waits, drop the job and
        free its place (a job already in a batch frees it when the batch ends)."""
        if not job.future.cancelled():
            return
        with self.cond:
            try:
                self.jobs.remove(job)  # Job compares by identity
            except ValueError:
                return  # taken by the worker (or dropped by it) already
            self.queued -= len(job.sentences)
            self.stats.dropped += 1
            self.cond.notify_all()

    # ------------------------------------------------------------------ the worker side
    def _take(self) -> list[Job] | None:
        """The next batch: the first job waiting and, within ``wait_ms`` of it, the jobs
        of its key up to ``max_batch`` sentences (an ``alone`` job goes by itself); None
        once closed and empty. Jobs whose client has gone are dropped on the way."""
        with self.cond:
            while True:
                while not self.jobs and not self.closed:
                    self.cond.wait()
                first = self._pop_live(0)
                if first is not None:
                    break
                if self.closed and not self.jobs:
                    return None
            batch, size = [first], len(first.sentences)
            if first.alone:
                return batch
            deadline = time.monotonic() + self.wait
            while size < self.max_batch:
                i = next(
                    (
                        k
                        for k, job in enumerate(self.jobs)
                        if job.key == first.key
                        and not job.alone
                        and size + len(job.sentences) <= self.max_batch
                    ),
                    None,
                )
                if i is not None:
                    job = self._pop_live(i)
                    if job is not None:
                        batch.append(job)
                        size += len(job.sentences)
                    continue
                left = deadline - time.monotonic()
                if left <= 0 or self.closed:
                    break
                self.cond.wait(left)
            return batch

    def _pop_live(self, i: int) -> Job | None:
        """Remove the i-th job waiting; None (its place freed) if its client has gone."""
        if i >= len(self.jobs):
            return None
        job = self.jobs[i]
        del self.jobs[i]
        if job.future.cancelled():
            self.queued -= len(job.sentences)
            self.stats.dropped += 1
            return None
        return job

    def _decode(self, batch: list[Job]) -> list[tuple]:
        """(job, result, error) per job of ``batch``. A batch of several jobs that fails
        is decoded again job by job, so that a job's error fails that job alone, not the
        others that happened to share its batch."""
        try:
            results = self.run(batch)
            if len(results) != len(batch):
                raise RuntimeError(f"{len(results)} results for a batch of {len(batch)} jobs")
            return [(job, results[k], None) for k, job in enumerate(batch)]
        except BaseException as e:  # the request fails, the worker goes on
            if len(batch) == 1:
                return [(batch[0], None, e)]
        return [out for job in batch for out in self._decode([job])]

    def _work(self) -> None:
        while True:
            batch = self._take()
            if batch is None:
                return
            size = sum(len(j.sentences) for j in batch)
            t0 = time.monotonic()
            outcome = self._decode(batch)
            seconds = time.monotonic() - t0
            with self.cond:
                self.queued -= size
                self.stats.batches += 1
                self.stats.sentences += size
                self.stats.largest = max(self.stats.largest, size)
                self.stats.decode_seconds += seconds
                self.recent.append((size, seconds))
                self.cond.notify_all()
            for job, result, error in outcome:
                try:
                    job.loop.call_soon_threadsafe(_settle, job.future, result, error)
                except RuntimeError:  # the event loop has closed: nobody waits any more
                    pass


def _settle(future: asyncio.Future, result, error) -> None:
    """Set a job's future on its event loop, unless its client has gone."""
    if future.cancelled():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)

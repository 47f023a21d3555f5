"""Requests that arrive together, decoded together: a bounded queue in front of one
decoding engine, drained by ``workers`` threads (one per core: each decodes one batch at a
time, on one thread of its own).

Each HTTP request becomes a :class:`Job` (its sentences, their length in source tokens,
and the options that shape its decoding). How a batch forms (the rule of TensorFlow
Serving's batch threads and Triton's dynamic batcher: a batch forms the moment a worker is
free):

* a free worker takes the oldest job waiting at once, so that no job starves;
* it adds the waiting jobs of the same options, those closest in length to the oldest
  first, up to ``max_batch`` sentences and ``max_tokens`` padded source tokens (the
  longest sentence's tokens x the batch's sentences), so that a batch of long sentences
  cannot blow memory or latency;
* it waits for company (at most ``wait_ms``) only when waiting can pay off: another
  worker is mid-batch (so a job arriving now would wait anyway) and the recent arrivals
  predict another job within the time left. Otherwise it decodes at once: a lone request
  never pays the wait, and jobs gather only while every worker is busy.

Each batch is decoded in one call of the engine (sorted by length there) and each job
gets its own slice of the results. The queue is bounded in sentences (``max_queue``): a
job that would pass the bound is refused at once (:class:`Full`: the server answers 503
with Retry-After), so memory stays bounded under overload and every accepted job is
answered. A job whose client has gone (its future cancelled) before its batch starts is
dropped at once, freeing its place; a worker never stops for a client, and a batch that
fails is decoded again job by job, so that one job's error is its own.
:meth:`Batcher.close` stops taking jobs and lets the workers finish those accepted (a
server's drain on SIGTERM).
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
    tokens: int = 1  # its longest sentence's source tokens (what a batch pads to)
    future: Any = None  # asyncio.Future, set on the event loop's thread
    loop: Any = None
    queued_at: float = 0.0


@dataclasses.dataclass
class Stats:
    """What the workers did: batches run, sentences decoded, jobs dropped (client gone),
    jobs refused (queue full), the largest batch, the seconds spent decoding (summed over
    the workers), and how many batches waited for company."""

    batches: int = 0
    sentences: int = 0
    dropped: int = 0
    refused: int = 0
    largest: int = 0
    decode_seconds: float = 0.0
    waited: int = 0


class Batcher:
    """The queue and its worker threads. ``run(jobs) -> [result per job]`` decodes a
    batch: jobs of one key, whose sentences it decodes in one call (engines.run_jobs); the
    workers call it at once from their threads, so it must be thread-safe.
    ``max_batch``: most sentences in one batch; ``max_tokens``: most padded source tokens
    in one (0: no bound; a job larger than that alone still goes, by itself);
    ``wait_ms``: the most a job waits for company (see the module); ``max_queue``: most
    sentences waiting or being decoded; ``workers``: the decoding threads."""

    def __init__(
        self,
        run: Callable[[list[Job]], list[list]],
        max_batch: int = 64,
        wait_ms: float = 5.0,
        max_queue: int = 1024,
        workers: int = 1,
        max_tokens: int = 0,
    ):
        self.run, self.max_batch, self.wait = run, max(1, max_batch), wait_ms / 1000.0
        self.max_queue, self.max_tokens = max(1, max_queue), max(0, max_tokens)
        self.jobs: collections.deque[Job] = collections.deque()
        self.queued = 0  # sentences waiting or being decoded
        self.busy = 0  # workers decoding a batch
        self.cond = threading.Condition()
        self.closed = False
        self.stats = Stats()
        self.recent = collections.deque(maxlen=32)  # (sentences, seconds) of the last batches
        self.arrivals = collections.deque(maxlen=16)  # when the last jobs were queued
        self.threads = [
            threading.Thread(target=self._work, name=f"batcher-{k}", daemon=True)
            for k in range(max(1, workers))
        ]
        for thread in self.threads:
            thread.start()

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
            self.arrivals.append(job.queued_at)
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
        """Take no new job; the workers finish the accepted ones and stop. Returns
        whether they stopped within ``timeout`` seconds."""
        with self.cond:
            self.closed = True
            self.cond.notify_all()
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in self.threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not self.alive

    @property
    def alive(self) -> bool:
        """Whether a worker still runs (a batch still decoding after close's timeout)."""
        return any(thread.is_alive() for thread in self.threads)

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
        """The next batch (see the module): the oldest job waiting and the jobs of its key
        closest to it in length, within ``max_batch`` and ``max_tokens``, after a wait for
        company where it can pay off (an ``alone`` job goes by itself); None once closed
        and empty. Jobs whose client has gone are dropped on the way."""
        with self.cond:
            while True:
                while not self.jobs and not self.closed:
                    self.cond.wait()
                first = self._pop_live(0)
                if first is not None:
                    break
                if self.closed and not self.jobs:
                    return None
            batch = [first]
            if first.alone:
                self.busy += 1
                return batch
            deadline = time.monotonic() + self.wait
            waited = False
            while True:
                self._gather(batch)
                left = deadline - time.monotonic()
                if self._full(batch) or left <= 0 or not self._company_expected(left):
                    break
                waited = True
                self.cond.wait(left)
            self.stats.waited += waited
            self.busy += 1  # under the lock: another worker's wait rule sees it at once
            return batch

    def _full(self, batch: list[Job]) -> bool:
        return sum(len(job.sentences) for job in batch) >= self.max_batch

    def _fits(self, batch: list[Job], job: Job) -> bool:
        """Whether ``job`` joins ``batch`` within ``max_batch`` and ``max_tokens``."""
        sentences = sum(len(j.sentences) for j in batch) + len(job.sentences)
        if sentences > self.max_batch:
            return False
        longest = max(job.tokens, *(j.tokens for j in batch))
        return not self.max_tokens or longest * sentences <= self.max_tokens

    def _gather(self, batch: list[Job]) -> None:
        """Add to ``batch`` the waiting jobs of its key that fit, those closest in length
        to its first job first (the queue's order among equals)."""
        first = batch[0]
        candidates = sorted(
            (abs(job.tokens - first.tokens), k)
            for k, job in enumerate(self.jobs)
            if job.key == first.key and not job.alone
        )
        taken = []
        for _, k in candidates:
            job = self.jobs[k]
            if job.future.cancelled():  # its client has gone: dropped, its place freed
                self.queued -= len(job.sentences)
                self.stats.dropped += 1
                taken.append(k)
            elif self._fits(batch, job):
                batch.append(job)
                taken.append(k)
        for k in sorted(taken, reverse=True):  # from the end: the indices stay valid
            del self.jobs[k]

    def _company_expected(self, left: float) -> bool:
        """Whether waiting ``left`` seconds more can pay off: another worker is
        mid-batch (a job arriving now could not start anyway) and the recent arrivals, at
        their rate over the last jobs, predict at least one more job within ``left``."""
        if self.closed or self.busy == 0 or len(self.arrivals) < 2:
            return False
        now = time.monotonic()
        span = now - self.arrivals[0]
        if span <= 0:
            return True
        rate = (len(self.arrivals) - 1) / span  # jobs per second, up to now
        return rate * left >= 1.0

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
                self.busy -= 1
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

"""The server's batcher (transformer_tf2/serving/batcher.py) alone, with a fake ``run``: which
jobs share a batch, the queue's bound, a client that goes, a failing job, the drain. No
model: each test takes well under a second."""

import asyncio
import threading

import pytest

from transformer_tf2.serving.batcher import Batcher, Closed, Full, Job

TIMEOUT = 10  # seconds any wait of these tests may take


class FakeRun:
    """The batcher's ``run``: records each batch (the sentences of each of its jobs) and
    answers each sentence with itself upper-cased. ``gate``: while it is not set, the first
    batch holding the sentence "gate" waits for it, so that a test can queue jobs behind
    a batch being decoded. A sentence "bad" makes a batch fail."""

    def __init__(self):
        self.batches: list[list[list[str]]] = []
        self.gate = threading.Event()
        self.started = threading.Event()

    def __call__(self, jobs: list[Job]) -> list[list[str]]:
        self.batches.append([list(job.sentences) for job in jobs])
        if any("gate" in job.sentences for job in jobs):
            self.started.set()
            assert self.gate.wait(TIMEOUT)
        if any("bad" in job.sentences for job in jobs):
            raise ValueError("a bad sentence")
        return [[s.upper() for s in job.sentences] for job in jobs]


def run_async(coro):
    return asyncio.run(asyncio.wait_for(coro, TIMEOUT))


async def blocked(batcher: Batcher, fake: FakeRun) -> asyncio.Future:
    """Submit the gate job and wait until the worker decodes it (and waits on the gate)."""
    future = batcher.submit(Job(["gate"], key=("gate",)))
    loop = asyncio.get_running_loop()
    assert await loop.run_in_executor(None, fake.started.wait, TIMEOUT)
    return future


def test_jobs_arriving_together_share_a_batch_of_their_key_up_to_max_batch():
    fake = FakeRun()
    batcher = Batcher(fake, max_batch=4, wait_ms=20, max_queue=100)

    async def main():
        gate = await blocked(batcher, fake)
        # queued while the worker is busy, so that all of them wait when it looks next
        jobs = {
            "a1": Job(["a1"], key=("a",)),
            "b1": Job(["b1"], key=("b",)),
            "a2": Job(["a2", "a3"], key=("a",)),
            "alone": Job(["s1", "s2"], key=("a",), alone=True),
            "a4": Job(["a4"], key=("a",)),
            "a5": Job(["a5"], key=("a",)),  # would make 5 sentences: the next batch
            "a6": Job(["a6"], key=("a",)),
        }
        futures = {name: batcher.submit(job) for name, job in jobs.items()}
        fake.gate.set()
        results = {name: await f for name, f in futures.items()}
        await gate
        return results

    results = run_async(main())
    assert batcher.close(TIMEOUT)
    # every job its own results, in its own order
    assert results == {
        "a1": ["A1"],
        "b1": ["B1"],
        "a2": ["A2", "A3"],
        "alone": ["S1", "S2"],
        "a4": ["A4"],
        "a5": ["A5"],
        "a6": ["A6"],
    }
    assert fake.batches == [
        [["gate"]],
        [["a1"], ["a2", "a3"], ["a4"]],  # key a up to 4 sentences; b and the alone job skipped
        [["b1"]],  # another key: a batch of its own
        [["s1", "s2"]],  # the alone job, alone although key a's jobs wait
        [["a5"], ["a6"]],
    ]
    stats = batcher.stats
    assert (stats.batches, stats.sentences, stats.largest) == (5, 10, 4)
    assert batcher.pending == 0


def test_a_free_worker_decodes_a_lone_job_at_once_without_waiting_out_wait_ms():
    """No other worker is busy: waiting could not pay off, so a job of a quiet server is
    decoded at once, and so is the one after it (a wait of 20 s would time the test out)."""
    fake = FakeRun()
    batcher = Batcher(fake, max_batch=8, wait_ms=20_000, max_queue=100, workers=2)

    async def main():
        assert await batcher.submit(Job(["x"], key=("a",))) == ["X"]
        assert await batcher.submit(Job(["y"], key=("a",))) == ["Y"]

    run_async(main())
    assert batcher.close(TIMEOUT)
    assert fake.batches == [[["x"]], [["y"]]] and batcher.stats.waited == 0


def test_while_another_worker_is_busy_a_steady_stream_of_jobs_waits_for_company():
    """Worker 1 is mid-batch; jobs arrive every 10 ms: worker 2 takes the first and, since
    the arrivals predict more within its wait, gathers the next ones (at most wait_ms)."""
    fake = FakeRun()
    batcher = Batcher(fake, max_batch=4, wait_ms=2_000, max_queue=100, workers=2)

    async def main():
        gate = await blocked(batcher, fake)
        futures = []
        for k in range(4):
            futures.append(batcher.submit(Job([f"s{k}"], key=("a",))))
            await asyncio.sleep(0.01)
        results = [await f for f in futures]
        fake.gate.set()
        await gate
        return results

    assert run_async(main()) == [["S0"], ["S1"], ["S2"], ["S3"]]
    assert batcher.close(TIMEOUT)
    # the batch filled to max_batch: it did not wait out the 2 s
    assert fake.batches == [[["gate"]], [["s0"], ["s1"], ["s2"], ["s3"]]]
    assert batcher.stats.waited == 1


def test_workers_decode_batches_at_the_same_time():
    """Two workers: while one is held inside ``run``, the other decodes the next job."""
    fake = FakeRun()
    batcher = Batcher(fake, max_batch=8, wait_ms=0, max_queue=100, workers=2)

    async def main():
        gate = await blocked(batcher, fake)
        assert await batcher.submit(Job(["free"], key=("a",))) == ["FREE"]
        assert not gate.done()  # the first worker still holds its batch
        fake.gate.set()
        return await gate

    assert run_async(main()) == ["GATE"]
    assert batcher.close(TIMEOUT) and not batcher.alive
    assert len(batcher.threads) == 2


def test_a_batch_starts_from_the_oldest_job_adds_the_closest_lengths_and_keeps_max_tokens():
    """Jobs waiting behind a busy worker: the next batch starts from the oldest, adds those
    closest to it in source tokens, and stays within max_tokens padded tokens (the longest
    sentence's tokens x the sentences); a job alone over max_tokens still goes, alone."""
    fake = FakeRun()
    batcher = Batcher(fake, max_batch=3, wait_ms=0, max_queue=100, max_tokens=60)

    async def main():
        gate = await blocked(batcher, fake)
        lengths = {"t5": 5, "t40": 40, "t6": 6, "t9": 9, "t20": 20, "t18": 18, "t99": 99}
        futures = [batcher.submit(Job([n], key=("a",), tokens=t)) for n, t in lengths.items()]
        fake.gate.set()
        await gate
        return [await f for f in futures]

    assert run_async(main()) == [["T5"], ["T40"], ["T6"], ["T9"], ["T20"], ["T18"], ["T99"]]
    assert batcher.close(TIMEOUT)
    assert fake.batches[1:] == [
        [["t5"], ["t6"], ["t9"]],  # the oldest and its two closest: 9 x 3 <= 60
        [["t40"]],  # the oldest left; 40 x 2 > 60: alone
        [["t20"], ["t18"]],  # 20 x 2 = 40, and 20 x 3 > 60
        [["t99"]],  # over max_tokens alone: by itself
    ]


def test_past_max_queue_a_job_is_refused_at_once_with_a_retry_after():
    fake = FakeRun()
    batcher = Batcher(fake, max_batch=8, wait_ms=0, max_queue=4)

    async def main():
        gate = await blocked(batcher, fake)  # 1 sentence being decoded counts
        taken = batcher.submit(Job(["a", "b", "c"], key=("a",)))  # 4 in all: taken
        assert batcher.pending == 4
        with pytest.raises(Full) as e:
            batcher.submit(Job(["d"], key=("a",)))
        assert e.value.retry_after >= 1 and isinstance(e.value.retry_after, int)
        with pytest.raises(Full):  # a job larger than the whole queue, likewise
            batcher.submit(Job(list("abcde"), key=("b",)))
        assert batcher.pending == 4 and batcher.stats.refused == 2
        fake.gate.set()
        assert await taken == ["A", "B", "C"]
        await gate
        assert batcher.pending == 0
        # room again once the queue has drained
        assert await batcher.submit(Job(["a", "b", "c", "d"], key=("a",))) == list("ABCD")

    run_async(main())
    assert batcher.close(TIMEOUT)
    assert ["d"] not in [job for batch in fake.batches for job in batch]


def test_a_cancelled_job_is_dropped_and_its_place_freed_at_once():
    fake = FakeRun()
    batcher = Batcher(fake, max_batch=8, wait_ms=0, max_queue=4)

    async def main():
        gate = await blocked(batcher, fake)
        gone = batcher.submit(Job(["gone1", "gone2", "gone3"], key=("a",)))
        assert batcher.pending == 4
        with pytest.raises(Full):
            batcher.submit(Job(["x"], key=("a",)))
        gone.cancel()  # its client went away while it waited
        await asyncio.sleep(0)  # the future's callbacks run
        assert batcher.pending == 1 and batcher.stats.dropped == 1
        kept = batcher.submit(Job(["kept1", "kept2", "kept3"], key=("a",)))  # fits now
        fake.gate.set()
        await gate
        assert await kept == ["KEPT1", "KEPT2", "KEPT3"]

    run_async(main())
    assert batcher.close(TIMEOUT)
    decoded = [s for batch in fake.batches for job in batch for s in job]
    assert "gone1" not in decoded and "kept1" in decoded
    assert batcher.pending == 0 and batcher.stats.dropped == 1


def test_a_job_cancelled_while_decoded_holds_its_place_until_its_batch_ends():
    """The worker cannot stop a batch: the place is freed when it ends, and the worker goes
    on with the next job."""
    fake = FakeRun()
    batcher = Batcher(fake, max_batch=8, wait_ms=0, max_queue=4)

    async def main():
        gate = await blocked(batcher, fake)
        gate.cancel()
        await asyncio.sleep(0)
        assert batcher.pending == 1 and batcher.stats.dropped == 0
        fake.gate.set()
        assert await batcher.submit(Job(["next"], key=("a",))) == ["NEXT"]
        assert batcher.pending == 0

    run_async(main())
    assert batcher.close(TIMEOUT)


def test_a_failing_job_fails_alone_not_the_jobs_sharing_its_batch():
    fake = FakeRun()
    batcher = Batcher(fake, max_batch=8, wait_ms=0, max_queue=100)

    async def main():
        gate = await blocked(batcher, fake)
        good = batcher.submit(Job(["good"], key=("a",)))
        bad = batcher.submit(Job(["bad"], key=("a",)))
        fake.gate.set()
        await gate
        assert await good == ["GOOD"]
        with pytest.raises(ValueError, match="a bad sentence"):
            await bad
        # the worker goes on
        assert await batcher.submit(Job(["after"], key=("a",))) == ["AFTER"]

    run_async(main())
    assert batcher.close(TIMEOUT)
    assert fake.batches[1:4] == [[["good"], ["bad"]], [["good"]], [["bad"]]]
    assert batcher.pending == 0


def test_close_finishes_the_accepted_jobs_and_then_refuses_new_ones():
    fake = FakeRun()
    batcher = Batcher(fake, max_batch=2, wait_ms=0, max_queue=100)

    async def main():
        gate = await blocked(batcher, fake)
        waiting = [batcher.submit(Job([f"s{i}"], key=("a",))) for i in range(5)]
        loop = asyncio.get_running_loop()
        closing = loop.run_in_executor(None, batcher.close, TIMEOUT)
        await asyncio.sleep(0.05)
        with pytest.raises(Closed):
            batcher.submit(Job(["late"], key=("a",)))
        fake.gate.set()
        assert await closing is True  # the worker stopped within the time
        await gate
        return [await f for f in waiting]

    assert run_async(main()) == [["S0"], ["S1"], ["S2"], ["S3"], ["S4"]]
    assert not batcher.alive and batcher.pending == 0
    assert [s for batch in fake.batches for job in batch for s in job] == [
        "gate",
        *(f"s{i}" for i in range(5)),
    ]


def test_close_returns_false_when_a_batch_outlasts_its_timeout():
    fake = FakeRun()
    batcher = Batcher(fake, max_batch=2, wait_ms=0, max_queue=100)

    async def main():
        gate = await blocked(batcher, fake)
        loop = asyncio.get_running_loop()
        assert await loop.run_in_executor(None, batcher.close, 0.1) is False
        fake.gate.set()
        await gate

    run_async(main())
    assert batcher.close(TIMEOUT) and not batcher.alive

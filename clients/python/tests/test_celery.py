"""lease_fence.celery.FencedTask with a real Celery worker.

One embedded worker (celery.contrib.testing.worker.start_worker, the thread
pool, four threads) for the module, its Redis broker on a redis-server of
the module's own (the lease Redis is the harness's: the unknown test pauses
it); the outcomes come from the worker's signals (no result backend). Each test pins one rule of the integration: a task
stalled inside its transaction past its lease is ended by the server and
the same task, run again, resumes from its checkpoint and its writes stand;
the same task sent twice at once has one effect (busy: skipped); busy with
on_busy="retry" is retried by Celery and runs once the lease is free; an
unknown outcome is retried, never run unfenced; Redis down fails the task
before its body; a checkpoint of a holder fenced by a successor fails the
task with StaleGeneration, not retried.
"""

import logging
import threading

import pytest

celery = pytest.importorskip("celery")

from celery import Celery                                    # noqa: E402
from celery.contrib.testing.worker import start_worker      # noqa: E402
from celery.signals import task_failure, task_postrun, task_retry         # noqa: E402

from lease_fence import (LeaseBusy, LeaseUnavailable, LeaseUnknown, StaleGeneration,   # noqa: E402
                         acquire, fenced, release)
from lease_fence.celery import FencedTask                   # noqa: E402
from lf_testlib import (NOREDIS_USER, connect, freeze_between_transactions,  # noqa: E402
                        lease_key, new_row, next_generation, private_redis, read_row,
                        redis, stop_private_redis, wait_for_redis, wait_until,
                        warm_connection)

app = Celery("lf_celery_test")
app.conf.update(task_serializer="json", result_serializer="json", accept_content=["json"],
                worker_hijack_root_logger=False, broker_connection_retry_on_startup=False)

GATES = {}          # name -> threading.Event the test sets to let a body go on
ARRIVED = {}        # name -> threading.Event a body sets when it is there
RUNS = []           # what the bodies saw: (task name, resume_from, generation, retries)
FAILURES = []       # (task id, exception) of task_failure
RETRIES = []        # (task id, exception retried on) of task_retry
DONE = {}           # task id -> (state, return value), when it ended for good


def gate(name):
    return GATES.setdefault(name, threading.Event())


def arrived(name):
    return ARRIVED.setdefault(name, threading.Event())


@task_failure.connect
def _failed(sender=None, task_id=None, exception=None, **kw):
    FAILURES.append((task_id, exception))


@task_postrun.connect
def _ended(sender=None, task_id=None, retval=None, state=None, **kw):
    if state in ("SUCCESS", "FAILURE"):
        DONE[task_id] = (state, retval)


@task_retry.connect
def _retried(sender=None, request=None, reason=None, **kw):
    # reason: the Retry raised, whose exc is the exception retried on
    RETRIES.append((request.id, getattr(reason, "exc", reason)))


def record(job, name):
    from celery import current_task
    RUNS.append((name, job.resume_from, job.generation, current_task.request.retries))


# ----------------------------------------------------------------- tasks

@app.task(base=FencedTask, connect=connect, ttl_ms=1000)
def story(job, a, b):
    """Run 1 writes a, checkpoints, writes b and stalls; run 2 (resuming)
    writes b and checkpoints."""
    record(job, "story")
    up = "UPDATE account SET owner = %s WHERE id = %s"
    if job.resume_from is None:
        job.conn.execute(up, ("run 1", a))
        job.checkpoint({"done": ["a"]})
        job.conn.execute(up, ("run 1", b))
        arrived("story").set()
        gate("story").wait()                    # stalled, idle in its transaction
        job.conn.execute(up, ("run 1 late", b))
        job.checkpoint({"done": ["a", "b", "late"]})
        return "run 1"
    job.conn.execute(up, ("run 2", b))
    job.checkpoint({"done": ["a", "b"]})
    return "run 2"


@app.task(base=FencedTask, connect=connect, ttl_ms=10000)
def once(job, row):
    """One effect per run: balance + 1; waits at the gate holding the lease."""
    record(job, "once")
    job.conn.execute("UPDATE account SET balance = balance + 1 WHERE id = %s", (row,))
    arrived("once").set()
    gate("once").wait()
    return job.generation


@app.task(base=FencedTask, connect=connect, ttl_ms=10000, on_busy="retry",
          default_retry_delay=0.2, max_retries=100)
def patient(job, row):
    record(job, "patient")
    job.conn.execute("UPDATE account SET balance = balance + 1 WHERE id = %s", (row,))
    return job.generation


_paused = []


def pausing_connect():
    """The first call pauses the lease Redis after warming its connection
    (the acquire then times out: unknown); later calls wait the pause out."""
    if not _paused:
        conn = warm_connection()
        _paused.append(True)
        redis("CLIENT", "PAUSE", 3000, "ALL")
        return conn
    wait_for_redis()
    return connect()


@app.task(base=FencedTask, connect=pausing_connect, ttl_ms=1000, max_retries=3)
def unsure(job, row):
    record(job, "unsure")
    job.conn.execute("UPDATE account SET balance = balance + 1 WHERE id = %s", (row,))
    return job.generation


@app.task(base=FencedTask, connect=lambda: connect(user=NOREDIS_USER), ttl_ms=10000)
def no_redis(job, row):
    record(job, "no_redis")
    job.conn.execute("UPDATE account SET balance = balance + 1 WHERE id = %s", (row,))


@app.task(base=FencedTask, connect=connect, ttl_ms=10000, on_busy="retry",
          default_retry_delay=0.2)
def overtaken(job, a, b):
    """Writes a, checkpoints (a successor fences meanwhile: the next
    transaction is refused); b is never written."""
    record(job, "overtaken")
    job.conn.execute("UPDATE account SET owner = 'before' WHERE id = %s", (a,))
    job.checkpoint({"step": 1})
    job.conn.execute("UPDATE account SET owner = 'after' WHERE id = %s", (b,))


# ---------------------------------------------------------------- worker

@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    proc, sock = private_redis(str(tmp_path_factory.mktemp("celery")))
    # no result backend: the outcomes come from the worker's signals
    app.conf.update(broker_url=f"redis+socket://{sock}?virtual_host=0")
    try:
        with start_worker(app, pool="threads", concurrency=4, perform_ping_check=False,
                          loglevel="WARNING", shutdown_timeout=30):
            yield
    finally:
        for event in GATES.values():
            event.set()
        stop_private_redis(proc)


@pytest.fixture
def check():
    conn = connect()
    yield conn
    conn.close()


def failure_of(result):
    return [e for tid, e in FAILURES if tid == result.id]


def last_checkpoint(conn, res):
    return conn.execute("SELECT state, generation FROM lease_fence.last_checkpoint(%s)",
                        (res,)).fetchone()


def outcome(result):
    """(state, return value) once the task ended for good (not a retry)."""
    wait_until(f"task {result.id} done", lambda: result.id in DONE, 60)
    return DONE[result.id]


# ----------------------------------------------------------------- tests

def test_stalled_task_is_ended_and_the_rerun_resumes(worker, check):
    """run 1 checkpoints, writes, stalls past its lease inside its open
    transaction; once the lease key is gone from Redis, the same task sent
    again resumes from run 1's checkpoint and its writes stand; run 1, let
    go, fails (its session was ended) and moved nothing."""
    a, b = new_row(check), new_row(check)
    res = story.lease_resource((a, b), {})
    assert res.startswith(f"celery:{story.name}:")
    r1 = story.delay(a, b)
    assert arrived("story").wait(30)
    wait_until("run 1's lease key expired", lambda: redis("EXISTS", lease_key(res)) == "0")
    r2 = story.delay(a, b)
    assert outcome(r2) == ("SUCCESS", "run 2")
    gate("story").set()
    assert outcome(r1)[0] == "FAILURE"
    runs = [r for r in RUNS if r[0] == "story"]
    (_, first_from, g1, _), (_, second_from, g2, _) = runs
    assert (first_from, second_from) == (None, {"done": ["a"]})
    assert g2 > g1
    assert read_row(check, a) == ("run 1", 100, g1)
    assert read_row(check, b) == ("run 2", 100, g2)
    assert last_checkpoint(check, res) == ({"done": ["a", "b"]}, g2)


def test_same_task_twice_at_once_has_one_effect(worker, check, caplog):
    """two deliveries of the same task at once: one runs, the other finds
    the lease busy and ends without error, skipped (on_busy's default),
    with a log line; the row was incremented once."""
    row = new_row(check)
    caplog.set_level(logging.INFO, logger="lease_fence.celery")
    r1 = once.delay(row)
    assert arrived("once").wait(30)
    r2 = once.delay(row)
    assert outcome(r2) == ("SUCCESS", None)
    assert any("skipped" in m for m in caplog.messages)
    gate("once").set()
    state, g = outcome(r1)
    assert state == "SUCCESS"
    assert read_row(check, row) == ("nobody", 101, g)
    assert len([r for r in RUNS if r[0] == "once"]) == 1


def test_busy_with_retry_runs_once_the_lease_is_free(worker, check):
    """on_busy="retry": while another holder has the lease the task is
    retried by Celery (task_retry, LeaseBusy); released, the next try
    runs, once."""
    row = new_row(check)
    res = patient.lease_resource((row,), {})
    holder_conn = connect()
    try:
        holder = acquire(holder_conn, res, ttl_ms=30000)
        r = patient.delay(row)
        wait_until("a retry", lambda: any(tid == r.id for tid, _ in RETRIES))
        assert not [x for x in RUNS if x[0] == "patient"]
        assert release(holder_conn, holder) == "released"
    finally:
        holder_conn.close()
    state, g = outcome(r)
    assert state == "SUCCESS"
    runs = [x for x in RUNS if x[0] == "patient"]
    assert len(runs) == 1 and runs[0][3] >= 1          # ran on a retry
    assert read_row(check, row) == ("nobody", 101, g)
    assert isinstance([reason for tid, reason in RETRIES if tid == r.id][0], LeaseBusy)


def test_unknown_is_retried_never_run_unfenced(worker, check):
    """the acquire's outcome is unknown (the lease Redis paused past the
    command timeout): the body does not run, Celery retries the task, and
    the retry runs it under a lease, once."""
    row = new_row(check)
    r = unsure.delay(row)
    state, g = outcome(r)
    assert state == "SUCCESS"
    reasons = [reason for tid, reason in RETRIES if tid == r.id]
    assert reasons and isinstance(reasons[0], LeaseUnknown)
    runs = [x for x in RUNS if x[0] == "unsure"]
    assert len(runs) == 1 and runs[0][3] == 1
    assert read_row(check, row) == ("nobody", 101, g)


def test_redis_down_fails_the_task_before_its_body(worker, check):
    """Redis unreachable: LeaseUnavailable fails the task (FAILURE), not
    retried; the body never ran."""
    row = new_row(check)
    r = no_redis.delay(row)
    assert outcome(r)[0] == "FAILURE"
    (exc,) = failure_of(r)
    assert isinstance(exc, LeaseUnavailable)
    assert not [tid for tid, _ in RETRIES if tid == r.id]
    assert not [x for x in RUNS if x[0] == "no_redis"]
    assert read_row(check, row) == ("nobody", 100, 0)


def test_checkpoint_of_an_overtaken_holder_fails_the_task(worker, check, monkeypatch):
    """the task freezes between a checkpoint's COMMIT and its next fenced
    transaction while a successor fences the resource with a newer
    generation: its checkpoint raises StaleGeneration (LF001), the task
    fails with it (not retried, even with on_busy="retry"), what it would
    have written next is not written; the checkpoint it committed before
    the successor's fence stays."""
    a, b = new_row(check), new_row(check)
    res = overtaken.lease_resource((a, b), {})
    other = connect()
    newer = []

    def successor():
        g = next_generation(other)
        with fenced(other, g, res):
            newer.append(g)
    freeze_between_transactions(monkeypatch, res, successor)
    try:
        r = overtaken.delay(a, b)
        assert outcome(r)[0] == "FAILURE"
    finally:
        other.close()
    (exc,) = failure_of(r)
    assert isinstance(exc, StaleGeneration) and exc.resource == res
    assert not [tid for tid, _ in RETRIES if tid == r.id]
    (_, _, g, _), = [x for x in RUNS if x[0] == "overtaken"]
    assert newer[0] > g
    assert read_row(check, a) == ("before", 100, g)
    assert read_row(check, b) == ("nobody", 100, 0)
    assert last_checkpoint(check, res) == ({"step": 1}, g)

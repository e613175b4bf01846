"""The RQ jobs of test_rq, imported by the test and by its worker processes.

A job's body talks to the test through files in $LF_RQ_CONTROL: it
appends what it saw to ``runs`` (one JSON line per run), creates
``<name>-arrived`` when it is where the test waits for it, and waits for
``<name>-go`` that the test creates to let it go on.
"""

import json
import os

from rq import get_current_job

from lease_fence import ResumableJob, fenced as fenced_tx
from lease_fence.rq import fenced
from lf_testlib import (NOREDIS_USER, connect, next_generation, redis, wait_for_redis,
                        wait_until, warm_connection)


def control(name):
    return os.path.join(os.environ["LF_RQ_CONTROL"], name)


def record(job, name):
    current = get_current_job()
    with open(control("runs"), "a") as f:
        f.write(json.dumps({"name": name, "resume_from": job.resume_from,
                            "generation": job.generation,
                            "retries_left": current.retries_left if current else None}) + "\n")


def arrive_and_wait(name):
    open(control(f"{name}-arrived"), "w").close()
    wait_until(f"{name}-go", lambda: os.path.exists(control(f"{name}-go")), 600)


UP = "UPDATE account SET owner = %s WHERE id = %s"
INCR = "UPDATE account SET balance = balance + 1 WHERE id = %s"


@fenced(connect=connect, ttl_ms=1000)
def story(job, a, b):
    record(job, "story")
    if job.resume_from is None:
        job.conn.execute(UP, ("run 1", a))
        job.checkpoint({"done": ["a"]})
        job.conn.execute(UP, ("run 1", b))
        arrive_and_wait("story")                 # stalled, idle in its transaction
        job.conn.execute(UP, ("run 1 late", b))
        job.checkpoint({"done": ["a", "b", "late"]})
        return "run 1"
    job.conn.execute(UP, ("run 2", b))
    job.checkpoint({"done": ["a", "b"]})
    return "run 2"


@fenced(connect=connect, ttl_ms=10000)
def once(job, row):
    record(job, "once")
    job.conn.execute(INCR, (row,))
    arrive_and_wait("once")
    return job.generation


@fenced(connect=connect, ttl_ms=10000, on_busy="retry", retry_interval=1)
def patient(job, row):
    record(job, "patient")
    job.conn.execute(INCR, (row,))
    return job.generation


def pausing_connect():
    """The first call pauses the lease Redis after warming its connection
    (the acquire then times out: unknown); later calls wait the pause out."""
    if not os.path.exists(control("paused")):
        open(control("paused"), "w").close()
        conn = warm_connection()
        redis("CLIENT", "PAUSE", 3000, "ALL")
        return conn
    wait_for_redis()
    return connect()


@fenced(connect=pausing_connect, ttl_ms=1000)
def unsure(job, row):
    record(job, "unsure")
    job.conn.execute(INCR, (row,))
    return job.generation


@fenced(connect=lambda: connect(user=NOREDIS_USER), ttl_ms=10000)
def no_redis(job, row):
    record(job, "no_redis")
    job.conn.execute(INCR, (row,))


@fenced(connect=connect, ttl_ms=10000, on_busy="retry")
def overtaken(job, a, b):
    """Writes a and checkpoints; the job freezes between the checkpoint's
    COMMIT and its next fence (ResumableJob._open wrapped, in this work
    horse only) while a successor fences the resource: the checkpoint
    raises StaleGeneration; b is never written."""
    record(job, "overtaken")
    opened = ResumableJob._open
    other = connect()

    def frozen(self, read_checkpoint):
        if not read_checkpoint:
            g = next_generation(other)
            with fenced_tx(other, g, job.resource):
                pass
            with open(control("overtaken-newer"), "w") as f:
                f.write(str(g))
        opened(self, read_checkpoint)
    ResumableJob._open = frozen
    try:
        job.conn.execute(UP, ("before", a))
        job.checkpoint({"step": 1})
        job.conn.execute(UP, ("after", b))
    finally:
        ResumableJob._open = opened
        other.close()

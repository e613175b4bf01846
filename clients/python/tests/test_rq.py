"""lease_fence.rq.fenced with real RQ workers.

Two ``rq worker --with-scheduler`` processes (forking a work horse per job)
for the module, on a redis-server of the module's own (the lease Redis is
the harness's: the unknown test pauses it); the jobs are rq_jobs.py's.
Each test pins one rule, as test_celery: a job stalled inside its
transaction past its lease is ended by the server and the same job, run
again, resumes from its checkpoint and its writes stand; the same job
twice at once has one effect (busy: skipped); busy with on_busy="retry" is
retried by RQ and runs once the lease is free; an unknown outcome is
retried, never run unfenced; Redis down fails the job before its body; a
checkpoint of a holder a successor fenced fails the job with
StaleGeneration, not retried.
"""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("rq")

import lease_fence                                           # noqa: E402
from lease_fence import acquire, release                     # noqa: E402
from lf_testlib import (connect, lease_key, new_row, private_redis, read_row,  # noqa: E402
                        redis, stop_private_redis, wait_until)

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def rq_env(tmp_path_factory):
    from redis import Redis
    from rq import Queue
    top = tmp_path_factory.mktemp("rq")
    control = top / "control"
    control.mkdir()
    os.environ["LF_RQ_CONTROL"] = str(control)
    proc, sock = private_redis(str(top))
    url = f"unix://{sock}?db=0"
    # the workers import rq_jobs (beside this file) and the lease_fence
    # under test (the installed one, or the checkout's copy conftest made)
    path = os.pathsep.join([HERE, os.path.dirname(os.path.dirname(lease_fence.__file__))])
    env = dict(os.environ, PYTHONPATH=path)
    workers, logs = [], []
    try:
        for n in (1, 2):
            logs.append(open(top / f"worker{n}.log", "w"))
            workers.append(subprocess.Popen(
                [sys.executable, "-c", "from rq.cli import main; main()", "worker",
                 "--url", url, "--with-scheduler", "--name", f"lf-test-{n}-{os.getpid()}"],
                env=env, cwd=str(top), stdout=logs[-1], stderr=subprocess.STDOUT))
        conn = Redis(unix_socket_path=sock)
        wait_until("two RQ workers", lambda: len(conn.smembers("rq:workers")) == 2, 120)
        yield {"queue": Queue(connection=conn), "control": control, "logs": top}
    finally:
        for w in workers:
            w.terminate()
        for w in workers:
            try:
                w.wait(timeout=30)
            except subprocess.TimeoutExpired:
                w.kill()
                w.wait()
        for log in logs:
            log.close()
        for path in control.glob("*-arrived"):       # nothing left waiting
            (control / path.name.replace("-arrived", "-go")).touch()
        stop_private_redis(proc)


@pytest.fixture
def check():
    conn = connect()
    yield conn
    conn.close()


def runs(env, name):
    path = env["control"] / "runs"
    if not path.exists():
        return []
    return [r for r in map(json.loads, path.read_text().splitlines()) if r["name"] == name]


def ended(job):
    """The job's status once it finished or failed for good."""
    wait_until(f"job {job.id} ended",
               lambda: job.get_status(refresh=True) in ("finished", "failed"), 120)
    job.refresh()                                   # retries_left & co, as stored
    return job.get_status()


def worker_logs(env):
    return "".join(p.read_text() for p in env["logs"].glob("worker*.log"))


def last_checkpoint(conn, res):
    return conn.execute("SELECT state, generation FROM lease_fence.last_checkpoint(%s)",
                        (res,)).fetchone()


def resource_of(func_name, *args):
    from lease_fence._integrations import default_resource
    return default_resource("rq", func_name, [list(args), {}])


def test_stalled_job_is_ended_and_the_rerun_resumes(rq_env, check):
    """run 1 checkpoints, writes, stalls past its lease inside its open
    transaction; once the lease key is gone from Redis, the same job
    enqueued again resumes from run 1's checkpoint and its writes stand;
    run 1, let go, fails (its session was ended) and moved nothing."""
    import rq_jobs
    q, control = rq_env["queue"], rq_env["control"]
    a, b = new_row(check), new_row(check)
    res = resource_of("rq_jobs.story", a, b)
    r1 = q.enqueue(rq_jobs.story, a, b)
    wait_until("run 1 stalled", lambda: (control / "story-arrived").exists(), 60)
    wait_until("run 1's lease key expired", lambda: redis("EXISTS", lease_key(res)) == "0")
    r2 = q.enqueue(rq_jobs.story, a, b)
    assert ended(r2) == "finished" and r2.return_value() == "run 2"
    (control / "story-go").touch()
    assert ended(r1) == "failed"
    first, second = runs(rq_env, "story")
    assert (first["resume_from"], second["resume_from"]) == (None, {"done": ["a"]})
    assert second["generation"] > first["generation"]
    assert read_row(check, a) == ("run 1", 100, first["generation"])
    assert read_row(check, b) == ("run 2", 100, second["generation"])
    assert last_checkpoint(check, res) == ({"done": ["a", "b"]}, second["generation"])


def test_same_job_twice_at_once_has_one_effect(rq_env, check):
    """the same job on both workers at once: one runs, the other finds the
    lease busy and finishes without running (skipped, the default); the
    row was incremented once."""
    import rq_jobs
    q, control = rq_env["queue"], rq_env["control"]
    row = new_row(check)
    r1 = q.enqueue(rq_jobs.once, row)
    wait_until("run 1 holds the lease", lambda: (control / "once-arrived").exists(), 60)
    r2 = q.enqueue(rq_jobs.once, row)
    assert ended(r2) == "finished" and r2.return_value() is None
    (control / "once-go").touch()
    assert ended(r1) == "finished"
    assert read_row(check, row) == ("nobody", 101, r1.return_value())
    assert len(runs(rq_env, "once")) == 1


def test_busy_with_retry_runs_once_the_lease_is_free(rq_env, check):
    """on_busy="retry": while another holder has the lease, RQ retries the
    job (its retries_left goes down); released, the next try runs, once."""
    import rq_jobs
    q = rq_env["queue"]
    row = new_row(check)
    res = resource_of("rq_jobs.patient", row)
    holder_conn = connect()
    try:
        holder = acquire(holder_conn, res, ttl_ms=30000)
        r = q.enqueue(rq_jobs.patient, row)

        def retried():
            r.refresh()
            return r.retries_left is not None and r.retries_left < 3
        wait_until("a retry", retried, 60)
        assert not runs(rq_env, "patient")
        assert release(holder_conn, holder) == "released"
    finally:
        holder_conn.close()
    assert ended(r) == "finished"
    (run,) = runs(rq_env, "patient")
    assert run["retries_left"] < 3                      # ran on a retry
    assert read_row(check, row) == ("nobody", 101, r.return_value())


def test_unknown_is_retried_never_run_unfenced(rq_env, check):
    """the acquire's outcome is unknown (the lease Redis paused past the
    command timeout): the body does not run, the job fails with
    LeaseUnknown and RQ retries it (after the lease's TTL); the retry runs
    it under a lease, once."""
    import rq_jobs
    q = rq_env["queue"]
    row = new_row(check)
    r = q.enqueue(rq_jobs.unsure, row)
    assert ended(r) == "finished"
    (run,) = runs(rq_env, "unsure")
    assert run["retries_left"] == 2                     # the first retry of 3
    assert "LeaseUnknown" in worker_logs(rq_env)
    assert read_row(check, row) == ("nobody", 101, r.return_value())


def test_redis_down_fails_the_job_before_its_body(rq_env, check):
    """Redis unreachable: LeaseUnavailable fails the job, not retried; the
    body never ran."""
    import rq_jobs
    q = rq_env["queue"]
    row = new_row(check)
    r = q.enqueue(rq_jobs.no_redis, row)
    assert ended(r) == "failed"
    assert "LeaseUnavailable" in r.latest_result().exc_string
    assert r.retries_left is None
    assert not runs(rq_env, "no_redis")
    assert read_row(check, row) == ("nobody", 100, 0)


def test_checkpoint_of_an_overtaken_holder_fails_the_job(rq_env, check):
    """the job freezes between a checkpoint's COMMIT and its next fence
    while a successor fences the resource: the checkpoint raises
    StaleGeneration (LF001), the job fails with it, not retried (even with
    on_busy="retry"); what it would have written next is not written; the
    checkpoint it committed before the successor's fence stays."""
    import rq_jobs
    q, control = rq_env["queue"], rq_env["control"]
    a, b = new_row(check), new_row(check)
    res = resource_of("rq_jobs.overtaken", a, b)
    r = q.enqueue(rq_jobs.overtaken, a, b)
    assert ended(r) == "failed"
    assert "StaleGeneration" in r.latest_result().exc_string
    assert r.retries_left is None
    (run,) = runs(rq_env, "overtaken")
    g = run["generation"]
    assert int((control / "overtaken-newer").read_text()) > g
    assert read_row(check, a) == ("before", 100, g)
    assert read_row(check, b) == ("nobody", 100, 0)
    assert last_checkpoint(check, res) == ({"step": 1}, g)

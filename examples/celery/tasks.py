"""tasks.py — a Celery app whose task's effects happen at most once.

``settle(row, steps)`` adds 1 to an account's balance ``steps`` times, one
step per transaction, each committed with a checkpoint (the next step).
It runs under ``lease_fence.celery.FencedTask``: a lease named after the
task and its arguments, taken by PostgreSQL on the task's own connection;
the same task delivered twice at once runs once (the other is skipped); a
run that stalls past its lease is ended by the server and a rerun resumes
from its last checkpoint, so no step is applied twice.

The broker: $CELERY_BROKER_URL (default redis://localhost:6379/0), results
in $CELERY_RESULT_BACKEND (default: the broker's URL). PostgreSQL: the PG*
environment variables (an empty conninfo string).
"""

import os

from celery import Celery

from lease_fence.celery import FencedTask

broker = os.environ.get("CELERY_BROKER_URL", "redis://localhost:6379/0")
app = Celery("tasks", broker=broker, backend=os.environ.get("CELERY_RESULT_BACKEND", broker))


@app.task(base=FencedTask, connect="", ttl_ms=30000)
def settle(job, row, steps):
    first = job.resume_from["next"] if job.resume_from else 0
    for step in range(first, steps):
        job.conn.execute("UPDATE account SET balance = balance + 1 WHERE id = %s", (row,))
        job.checkpoint({"next": step + 1})
    return {"generation": job.generation, "resumed_from": first}

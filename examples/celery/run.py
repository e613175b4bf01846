#!/usr/bin/env python3
"""run.py — run tasks.py as a user would: a worker started with
``celery -A tasks worker``, a task sent, its result checked; then the same
task sent again (same arguments: the same lease): it resumes from the last
checkpoint and applies no step twice. Exits 0 when both behaved.

Needs the broker of tasks.py ($CELERY_BROKER_URL), the PG* variables, the
extension, a table ``account`` protected with ``lease_fence.protect`` and
EXECUTE on acquire, renew, release, checkpoint and last_checkpoint.
"""

import os
import signal
import subprocess
import sys

import psycopg

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> int:
    sys.path.insert(0, HERE)
    from tasks import settle

    worker = subprocess.Popen([sys.executable, "-m", "celery", "-A", "tasks", "--quiet",
                               "worker", "--pool", "threads", "--concurrency", "2",
                               "--loglevel", "WARNING", "--without-mingle",
                               "--without-gossip"], cwd=HERE)
    try:
        with psycopg.connect(autocommit=True) as conn:
            row = conn.execute("INSERT INTO account (owner, balance) VALUES ('celery', 0) "
                               "RETURNING id").fetchone()[0]
            first = settle.delay(row, 3).get(timeout=60)
            print(f"settle({row}, 3): {first}")
            again = settle.delay(row, 3).get(timeout=60)
            print(f"settle({row}, 3) again: {again}")
            balance, fence = conn.execute("SELECT balance, fence FROM account WHERE id = %s",
                                          (row,)).fetchone()
            print(f"row {row}: balance {balance}, fence {fence}")
            ok = (first["resumed_from"] == 0 and again["resumed_from"] == 3 and balance == 3
                  and fence == first["generation"] < again["generation"])
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
    print("at most once: OK" if ok else "at most once: FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

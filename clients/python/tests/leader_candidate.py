"""Candidate A of test_leadership's story, run as a process of its own (so
that the test can freeze it with a real SIGSTOP).

    python3 leader_candidate.py <election> <ttl_ms> <row id>

Prints one line per step on stdout: ``leader <term>`` once it leads and
wrote its row (owner 'a' under its term), then waits for a line on stdin
(the test freezes it meanwhile, and thaws it); then tries to write again,
through ``lead.fenced`` and through the bare ``lease_fence.fenced(conn,
term, election)``, and prints what each raised; then ``lost <reason>`` once
``lead.lost`` is set, and ``exit <what the block's end raised>``.
"""

import sys

import lease_fence
from lf_testlib import connect


def attempt(label, conn, make_block, row_id):
    try:
        with make_block(conn):
            conn.execute("UPDATE account SET owner = 'a-after' WHERE id = %s", (row_id,))
        print(f"{label} committed", flush=True)
    except Exception as exc:                     # noqa: BLE001 - reported to the test
        print(f"{label} {type(exc).__name__} {getattr(exc, 'resource', None)}", flush=True)


def main() -> None:
    election, ttl_ms, row_id = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    conn, work = connect(), connect()
    try:
        with lease_fence.leadership(conn, election, ttl_ms=ttl_ms, value="a") as lead:
            with lead.fenced(work):
                work.execute("UPDATE account SET owner = 'a' WHERE id = %s", (row_id,))
            print(f"leader {lead.term}", flush=True)
            sys.stdin.readline()                 # frozen here by the test, then thawed
            attempt("fenced", work, lambda c: lead.fenced(c), row_id)
            attempt("bare", work, lambda c: lease_fence.fenced(c, lead.term, election), row_id)
            print(f"lost {lead.lost.wait(60)} {lead.lost_reason}", flush=True)
        print("exit none", flush=True)
    except Exception as exc:                     # noqa: BLE001 - reported to the test
        print(f"exit {type(exc).__name__}", flush=True)
    finally:
        conn.close()
        work.close()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""two_holders.py — a stale writer fenced off, with the lease-fence package.

Worker A acquires a lease on a resource with a short TTL and stalls (a GC
pause, a slow network: anything) past it. Worker B acquires the same
resource — a higher generation — and writes. When A wakes up and writes
under its old generation, PostgreSQL refuses it: lease_fence.StaleGeneration.
B's write stands.

Needs the lease_fence extension in the database, a table protected with
``lease_fence.protect`` (here ``account (id, owner, balance)``), and
the ``lease-fence`` wheel (built in ``clients/python``) installed next to
psycopg 3. Connection settings come from
the usual PG* environment variables (PGHOST, PGPORT, PGDATABASE, PGUSER).
Exits 0 when the stale write was refused and B's row stands.
"""

import sys
import time
import uuid

import psycopg

import lease_fence
from lease_fence import StaleGeneration, acquire, fenced, release


def main() -> int:
    a_conn = psycopg.connect(autocommit=True)          # worker A
    b_conn = psycopg.connect(autocommit=True)          # worker B
    resource = f"example:account:{uuid.uuid4().hex[:8]}"
    row_id = a_conn.execute("INSERT INTO account (owner) VALUES ('nobody') "
                            "RETURNING id").fetchone()[0]

    a = acquire(a_conn, resource, ttl_ms=300)
    print(f"A holds {resource} with generation {a.generation}")
    time.sleep(0.6)                                    # A stalls; its lease expires

    b = acquire(b_conn, resource, ttl_ms=10000)
    print(f"B holds {resource} with generation {b.generation}")
    with fenced(b_conn, b):                            # BEGIN; set_generation(g, resource)
        b_conn.execute("UPDATE account SET owner = 'B' WHERE id = %s", (row_id,))
    print("B wrote")

    try:
        with fenced(a_conn, a):
            a_conn.execute("UPDATE account SET owner = 'A' WHERE id = %s", (row_id,))
    except StaleGeneration as e:
        print(f"A's write refused: StaleGeneration (SQLSTATE {e.sqlstate}, "
              f"resource {e.resource!r})")
        refused = True
    else:
        print("A's write went through: NOT fenced")
        refused = False
    finally:
        release(b_conn, b)

    owner, fence = a_conn.execute("SELECT owner, fence FROM account WHERE id = %s",
                                  (row_id,)).fetchone()
    print(f"row {row_id}: owner {owner!r}, fence {fence} (lease-fence {lease_fence.__version__})")
    a_conn.close()
    b_conn.close()
    return 0 if refused and owner == "B" and fence == b.generation else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""client_side.py — two_holders.py on a server without the C library.

The same story (A's lease expires, B takes over and writes, A's late write
is refused with lease_fence.StaleGeneration), on a database with the
portable edition (portable/lease_fence_portable.sql): the application takes
the Redis lease itself (lease_fence.client_side, redis-py) and the database
only draws the generations and fences the writes.

Needs the ``lease-fence`` wheel next to psycopg 3 and redis-py, a table
``account (id, owner, balance)`` protected with ``lease_fence.protect``,
and for the role EXECUTE on lease_fence.next_generation(bigint) and
fence_resource. Settings: the PG* environment variables (PGPORT and
PGDATABASE overridden by LF_PORTABLE_PGPORT / LF_PORTABLE_DB when set), and
Redis at the unix socket LF_REDIS_SOCK (else localhost:6379).
Exits 0 when the stale write was refused and B's row stands.
"""

import os
import sys
import time
import uuid

import psycopg
import redis

import lease_fence
from lease_fence import StaleGeneration, fenced
from lease_fence.client_side import ClientSideLeases


def connect() -> psycopg.Connection:
    kw = {}
    if os.environ.get("LF_PORTABLE_PGPORT"):
        kw["port"] = int(os.environ["LF_PORTABLE_PGPORT"])
    if os.environ.get("LF_PORTABLE_DB"):
        kw["dbname"] = os.environ["LF_PORTABLE_DB"]
    return psycopg.connect(autocommit=True, **kw)


def main() -> int:
    sock = os.environ.get("LF_REDIS_SOCK")
    r = (redis.Redis(unix_socket_path=sock, socket_timeout=1.0) if sock else
         redis.Redis(socket_timeout=1.0, socket_connect_timeout=1.0))
    leases = ClientSideLeases(r)
    a_conn = connect()                                 # worker A
    b_conn = connect()                                 # worker B
    resource = f"example:client-side:{uuid.uuid4().hex[:8]}"
    row_id = a_conn.execute("INSERT INTO account (owner) VALUES ('nobody') "
                            "RETURNING id").fetchone()[0]

    a = leases.acquire(a_conn, resource, ttl_ms=300)
    print(f"A holds {resource} with generation {a.generation} (taken in Redis by A)")
    time.sleep(0.6)                                    # A stalls; its lease expires

    b = leases.acquire(b_conn, resource, ttl_ms=10000)
    print(f"B holds {resource} with generation {b.generation}")
    try:
        with fenced(b_conn, b):                        # BEGIN; set_generation(g, resource)
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
        print(f"B releases: {leases.release(b_conn, b)}; A's release: "
              f"{leases.release(a_conn, a)}")

    owner, fence = a_conn.execute("SELECT owner, fence FROM account WHERE id = %s",
                                  (row_id,)).fetchone()
    print(f"row {row_id}: owner {owner!r}, fence {fence} (lease-fence {lease_fence.__version__})")
    a_conn.close()
    b_conn.close()
    r.close()
    return 0 if refused and owner == "B" and fence == b.generation else 1


if __name__ == "__main__":
    sys.exit(main())

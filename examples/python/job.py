#!/usr/bin/env python3
"""job.py — the fenced job, with the lease-fence package.

A job that is one transaction: ``lease_fence.job`` takes a
transaction-scoped lease (BEGIN and the acquire in one round trip with
psycopg 3), the block writes under its generation, COMMIT checks the lease
and releases it. While worker A's job runs, worker B's job on the same
resource is refused (LeaseBusy) before its block runs; once A committed,
B's job runs. Connection settings from the PG* environment variables; needs
the table ``account`` protected with ``lease_fence.protect``. Exits 0 when
both jobs behaved.
"""

import sys
import uuid

import psycopg

import lease_fence
from lease_fence import LeaseBusy


def main() -> int:
    a = psycopg.connect(autocommit=True)               # worker A
    b = psycopg.connect(autocommit=True)               # worker B
    resource = f"example:job:{uuid.uuid4().hex[:8]}"
    row_id = a.execute("INSERT INTO account (owner) VALUES ('nobody') "
                       "RETURNING id").fetchone()[0]
    b_refused = False
    with lease_fence.job(a, resource, ttl_ms=5000) as lease_a:
        a.execute("UPDATE account SET owner = 'A' WHERE id = %s", (row_id,))
        try:
            with lease_fence.job(b, resource, ttl_ms=5000):
                print("B's job ran while A held the lease: NOT excluded")
        except LeaseBusy:
            b_refused = True
            print(f"B's job refused while A holds {resource}: LeaseBusy")
    print(f"A's job committed under generation {lease_a.generation}")

    with lease_fence.job(b, resource, ttl_ms=5000) as lease_b:   # A's COMMIT released it
        b.execute("UPDATE account SET owner = 'B' WHERE id = %s", (row_id,))
    owner, fence = a.execute("SELECT owner, fence FROM account WHERE id = %s",
                             (row_id,)).fetchone()
    print(f"B's job committed: row {row_id} owner {owner!r}, fence {fence}")
    a.close()
    b.close()
    ok = b_refused and owner == "B" and fence == lease_b.generation > lease_a.generation
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""lease_fence over psycopg 3 (sync), against a real PostgreSQL + Redis.

Ported from the examples' unittest suite: each test pins an outcome, a wrong
status, a swallowed unknown or a stale write let through makes it fail.
"""

import time
import unittest
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest

from lease_fence import (
    ConflictingGeneration, FenceError, KeptAliveLease, Lease, LeaseBusy, LeaseDenied,
    LeaseError, LeaseLost, LeaseLostAtCommit, LeaseUnavailable, LeaseUnknown,
    MissingGeneration, ReleaseStatus, StaleGeneration, UnissuedGeneration, acquire,
    fence_error_from, fence_errors, fenced, keepalive_state, kept_alive_lease, release, renew,
    transaction_lease, try_acquire)
from lf_testlib import (APP_USER, DATABASE, NOREDIS_USER, PGHOST, PGPORT, connect, lease_key,
                        new_row, read_row, redis, resource_name, wait_for_redis, wait_until)

# The unknown test: Redis stalls longer than a request may take.
COMMAND_TIMEOUT_MS = 150
CLEANUP_TIMEOUT_MS = 150
PAUSE_MS = 3000


# A fenced write under a lease's generation
def fenced_update(conn, lease_or_generation, row_id, owner):
    with fenced(conn, lease_or_generation):
        conn.execute("UPDATE account SET owner = %s WHERE id = %s", (owner, row_id))


# -------------------------------------------------------------- psycopg 3

class PsycopgTests(unittest.TestCase):
    """The helper over psycopg 3, as the app role."""

    def setUp(self):
        self.conn = connect()
        self.addCleanup(self.conn.close)

    def test_transaction_lease_commits_row_and_fence(self):
        """transaction scope: the block's writes carry the lease's generation,
        COMMIT keeps them and releases the lease."""
        row_id = new_row(self.conn)
        res = resource_name(self)
        with transaction_lease(self.conn, res, ttl_ms=10000, min_validity_ms=1000) as lease:
            self.assertIs(lease.acquired, True)
            self.assertEqual(lease.status, "acquired")
            self.assertRegex(lease.identity, r"^[0-9a-f]{32}$")
            self.assertGreaterEqual(lease.validity_ms, 1000)
            # the lease's generation is the transaction's current generation
            cur = self.conn.execute("SELECT lease_fence.current_generation()").fetchone()[0]
            self.assertEqual(cur, lease.generation)
            self.assertEqual(redis("GET", lease_key(res)), lease.identity)
            self.conn.execute("UPDATE account SET owner = 'tx', balance = balance + 10 "
                              "WHERE id = %s", (row_id,))
        self.assertEqual(read_row(self.conn, row_id), ("tx", 110, lease.generation))
        self.assertEqual(redis("EXISTS", lease_key(res)), "0", "released at commit")
        # nothing lingers: the next transaction has no current generation
        self.assertIsNone(
            self.conn.execute("SELECT lease_fence.current_generation()").fetchone()[0])

    def test_transaction_lease_on_a_non_autocommit_connection(self):
        """psycopg's default (autocommit off) works too, as long as it is idle."""
        conn = psycopg.connect(host=PGHOST, port=PGPORT, dbname=DATABASE, user=APP_USER)
        self.addCleanup(conn.close)
        row_id = new_row(self.conn)
        res = resource_name(self)
        with transaction_lease(conn, res, ttl_ms=10000) as lease:
            conn.execute("UPDATE account SET owner = 'default-mode' WHERE id = %s", (row_id,))
        self.assertEqual(read_row(self.conn, row_id), ("default-mode", 100, lease.generation))
        self.assertEqual(redis("EXISTS", lease_key(res)), "0")

    def test_explicit_flow_stale_writer_is_rejected(self):
        """explicit scope: A stalls past its TTL, B takes over and writes; A's
        late write raises StaleGeneration (LF001), A's renew is LeaseLost,
        A's release leaves B's lease alone, B's row and fence stand."""
        row_id = new_row(self.conn)
        res = resource_name(self)
        conn_b = connect()
        self.addCleanup(conn_b.close)

        a = acquire(self.conn, res, ttl_ms=300)
        with fenced(self.conn, a.generation):
            self.conn.execute("UPDATE account SET owner = 'A' WHERE id = %s", (row_id,))
        self.assertEqual(read_row(self.conn, row_id), ("A", 100, a.generation))

        time.sleep(0.6)                      # A stalls; its lease expires

        b = acquire(conn_b, res, ttl_ms=10000)
        self.assertGreater(b.generation, a.generation)
        with fenced(conn_b, b.generation):
            conn_b.execute("UPDATE account SET owner = 'B', balance = balance + 1 "
                           "WHERE id = %s", (row_id,))

        with self.assertRaises(StaleGeneration) as cm:
            with fenced(self.conn, a.generation):
                self.conn.execute("UPDATE account SET owner = 'A late', balance = 0 "
                                  "WHERE id = %s", (row_id,))
        err = cm.exception
        self.assertIsInstance(err, FenceError)
        self.assertEqual(err.sqlstate, "LF001")
        self.assertEqual((err.schema, err.table, err.column, err.resource),
                         ("public", "account", "fence", None))
        self.assertIsInstance(err.__cause__, psycopg.Error)
        self.assertEqual(err.__cause__.sqlstate, "LF001")

        with self.assertRaises(LeaseLost) as cm:
            renew(self.conn, a, ttl_ms=10000)
        self.assertEqual(cm.exception.status, "lost")
        self.assertEqual(redis("GET", lease_key(res)), b.identity, "renew never recreates")

        self.assertEqual(release(self.conn, a), "not_held")
        self.assertEqual(redis("GET", lease_key(res)), b.identity, "B's lease untouched")
        self.assertGreater(renew(conn_b, b, ttl_ms=10000), 0)
        self.assertEqual(release(conn_b, b), "released")
        self.assertEqual(redis("EXISTS", lease_key(res)), "0")
        self.assertEqual(read_row(self.conn, row_id), ("B", 101, b.generation))

    def test_fenced_lease_fences_the_resource(self):
        """explicit scope, fenced(conn, lease): once B took over and fenced
        the resource, A's late transaction raises StaleGeneration (naming the
        resource) before its block runs, so even an INSERT of a row
        B never wrote goes nowhere. fenced(conn, generation) fences rows
        only: there no row fence stops that INSERT."""
        res = resource_name(self)
        conn_b = connect()
        self.addCleanup(conn_b.close)

        def notes(suffix):
            return self.conn.execute("SELECT count(*) FROM ledger WHERE note = %s",
                                     (f"{res} {suffix}",)).fetchone()[0]

        a = acquire(self.conn, res, ttl_ms=300)
        with fenced(self.conn, a):
            self.conn.execute("INSERT INTO ledger (note) VALUES (%s)", (f"{res} A",))
        time.sleep(0.6)                      # A stalls; its lease expires

        b = acquire(conn_b, res, ttl_ms=10000)
        self.addCleanup(release, conn_b, b)
        with fenced(conn_b, b):
            pass                             # B holds the resource, wrote no row yet
        fences = self.conn.execute("SELECT generation FROM lease_fence.resource_fences "
                                   "WHERE resource = %s", (res,)).fetchone()[0]
        self.assertEqual(fences, b.generation)

        ran = []
        with self.assertRaises(StaleGeneration) as cm:
            with fenced(self.conn, a):
                ran.append(True)
                self.conn.execute("INSERT INTO ledger (note) VALUES (%s)", (f"{res} A late",))
        err = cm.exception
        self.assertEqual(err.sqlstate, "LF001")
        self.assertEqual(err.resource, res)
        self.assertIsNone(err.column)
        self.assertEqual(ran, [], "the block never ran")
        self.assertEqual(notes("A late"), 0)

        # rows only: the row fence has no row to compare the INSERT with
        with fenced(self.conn, a.generation):
            self.conn.execute("INSERT INTO ledger (note) VALUES (%s)", (f"{res} A rows only",))
        self.assertEqual(notes("A rows only"), 1)

        # resource= names the resource, for a bare generation too
        gen = self.conn.execute("SELECT lease_fence.next_generation()").fetchone()[0]
        with fenced(self.conn, gen, resource=f"{res}:other"):
            pass
        self.assertEqual(self.conn.execute(
            "SELECT generation FROM lease_fence.resource_fences WHERE resource = %s",
            (f"{res}:other",)).fetchone()[0], gen)

    def test_fenced_transaction_in_one_pipeline(self):
        """BEGIN; set_generation(%s, %s); UPDATE; COMMIT sent as one psycopg
        pipeline: the row carries the lease's generation and the resource is
        fenced at it. A lower generation's pipeline on that resource is
        StaleGeneration, naming the resource, and writes nothing."""
        row_id = new_row(self.conn)
        res = resource_name(self)
        older = self.conn.execute("SELECT lease_fence.next_generation()").fetchone()[0]
        lease = acquire(self.conn, res, ttl_ms=10000)
        self.addCleanup(release, self.conn, lease)

        with self.conn.pipeline():
            self.conn.execute("BEGIN")
            self.conn.execute("SELECT lease_fence.set_generation(%s, %s)",
                              (lease.generation, lease.resource))
            self.conn.execute("UPDATE account SET owner = 'pipelined' WHERE id = %s", (row_id,))
            self.conn.execute("COMMIT")
        self.assertEqual(read_row(self.conn, row_id), ("pipelined", 100, lease.generation))
        self.assertEqual(self.conn.execute(
            "SELECT generation FROM lease_fence.resource_fences WHERE resource = %s",
            (res,)).fetchone()[0], lease.generation)
        self.assertIsNone(
            self.conn.execute("SELECT lease_fence.current_generation()").fetchone()[0],
            "the generation ended with the transaction")

        with self.assertRaises(StaleGeneration) as cm:
            with fence_errors(), self.conn.pipeline():
                self.conn.execute("BEGIN")
                self.conn.execute("SELECT lease_fence.set_generation(%s, %s)", (older, res))
                self.conn.execute("UPDATE account SET owner = 'stale' WHERE id = %s", (row_id,))
                self.conn.execute("COMMIT")
        self.conn.rollback()                 # the failed transaction block
        self.assertEqual(cm.exception.resource, res)
        self.assertEqual(read_row(self.conn, row_id), ("pipelined", 100, lease.generation))

    def test_fence_error_fields_name_the_row_or_the_resource(self):
        """a stale holder's error says what refused it in the error's fields,
        as the driver reports them (nothing is parsed from DETAIL): schema,
        table and column for a row, the resource (the constraint field) for
        a resource fence; LF002 on the strict table names it too."""
        row_id = new_row(self.conn)
        res = resource_name(self)
        old, new = (self.conn.execute("SELECT lease_fence.next_generation()").fetchone()[0]
                    for _ in range(2))
        with fenced(self.conn, new, resource=res):
            self.conn.execute("UPDATE account SET owner = 'new' WHERE id = %s", (row_id,))

        with self.assertRaises(StaleGeneration) as cm:
            with fenced(self.conn, old):                       # rows only
                self.conn.execute("UPDATE account SET owner = 'old' WHERE id = %s", (row_id,))
        err = cm.exception
        self.assertEqual((err.schema, err.table, err.column, err.resource),
                         ("public", "account", "fence", None))
        diag = err.__cause__.diag
        self.assertEqual((diag.schema_name, diag.table_name, diag.column_name,
                          diag.constraint_name), ("public", "account", "fence", None))
        self.assertIsNotNone(err.detail, "DETAIL is still there, for humans")
        self.assertFalse(hasattr(err, "stored"), "generations are not parsed from DETAIL")

        ran = []
        with self.assertRaises(StaleGeneration) as cm:
            with fenced(self.conn, old, resource=res):
                ran.append(True)
        err = cm.exception
        self.assertEqual((err.schema, err.table, err.column, err.resource),
                         ("lease_fence", "resource_generation", None, res))
        self.assertEqual(err.__cause__.diag.constraint_name, res)
        self.assertEqual(ran, [])

        with self.assertRaises(MissingGeneration) as cm:
            with fence_errors(), self.conn.transaction():
                self.conn.execute("INSERT INTO ledger (note) VALUES ('unfenced, fields')")
        err = cm.exception
        self.assertEqual((err.schema, err.table, err.column), ("public", "ledger", "fence"))
        # fence_error_from on the driver's error itself; anything else is None
        again = fence_error_from(err.__cause__)
        self.assertIsInstance(again, MissingGeneration)
        self.assertEqual((again.table, again.column), ("ledger", "fence"))
        self.assertIs(fence_error_from(err), err)
        self.assertIsNone(fence_error_from(ValueError("not a database error")))
        self.assertEqual(read_row(self.conn, row_id), ("new", 100, new))

    def test_busy_is_reported_as_busy(self):
        """someone else holds it: try_acquire returns None; acquire raises
        LeaseBusy (a LeaseDenied, acquired false), never LeaseUnknown; a
        transaction_lease block does not run."""
        res = resource_name(self)
        holder = acquire(self.conn, res, ttl_ms=10000)
        self.addCleanup(release, self.conn, holder)
        other = connect()
        self.addCleanup(other.close)

        self.assertIsNone(try_acquire(other, res, ttl_ms=10000), "busy: try_acquire is None")

        with self.assertRaises(LeaseBusy) as cm:
            acquire(other, res, ttl_ms=10000)
        self.assertIsInstance(cm.exception, LeaseDenied)
        self.assertNotIsInstance(cm.exception, LeaseUnknown)
        self.assertIs(cm.exception.lease.acquired, False)

        ran = []
        with self.assertRaises(LeaseBusy):
            with transaction_lease(other, res, ttl_ms=10000):
                ran.append(True)
        self.assertEqual(ran, [])
        self.assertEqual(redis("GET", lease_key(res)), holder.identity)

    def test_unknown_is_not_busy(self):
        """Redis stalls (CLIENT PAUSE) longer than lease_fence.command_timeout_ms
        (set through PGOPTIONS-style startup options): acquire is unknown —
        acquired IS NULL, LeaseUnknown, not LeaseDenied — with identity and
        generation kept; the transaction-scoped form never runs its block."""
        # One connection per call: an unknown outcome drops the backend's
        # Redis connection, and the first acquire on a new one checks first
        # that key_prefix is this database's (docs/guides/redis-deployments.md, "One key_prefix per
        # database") -- during the pause that check would time out and make
        # the acquire "unavailable". So each backend takes and releases a
        # lease before the pause, and its one call below is what Redis stalls.
        conns = []
        for _ in range(3):
            c = connect(options=f"-c lease_fence.command_timeout_ms={COMMAND_TIMEOUT_MS} "
                                f"-c lease_fence.cleanup_timeout_ms={CLEANUP_TIMEOUT_MS}")
            self.addCleanup(c.close)
            release(c, acquire(c, resource_name(self, ":warm"), ttl_ms=10000))
            conns.append(c)
        conn, conn2, conn3 = conns
        row_id = new_row(self.conn)
        res = resource_name(self)

        redis("CLIENT", "PAUSE", PAUSE_MS, "ALL")
        try:
            with self.assertRaises(LeaseUnknown) as tried:
                try_acquire(conn, res, ttl_ms=10000)
            raw = tried.exception.lease
            with self.assertRaises(LeaseUnknown) as cm:
                acquire(conn2, res, ttl_ms=10000)
            ran = []
            with self.assertRaises(LeaseUnknown):
                with transaction_lease(conn3, res, ttl_ms=10000):
                    ran.append(True)
        finally:
            wait_for_redis()

        self.assertIs(raw.acquired, None)
        self.assertEqual(raw.status, "unknown")
        self.assertRegex(raw.identity, r"^[0-9a-f]{32}$")
        self.assertIsNotNone(raw.generation)
        err = cm.exception
        self.assertNotIsInstance(err, LeaseDenied)
        self.assertIsInstance(err, LeaseError)
        self.assertEqual(err.status, "unknown")
        self.assertIs(err.lease.acquired, None)
        self.assertGreater(err.lease.generation, raw.generation)
        self.assertEqual(ran, [])
        self.assertEqual(read_row(self.conn, row_id), ("nobody", 100, 0))

        # the backend tried a conditional release while Redis was still paused:
        # it could not be confirmed
        states = dict(conn.execute(
            "SELECT identity, state FROM lease_fence.leases WHERE resource = %s",
            (res,)).fetchall())
        self.assertEqual(states.get(raw.identity), "unconfirmed")

        # A paused request whose connection was closed is dropped by Redis
        # (so a CLIENT PAUSE never produces "applied, reply lost"): nothing was
        # granted, and a new acquire (new generation) gets the lease.
        # Releasing the unknown one is safe.
        self.assertEqual(redis("EXISTS", lease_key(res)), "0")
        self.assertEqual(release(conn, err.lease), "not_held")
        fresh = acquire(conn, res, ttl_ms=10000)
        self.assertGreater(fresh.generation, err.lease.generation)
        self.assertEqual(release(conn, fresh), "released")

    def test_unavailable_is_a_definite_no(self):
        """Redis unreachable (connect fails): acquire and try_acquire raise
        LeaseUnavailable with acquired false — nothing was sent; renew and
        release say unavailable."""
        conn = connect(user=NOREDIS_USER)
        self.addCleanup(conn.close)
        res = resource_name(self)
        with self.assertRaises(LeaseUnavailable) as tried:
            try_acquire(conn, res, ttl_ms=10000)
        raw = tried.exception.lease
        self.assertEqual((raw.acquired, raw.status), (False, "unavailable"))
        with self.assertRaises(LeaseUnavailable) as cm:
            acquire(conn, res, ttl_ms=10000)
        self.assertIsInstance(cm.exception, LeaseDenied)
        with self.assertRaises(LeaseUnavailable):
            with transaction_lease(conn, res, ttl_ms=10000):
                self.fail("block must not run")
        ghost = Lease(True, "acquired", res, "0" * 32, 1, 0)
        with self.assertRaises(LeaseUnavailable):
            renew(conn, ghost, ttl_ms=10000)
        self.assertEqual(release(conn, ghost), "unavailable")

    def test_reason_says_why(self):
        """'unavailable' carries the reason (Redis cannot be reached): on the
        row, on the LeaseError and in its message, on renew's error and on
        release's status. A granted lease and a 'released' release carry
        none."""
        conn = connect(user=NOREDIS_USER)
        self.addCleanup(conn.close)
        res = resource_name(self)
        with self.assertRaises(LeaseUnavailable) as tried:
            try_acquire(conn, res, ttl_ms=10000)
        raw = tried.exception.lease
        self.assertEqual(raw.status, "unavailable")
        self.assertRegex(raw.reason, r"\bRedis\b")
        with self.assertRaises(LeaseUnavailable) as cm:
            acquire(conn, res, ttl_ms=10000)
        err = cm.exception
        self.assertEqual(err.reason, err.lease.reason)
        self.assertRegex(err.reason, r"\bRedis\b")
        self.assertIn(err.reason, str(err))
        ghost = Lease(True, "acquired", res, "0" * 32, 1, 0)
        with self.assertRaises(LeaseUnavailable) as cm:
            renew(conn, ghost, ttl_ms=10000)
        self.assertRegex(cm.exception.reason, r"\bRedis\b")
        status = release(conn, ghost)
        self.assertEqual(status, "unavailable")
        self.assertIsInstance(status, ReleaseStatus)
        self.assertRegex(status.reason, r"\bRedis\b")

        lease = acquire(self.conn, res, ttl_ms=10000)
        self.assertEqual(lease.status, "acquired")
        self.assertIsNone(lease.reason)
        status = release(self.conn, lease)
        self.assertEqual(status, "released")
        self.assertIsNone(status.reason)

    def test_lease_lost_before_commit_raises_lease_lost_at_commit(self):
        """an admin deletes the lease key before COMMIT: COMMIT fails with LF010
        (LeaseLostAtCommit) and the block's write is rolled back."""
        row_id = new_row(self.conn)
        res = resource_name(self)
        with self.assertRaises(LeaseLostAtCommit) as cm:
            with transaction_lease(self.conn, res, ttl_ms=2000) as lease:
                self.conn.execute("UPDATE account SET owner = 'doomed' WHERE id = %s",
                                  (row_id,))
                self.assertEqual(redis("DEL", lease_key(res)), "1")
                # past half the TTL: a server that skips asking Redis at
                # COMMIT while the lease is young (remaining > min_validity
                # + ttl/2) asks now
                time.sleep(1.1)
        self.assertEqual(cm.exception.sqlstate, "LF010")
        self.assertIsInstance(cm.exception.__cause__, psycopg.Error)
        self.assertEqual(read_row(self.conn, row_id), ("nobody", 100, 0))
        self.assertGreater(lease.generation, 0)

    def test_missing_and_conflicting_generation(self):
        """strict table without a generation: MissingGeneration (LF002); a
        fence value other than the current generation: ConflictingGeneration
        (LF003)."""
        with self.assertRaises(MissingGeneration) as cm:
            with fence_errors(), self.conn.transaction():     # code that forgot the fence
                self.conn.execute("INSERT INTO ledger (note) VALUES ('unfenced')")
        self.assertEqual(cm.exception.sqlstate, "LF002")
        self.assertEqual(self.conn.execute(
            "SELECT count(*) FROM ledger WHERE note = 'unfenced'").fetchone()[0], 0)

        gen = self.conn.execute("SELECT lease_fence.next_generation()").fetchone()[0]
        with fenced(self.conn, gen):
            self.conn.execute("INSERT INTO ledger (note) VALUES ('fenced')")
        row_id = new_row(self.conn)
        with self.assertRaises(ConflictingGeneration) as cm:
            with fenced(self.conn, gen):
                self.conn.execute("UPDATE account SET fence = %s WHERE id = %s",
                                  (gen + 1, row_id))
        self.assertEqual(cm.exception.sqlstate, "LF003")
        self.assertEqual(read_row(self.conn, row_id), ("nobody", 100, 0))

    def test_unissued_generation(self):
        """a generation the database never issued (a typo, a timestamp):
        UnissuedGeneration (LF004) naming the table and fence column; the row
        is unchanged."""
        gen = self.conn.execute("SELECT lease_fence.next_generation()").fetchone()[0]
        row_id = new_row(self.conn)
        with self.assertRaises(UnissuedGeneration) as cm:
            with fenced(self.conn, gen + 1000000):
                self.conn.execute("UPDATE account SET owner = 'typo' WHERE id = %s", (row_id,))
        self.assertEqual(cm.exception.sqlstate, "LF004")
        self.assertIsInstance(cm.exception, FenceError)
        self.assertEqual((cm.exception.schema, cm.exception.table, cm.exception.column),
                         ("public", "account", "fence"))
        self.assertEqual(read_row(self.conn, row_id), ("nobody", 100, 0))

    def test_stale_acquire_is_a_definite_no_and_heals(self):
        """Redis remembers a higher generation than the database hands out (a
        restored backup): acquire is 'stale' (acquired false, nothing set), and
        the next acquire gets a generation above the stored one."""
        res = resource_name(self)
        now = self.conn.execute("SELECT lease_fence.next_generation()").fetchone()[0]
        stored = now + 1000
        redis("SET", lease_key(res) + ":gen", stored)
        with self.assertRaises(LeaseDenied) as cm:
            acquire(self.conn, res, ttl_ms=10000, retry_stale=False)
        self.assertNotIsInstance(cm.exception, LeaseUnknown)
        self.assertEqual((cm.exception.status, cm.exception.lease.acquired), ("stale", False))
        self.assertEqual(redis("EXISTS", lease_key(res)), "0")
        lease = acquire(self.conn, res, ttl_ms=10000, retry_stale=False)
        self.assertGreater(lease.generation, stored)
        self.assertEqual(release(self.conn, lease), "released")
        # and the helper's one automatic retry
        redis("SET", lease_key(res) + ":gen", lease.generation + 1000)
        again = acquire(self.conn, res, ttl_ms=10000)
        self.assertGreater(again.generation, lease.generation + 1000)
        self.assertEqual(release(self.conn, again), "released")
        # and inside one transaction (transaction scope): stale, heal, acquired
        redis("SET", lease_key(res) + ":gen", again.generation + 1000)
        with transaction_lease(self.conn, res, ttl_ms=10000) as in_tx:
            self.assertGreater(in_tx.generation, again.generation + 1000)
        self.assertEqual(redis("EXISTS", lease_key(res)), "0")

    def test_insufficient_validity_is_a_definite_no(self):
        """min_validity_ms = ttl_ms can never be met: 'insufficient_validity',
        acquired false, and the lease was released again."""
        res = resource_name(self)
        with self.assertRaises(LeaseDenied) as cm:
            acquire(self.conn, res, ttl_ms=100, min_validity_ms=100)
        self.assertEqual(cm.exception.status, "insufficient_validity")
        self.assertIs(cm.exception.lease.acquired, False)
        self.assertEqual(redis("EXISTS", lease_key(res)), "0")

    # ---------------------------------------------------------- waiting

    def test_waiting_acquire_is_woken_by_the_release(self):
        """wait_ms: B waits for A's lease (TTL 60 s) and gets it once A
        releases, long before A's TTL or B's wait would end; a waiting
        transaction_lease is woken by the holder transaction's COMMIT."""
        res = resource_name(self)
        other = connect()
        self.addCleanup(other.close)
        holder = acquire(self.conn, res, ttl_ms=60000)
        with ThreadPoolExecutor(1) as pool:
            t0 = time.monotonic()
            waiting = pool.submit(acquire, other, res, ttl_ms=10000, wait_ms=30000)
            time.sleep(0.3)
            self.assertFalse(waiting.done(), "B waits while A holds the lease")
            self.assertEqual(release(self.conn, holder), "released")
            lease = waiting.result(timeout=60)
            self.assertGreaterEqual(time.monotonic() - t0, 0.3)
        self.assertIs(lease.acquired, True)
        self.assertEqual(lease.status, "acquired")
        self.assertGreater(lease.generation, holder.generation)
        self.assertEqual(redis("GET", lease_key(res)), lease.identity)
        self.assertEqual(release(other, lease), "released")

        # transaction scope: the holder's COMMIT releases, the waiter writes
        row_id = new_row(self.conn)

        def take_over():
            with transaction_lease(other, res, ttl_ms=10000, wait_ms=30000) as l:
                other.execute("UPDATE account SET owner = 'B after A' WHERE id = %s", (row_id,))
            return l

        with ThreadPoolExecutor(1) as pool:
            with transaction_lease(self.conn, res, ttl_ms=60000) as a:
                self.conn.execute("UPDATE account SET owner = 'A' WHERE id = %s", (row_id,))
                waiting = pool.submit(take_over)
                time.sleep(0.3)
                self.assertFalse(waiting.done(), "B waits while A's transaction holds it")
            b = waiting.result(timeout=60)
        self.assertGreater(b.generation, a.generation)
        self.assertEqual(read_row(self.conn, row_id), ("B after A", 100, b.generation))
        self.assertEqual(redis("EXISTS", lease_key(res)), "0")

    def test_waiting_acquire_deadline_is_busy(self):
        """wait_ms ends with the lease still held: LeaseBusy after at least
        wait_ms, the holder's key untouched; statement_timeout cuts a wait
        short with the driver's QueryCanceled (57014), not a LeaseError."""
        res = resource_name(self)
        holder = acquire(self.conn, res, ttl_ms=60000)
        self.addCleanup(release, self.conn, holder)
        other = connect()
        self.addCleanup(other.close)

        t0 = time.monotonic()
        with self.assertRaises(LeaseBusy) as cm:
            acquire(other, res, ttl_ms=10000, wait_ms=700)
        self.assertGreaterEqual(time.monotonic() - t0, 0.7)
        self.assertIs(cm.exception.lease.acquired, False)

        t0 = time.monotonic()
        self.assertIsNone(try_acquire(other, res, ttl_ms=10000, wait_ms=300))
        self.assertGreaterEqual(time.monotonic() - t0, 0.3)
        self.assertEqual(redis("GET", lease_key(res)), holder.identity)

        other.execute("SET statement_timeout = 300")
        with self.assertRaises(psycopg.errors.QueryCanceled) as cm:
            acquire(other, res, ttl_ms=10000, wait_ms=30000)
        self.assertEqual(cm.exception.sqlstate, "57014")
        other.execute("RESET statement_timeout")
        self.assertEqual(redis("GET", lease_key(res)), holder.identity)

    # ---------------------------------------------------------- keep-alive

    def test_kept_alive_lease_outlives_its_ttl(self):
        """kept_alive_lease, TTL 1 s: a 3 s statement on the owner's
        connection keeps it alive (watched on another connection: active);
        a fenced write under it then succeeds; the end releases it."""
        row_id = new_row(self.conn)
        res = resource_name(self)
        watch = connect()
        self.addCleanup(watch.close)
        with kept_alive_lease(self.conn, res, ttl_ms=1000, watch=watch) as lease:
            self.assertIsInstance(lease, KeptAliveLease)
            self.assertIsInstance(lease, Lease)
            self.assertEqual((lease.acquired, lease.status), (True, "acquired"))
            self.assertEqual(lease.state, "active")
            self.conn.execute("SELECT pg_sleep(3)")
            self.assertEqual(redis("GET", lease_key(res)), lease.identity,
                             "still held after three TTLs of a running statement")
            self.assertFalse(lease.lost)
            lease.check()
            fenced_update(self.conn, lease, row_id, "kept alive")
            scope = self.conn.execute("SELECT scope, state FROM lease_fence.leases "
                                      "WHERE identity = %s", (lease.identity,)).fetchone()
            self.assertEqual(scope, ("session", "held"))
        self.assertEqual(read_row(self.conn, row_id), ("kept alive", 100, lease.generation))
        self.assertEqual(redis("EXISTS", lease_key(res)), "0", "released at the end")
        self.assertIsNone(keepalive_state(watch, lease), "no longer kept alive")
        self.assertIsNone(lease.state)

    def test_kept_alive_lease_lost_is_reported_and_refuses_writes(self):
        """someone overwrites the key: the watch reports lost, lease.check()
        raises LeaseLost, the next fenced write raises LeaseLostAtCommit
        (LF010) and writes nothing, and the end raises LeaseLost (release:
        not_held) leaving the other identity's key alone."""
        row_id = new_row(self.conn)
        res = resource_name(self)
        watch = connect()
        self.addCleanup(watch.close)
        thief = "f" * 32
        with self.assertRaises(LeaseLost) as at_end:
            with kept_alive_lease(self.conn, res, ttl_ms=3000, watch=watch) as lease:
                fenced_update(self.conn, lease, row_id, "before the loss")
                redis("SET", lease_key(res), thief, "PX", 60000)
                wait_until("the watch to see the loss", lambda: lease.lost)
                self.assertEqual(lease.state, "lost")
                with self.assertRaises(LeaseLost) as cm:
                    lease.check()
                self.assertEqual(cm.exception.status, "lost")
                with self.assertRaises(LeaseLostAtCommit) as cm:
                    fenced_update(self.conn, lease, row_id, "after the loss")
                self.assertEqual(cm.exception.sqlstate, "LF010")
                with self.assertRaises(LeaseLostAtCommit):     # rows only: the row write
                    fenced_update(self.conn, lease.generation, row_id, "after the loss")
                self.assertEqual(self.conn.execute(
                    "SELECT state FROM lease_fence.leases WHERE identity = %s",
                    (lease.identity,)).fetchone()[0], "lost")
        self.assertEqual(at_end.exception.status, "lost")
        self.assertEqual(at_end.exception.lease, lease)
        self.assertEqual(read_row(self.conn, row_id), ("before the loss", 100, lease.generation))
        self.assertEqual(redis("GET", lease_key(res)), thief, "the other identity's key is untouched")
        redis("DEL", lease_key(res))
        self.assertIsNone(keepalive_state(watch, lease), "the release acknowledged the loss")

    def test_kept_alive_lease_released_when_the_block_raises(self):
        """the block's exception propagates as is and the lease is released;
        a lease without a watch connection cannot be asked; the owner's own
        connection is refused as the watch."""
        res = resource_name(self)
        watch = connect()
        self.addCleanup(watch.close)
        with self.assertRaises(ZeroDivisionError):
            with kept_alive_lease(self.conn, res, ttl_ms=10000) as lease:
                self.assertEqual(redis("GET", lease_key(res)), lease.identity)
                self.assertEqual(keepalive_state(watch, lease), "active")
                with self.assertRaises(RuntimeError):
                    lease.check()
                1 / 0
        self.assertEqual(redis("EXISTS", lease_key(res)), "0")
        self.assertIsNone(keepalive_state(watch, lease.identity))
        with self.assertRaises(ValueError):
            with kept_alive_lease(self.conn, res, ttl_ms=10000, watch=self.conn):
                self.fail("block must not run")
        self.assertEqual(redis("EXISTS", lease_key(res)), "0", "nothing was acquired")

    def test_transaction_lease_keepalive(self):
        """transaction_lease(..., keepalive=True), TTL 1 s: the transaction
        runs 3 s, its write carries the generation and COMMIT succeeds."""
        row_id = new_row(self.conn)
        res = resource_name(self)
        with transaction_lease(self.conn, res, ttl_ms=1000, keepalive=True) as lease:
            self.conn.execute("SELECT pg_sleep(3)")
            self.assertEqual(redis("GET", lease_key(res)), lease.identity)
            self.conn.execute("UPDATE account SET owner = 'long tx' WHERE id = %s", (row_id,))
        self.assertEqual(read_row(self.conn, row_id), ("long tx", 100, lease.generation))
        self.assertEqual(redis("EXISTS", lease_key(res)), "0", "released at commit")

    def test_keepalive_needs_a_session_or_transaction_scope(self):
        """keepalive on an explicit lease (which is why acquire() has no
        keepalive argument): ERROR 22023, nothing written to Redis."""
        res = resource_name(self)
        with self.assertRaises(psycopg.errors.InvalidParameterValue) as cm:
            self.conn.execute("SELECT * FROM lease_fence.acquire(%s, 1000, scope => 'explicit', "
                              "keepalive => true)", (res,))
        self.assertEqual(cm.exception.sqlstate, "22023")
        self.assertIn("session- or transaction-scoped", str(cm.exception))
        self.assertEqual(redis("EXISTS", lease_key(res)), "0")

    def test_app_role_cannot_switch_the_fence_off(self):
        """the app role does not own the table (docs/security.md, "Privileges"), so it
        cannot disable the trigger that fences it."""
        with self.assertRaises(psycopg.errors.InsufficientPrivilege):
            self.conn.execute("ALTER TABLE account DISABLE TRIGGER zz_lease_fence")


# -------------------------------------------------------------- the package itself

def test_two_holders_stale_write_raises_stale_generation():
    """acceptance (sync psycopg): A holds a resource, stalls past its TTL; B
    acquires it and writes. A's fenced write raises
    lease_fence.StaleGeneration and writes nothing; B's write stands."""
    a_conn, b_conn, check = connect(), connect(), connect()
    try:
        row_id = new_row(check)
        res = resource_name("two_holders_sync")
        a = acquire(a_conn, res, ttl_ms=300)
        time.sleep(0.6)
        b = acquire(b_conn, res, ttl_ms=10000)
        assert b.generation > a.generation
        with fenced(b_conn, b):
            b_conn.execute("UPDATE account SET owner = 'B' WHERE id = %s", (row_id,))
        with pytest.raises(StaleGeneration) as info:
            with fenced(a_conn, a):
                a_conn.execute("UPDATE account SET owner = 'A late' WHERE id = %s", (row_id,))
        assert info.value.sqlstate == "LF001"
        assert info.value.resource == res
        assert read_row(check, row_id) == ("B", 100, b.generation)
        assert release(b_conn, b) == "released"
    finally:
        for c in (a_conn, b_conn, check):
            c.close()


def _round_trips(trace_text):
    """The frontend messages of a libpq trace that end a round trip (Sync,
    simple Query), each with the statements sent before it."""
    trips, pending = [], []
    for line in trace_text.splitlines():
        parts = line.split("\t")
        if len(parts) < 3 or parts[0] != "F":
            continue
        if parts[2] == "Parse":
            pending.append(parts[3] if len(parts) > 3 else "")
        elif parts[2] in ("Sync", "Query"):
            trips.append(pending + ([parts[3]] if parts[2] == "Query" else []))
            pending = []
    return trips


@pytest.mark.skipif(not psycopg.Pipeline.is_supported(), reason="libpq without pipeline mode")
@pytest.mark.parametrize("autocommit", [True, False])
def test_fenced_sends_begin_and_set_generation_in_one_round_trip(tmp_path, autocommit):
    """with psycopg 3 in autocommit mode (the recommended one), fenced() sends
    BEGIN and set_generation(g, resource) in one round trip (one Sync), then
    the block's UPDATE, then COMMIT: libpq's protocol trace shows it. With
    autocommit off psycopg syncs its own BEGIN first: at most one extra
    round trip (two before the block)."""
    conn = psycopg.connect(host=PGHOST, port=PGPORT, dbname=DATABASE, user=APP_USER,
                           autocommit=autocommit)
    check = connect()
    try:
        row_id = new_row(check)
        res = resource_name(f"one_round_trip_{autocommit}")
        lease = acquire(conn, res, ttl_ms=10000)
        trace = tmp_path / "trace.txt"
        with open(trace, "w") as f:
            conn.pgconn.trace(f.fileno())
            conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
            with fenced(conn, lease):
                conn.execute("UPDATE account SET owner = 'rt' WHERE id = %s", (row_id,))
            conn.pgconn.untrace()
        trips = _round_trips(trace.read_text())
        sent = [" ".join(t) for t in trips]
        if autocommit:
            assert len(trips) == 3, sent
            assert "BEGIN" in sent[0] and "set_generation" in sent[0], sent
        else:
            assert len(trips) == 4, sent
            assert "BEGIN" in sent[0] and "set_generation" in sent[1], sent
        assert "UPDATE account" in sent[-2] and "COMMIT" in sent[-1], sent
        assert read_row(check, row_id) == ("rt", 100, lease.generation)
        assert release(conn, lease) == "released"
    finally:
        conn.close()
        check.close()


def _statements(trace_text):
    """What a libpq trace shows the frontend sent: (statements executed,
    round trips, the statements' texts). A statement is an Execute (its
    Parse text, when not prepared) or a simple Query; a Sync or a Query ends
    a round trip."""
    executed, trips, texts = 0, 0, []
    for line in trace_text.splitlines():
        parts = line.split("\t")
        if len(parts) < 3 or parts[0] != "F":
            continue
        if parts[2] == "Parse":
            texts.append(parts[3] if len(parts) > 3 else "")
        elif parts[2] == "Execute":
            executed += 1
        elif parts[2] == "Query":
            executed += 1
            trips += 1
            texts.append(parts[3] if len(parts) > 3 else "")
        elif parts[2] == "Sync":
            trips += 1
    return executed, trips, texts


@pytest.mark.parametrize("autocommit", [True, False])
def test_acquire_renew_release_send_one_statement(tmp_path, autocommit):
    """libpq's protocol trace: under autocommit acquire, try_acquire, renew
    and release each send exactly one statement (one round trip), no BEGIN
    or COMMIT around it. With autocommit off each runs in a transaction of
    its own (BEGIN, it, COMMIT), so that the connection is idle after it."""
    conn = psycopg.connect(host=PGHOST, port=PGPORT, dbname=DATABASE, user=APP_USER,
                           autocommit=autocommit, prepare_threshold=None)
    check = connect()
    try:
        res = resource_name(f"one_statement_{autocommit}")
        out = {}

        def traced(name, fn):
            path = tmp_path / f"{name}.txt"
            with open(path, "w") as f:
                conn.pgconn.trace(f.fileno())
                conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
                try:
                    out[name] = fn()
                finally:
                    conn.pgconn.untrace()
            return _statements(path.read_text())

        def one(name, fn, function):
            executed, trips, texts = traced(name, fn)
            want = [f"lease_fence.{function}("]
            if not autocommit:
                want = ["BEGIN"] + want + ["COMMIT"]
            assert (executed, trips) == (len(want), len(want)), (name, texts)
            assert all(w in t for w, t in zip(want, texts)), (name, texts)
            if autocommit:
                assert not any("BEGIN" in t or "COMMIT" in t for t in texts), (name, texts)
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE, name

        one("acquire", lambda: acquire(conn, res, ttl_ms=10000), "acquire")
        one("renew", lambda: renew(conn, out["acquire"], ttl_ms=10000), "renew")
        one("release", lambda: release(conn, out["acquire"]), "release")
        holder = acquire(check, res, ttl_ms=10000)
        one("busy", lambda: try_acquire(conn, res, ttl_ms=10000), "acquire")
        assert out["busy"] is None
        assert release(check, holder) == "released"
        one("try_acquire", lambda: try_acquire(conn, res, ttl_ms=10000), "acquire")
        assert out["try_acquire"].acquired is True
        one("release2", lambda: release(conn, out["try_acquire"]), "release")
        assert out["release2"] == "released"
    finally:
        conn.close()
        check.close()


def test_fenced_refuses_a_connection_in_a_transaction():
    """fenced() runs its own transaction: inside one the caller opened it
    raises RuntimeError and runs nothing."""
    conn = psycopg.connect(host=PGHOST, port=PGPORT, dbname=DATABASE, user=APP_USER)
    try:
        conn.execute("SELECT 1")                     # autocommit off: now in a transaction
        with pytest.raises(RuntimeError):
            with fenced(conn, 1):
                pytest.fail("block must not run")
        conn.rollback()
    finally:
        conn.close()


def test_fenced_rejects_bad_generations():
    """a generation is a non-negative int: bool, negative, str are refused
    before anything is sent; a resource is a str."""
    conn = connect()
    try:
        for bad in (True, -1, "7", None):
            with pytest.raises(ValueError):
                with fenced(conn, bad):
                    pytest.fail("block must not run")
        with pytest.raises(TypeError):
            with fenced(conn, 1, resource=5):
                pytest.fail("block must not run")
    finally:
        conn.close()


def test_fenced_rolls_back_when_the_block_raises():
    """the block's exception propagates unchanged, its write is rolled back,
    and the connection is idle again."""
    conn = connect()
    try:
        row_id = new_row(conn)
        gen = conn.execute("SELECT lease_fence.next_generation()").fetchone()[0]
        with pytest.raises(ZeroDivisionError):
            with fenced(conn, gen):
                conn.execute("UPDATE account SET owner = 'gone' WHERE id = %s", (row_id,))
                1 / 0
        assert read_row(conn, row_id) == ("nobody", 100, 0)
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    finally:
        conn.close()


def test_installed_package_is_imported():
    """ci.sh installs the wheel into a venv: the tests must import that copy,
    not a source tree (checked when LF_EXPECT_INSTALLED is set)."""
    import os
    import lease_fence
    assert lease_fence.__version__ == "1.5.0"
    if os.environ.get("LF_EXPECT_INSTALLED"):
        assert "site-packages" in lease_fence.__file__, lease_fence.__file__
        assert os.path.exists(os.path.join(os.path.dirname(lease_fence.__file__), "py.typed"))

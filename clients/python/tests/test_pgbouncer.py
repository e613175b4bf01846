"""lease_fence behind PgBouncer in transaction-pooling mode.

With the harness's variables (lf_testlib) plus LF_BOUNCER_HOST / LF_BOUNCER_PORT:
a PgBouncer with ``pool_mode = transaction`` and ``default_pool_size = 1``, so
clients that take turns share one server connection (each test checks that
first, by pg_backend_pid()).

In transaction pooling a client owns a server connection only for the length
of one transaction. Whatever lives in the *server session* — a session-level
setting, a session-scoped lease — is not the client's:

- explicit scope + a transaction-scoped generation works (``fenced``:
  ``set_generation(g, resource)``, or SET LOCAL): identity and generation
  live in the application, and the setting ends with the transaction;
- transaction scope works: the lease lives and dies inside one transaction;
- a session-level generation (``set_generation(g, false)`` or plain ``SET``)
  leaks into the next client's transaction on that server connection;
- a session-scoped lease is held by a server backend that outlives the client:
  it is not released when the client disconnects, and the next client sees
  (and can release) it.
"""

import time
import unittest

from lease_fence import (
    Lease, LeaseBusy, LeaseLostAtCommit, MissingGeneration, StaleGeneration, acquire,
    fence_errors, fenced, release, renew, transaction_lease)
from lf_testlib import (BOUNCER_HOST, BOUNCER_PORT, connect, lease_key, new_row, read_row,
                        redis, resource_name)


def via_bouncer():
    """A client connection through PgBouncer. psycopg 3 prepares a statement
    after 5 executions; PgBouncer (before 1.21) cannot route prepared
    statements in transaction pooling, so switch that off."""
    return connect(host=BOUNCER_HOST, port=BOUNCER_PORT, prepare_threshold=None)


def one(conn, sql, params=None):
    return conn.execute(sql, params).fetchone()[0]


@unittest.skipUnless(BOUNCER_HOST, "LF_BOUNCER_HOST is not set")
class PgBouncerTests(unittest.TestCase):

    def setUp(self):
        self.direct = connect()          # straight to PostgreSQL, to read rows back
        self.addCleanup(self.direct.close)

    def clients(self, n):
        conns = [via_bouncer() for _ in range(n)]
        for c in conns:
            self.addCleanup(c.close)
        pids = {one(c, "SELECT pg_backend_pid()") for c in conns}
        self.assertEqual(len(pids), 1, "precondition: the clients share one server connection")
        return conns

    def test_explicit_scope_with_set_local_works(self):
        """explicit scope: acquire on one client connection, fenced writes
        (set_generation, transaction-scoped like SET LOCAL) on another, renew,
        release from a third — the lease lives in the application. A stale
        holder is still rejected (LF001), and the transaction's generation
        leaves nothing behind on the shared server connection."""
        a1, a2, b = self.clients(3)
        row_id = new_row(self.direct)
        res = resource_name(self)

        lease_a = acquire(a1, res, ttl_ms=10000)
        with self.assertRaises(LeaseBusy):
            acquire(b, res, ttl_ms=10000)
        with fenced(a2, lease_a.generation):
            a2.execute("UPDATE account SET owner = 'A' WHERE id = %s", (row_id,))
        self.assertIsNone(one(b, "SELECT lease_fence.current_generation()"),
                          "the generation ended with A's transaction")
        self.assertGreater(renew(b, lease_a, ttl_ms=10000), 0)
        self.assertEqual(release(a2, lease_a), "released")

        lease_b = acquire(b, res, ttl_ms=10000)
        with fenced(b, lease_b.generation):
            b.execute("UPDATE account SET owner = 'B' WHERE id = %s", (row_id,))
        with self.assertRaises(StaleGeneration) as cm:
            with fenced(a1, lease_a.generation):
                a1.execute("UPDATE account SET owner = 'A late' WHERE id = %s", (row_id,))
        self.assertEqual((cm.exception.table, cm.exception.column), ("account", "fence"))
        self.assertEqual(release(a1, lease_b), "released")
        self.assertEqual(read_row(self.direct, row_id), ("B", 100, lease_b.generation))

    def test_transaction_scope_works(self):
        """transaction scope lives inside one transaction, so it fits
        transaction pooling: commit keeps the write and releases the lease;
        LF010 still fires when the key is gone before COMMIT."""
        (a,) = self.clients(1)
        row_id = new_row(self.direct)
        res = resource_name(self)
        with transaction_lease(a, res, ttl_ms=10000, min_validity_ms=500) as lease:
            a.execute("UPDATE account SET owner = 'tx' WHERE id = %s", (row_id,))
        self.assertEqual(read_row(self.direct, row_id), ("tx", 100, lease.generation))
        self.assertEqual(redis("EXISTS", lease_key(res)), "0")
        with self.assertRaises(LeaseLostAtCommit):
            with transaction_lease(a, res, ttl_ms=2000):
                a.execute("UPDATE account SET owner = 'lost' WHERE id = %s", (row_id,))
                redis("DEL", lease_key(res))
                time.sleep(1.1)                   # past ttl/2: COMMIT asks Redis
        self.assertEqual(read_row(self.direct, row_id), ("tx", 100, lease.generation))

    def test_session_level_generation_leaks_into_another_client(self):
        """UNSAFE: client A sets a session-level generation; client B, which
        holds no lease and set nothing, runs its next transaction on the same
        server connection and writes under A's generation — the lenient fence
        stamps B's row with it, and the strict table lets B's unfenced INSERT
        through. A transaction-scoped generation (the contrast) leaves nothing
        behind."""
        a, b = self.clients(2)
        row_id = new_row(self.direct)
        gen = one(a, "SELECT lease_fence.next_generation()")
        a.execute("SELECT lease_fence.set_generation(%s, false)", (gen,))   # session level
        try:
            with b.transaction():
                self.assertEqual(one(b, "SELECT lease_fence.current_generation()"), gen)
                b.execute("UPDATE account SET owner = 'B, no lease' WHERE id = %s", (row_id,))
                b.execute("INSERT INTO ledger (note) VALUES ('B, no generation of its own')")
        finally:
            b.execute("RESET lease_fence.generation")
        self.assertEqual(read_row(self.direct, row_id), ("B, no lease", 100, gen))
        self.assertEqual(one(self.direct, "SELECT count(*) FROM ledger WHERE note = %s",
                             ("B, no generation of its own",)), 1)

        # the contrast: with the leak cleaned up, strict mode refuses B again,
        # and A's fenced transaction does not reach B
        with self.assertRaises(MissingGeneration):
            with fence_errors(), b.transaction():
                b.execute("INSERT INTO ledger (note) VALUES ('B again')")
        with fenced(a, gen):
            pass
        self.assertIsNone(one(b, "SELECT lease_fence.current_generation()"))

    def test_session_scoped_lease_outlives_its_client(self):
        """UNSAFE: a session-scoped lease is released when the *backend* exits.
        Directly, closing the connection ends the backend and the lease is
        released. Through PgBouncer the client disconnects but the server
        connection lives on: the lease stays held in Redis, every acquire is
        busy, and the next client on that server connection sees it in
        lease_fence.leases as its own — and can release it."""
        sql = ("SELECT acquired, status, resource, identity, generation, validity_ms "
               "FROM lease_fence.acquire(%s, 30000, 0, 'session')")

        # directly: released at backend exit
        res_direct = resource_name(self, ":direct")
        d = connect()
        row = d.execute(sql, (res_direct,)).fetchone()
        self.assertEqual(row[1], "acquired")
        d.close()
        for _ in range(100):
            if redis("EXISTS", lease_key(res_direct)) == "0":
                break
            time.sleep(0.05)
        self.assertEqual(redis("EXISTS", lease_key(res_direct)), "0",
                         "a direct session's lease is released when it disconnects")

        # through PgBouncer: the client goes, the lease stays
        a, = self.clients(1)
        res = resource_name(self)
        lease = Lease(*a.execute(sql, (res,)).fetchone())
        self.assertEqual(lease.status, "acquired")
        a.close()
        time.sleep(0.5)
        self.assertEqual(redis("GET", lease_key(res)), lease.identity,
                         "still held after the client disconnected")
        (b,) = self.clients(1)
        with self.assertRaises(LeaseBusy):
            acquire(b, res, ttl_ms=10000)
        seen = b.execute("SELECT identity, scope, state FROM lease_fence.leases "
                         "WHERE resource = %s", (res,)).fetchall()
        self.assertEqual(seen, [(lease.identity, "session", "held")],
                         "client B's 'session' holds client A's lease")
        self.assertEqual(release(b, lease), "released")
        self.assertEqual(redis("EXISTS", lease_key(res)), "0")

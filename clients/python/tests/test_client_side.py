"""lease_fence.client_side: the lease taken by the application in Redis (redis-py),
generations drawn from the database (the portable edition), writes fenced as in
the C mode.

Needs, besides lf_testlib's variables, LF_PORTABLE_PGPORT / LF_PORTABLE_DB (the
portable edition's server and database, table ``account`` protected) and
LF_SRC (the repository, for its scripts/*.lua). Without them the tests skip,
except under ci.sh (LF_EXPECT_INSTALLED=1), where they fail.
"""

import hashlib
import os
import re
import time
import unittest
import uuid

import psycopg
import pytest
import redis as redis_py
from redis.asyncio import Redis as AsyncRedis

from lease_fence import (DataCorrupted, Lease, LeaseBusy, LeaseDenied, LeaseLost, LeaseUnavailable,
                         LeaseUnknown, ReleaseStatus, StaleGeneration, fenced)
from lease_fence import acquire as c_acquire
from lease_fence import release as c_release
from lease_fence import try_acquire as c_try_acquire
from lease_fence.client_side import (SCRIPTS, AsyncClientSideLeases, ClientSideLease, ClientSideLeases,
                                     generation_key, lease_key)
from lf_testlib import (DATABASE, PGHOST, PGPORT, PORTABLE_PORT, REDIS_SOCK, connect, new_row,
                        portable_connect, read_row, redis, resource_name, wait_for_redis,
                        wait_until)

EXPECT = bool(os.environ.get("LF_EXPECT_INSTALLED"))
SRC = os.environ.get("LF_SRC") or os.path.normpath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))

# The unknown test: Redis stalls (CLIENT PAUSE) longer than a request may take.
SOCKET_TIMEOUT_S = 0.15
CLEANUP_TIMEOUT_MS = 150
PAUSE_MS = 3000

IDENTITY = re.compile(r"^[0-9a-f]{32}$")


def require_environment(test):
    """Skip without the portable server / Redis, but fail under ci.sh."""
    missing = [name for name, value in (("LF_PORTABLE_PGPORT", PORTABLE_PORT),
                                        ("LF_REDIS_SOCK", REDIS_SOCK)) if not value]
    if missing:
        msg = f"{', '.join(missing)} not set"
        if EXPECT:
            test.fail(msg + " (ci.sh runs every test: the harness must set it)")
        test.skipTest(msg)


def redis_client(sock=None, timeout=SOCKET_TIMEOUT_S * 20):
    return redis_py.Redis(unix_socket_path=sock or REDIS_SOCK, socket_timeout=timeout,
                          socket_connect_timeout=timeout)


def highest_issued(conn):
    return conn.execute("SELECT lease_fence.highest_issued()").fetchone()[0]


def c_key_prefix():
    """The C edition's lease_fence.key_prefix (a superuser-only setting: read as postgres)."""
    with psycopg.connect(host=PGHOST, port=PGPORT, dbname=DATABASE, user="postgres",
                         autocommit=True) as su:
        return su.execute("SHOW lease_fence.key_prefix").fetchone()[0]


class ClientSideTests(unittest.TestCase):

    def setUp(self):
        require_environment(self)
        self.conn = portable_connect()
        self.addCleanup(self.conn.close)
        self.client = redis_client()
        self.addCleanup(self.client.close)
        self.leases = ClientSideLeases(self.client)

    def key(self, res):
        return lease_key(res)

    # ------------------------------------------------------------ the package

    def test_shipped_scripts_are_the_repositorys(self):
        """The package carries scripts/*.lua byte for byte: same SHA1 as the
        repository's files (what EVALSHA names them by)."""
        if EXPECT:
            self.assertTrue(os.environ.get("LF_SRC"), "ci.sh must pass LF_SRC")
        self.assertEqual(sorted(SCRIPTS), ["acquire", "check", "release", "renew"])
        for name, script in SCRIPTS.items():
            with open(os.path.join(SRC, "scripts", name + ".lua"), "rb") as f:
                text = f.read()
            self.assertEqual(script.sha1, hashlib.sha1(text).hexdigest(), name)
            self.assertEqual(script.text, text, name)
        # and Redis names them so
        self.assertEqual(self.client.script_load(SCRIPTS["acquire"].text),
                         SCRIPTS["acquire"].sha1)
        if EXPECT:
            import lease_fence.client_side as cs
            self.assertIn("site-packages", cs.__file__)

    def test_keys_are_the_c_librarys(self):
        """<prefix>{<resource>}[:gen]; a resource starting with '}' in hex."""
        self.assertEqual(lease_key("a:1"), "lease_fence:{a:1}")
        self.assertEqual(generation_key("a:1", "p:"), "p:{a:1}:gen")
        self.assertEqual(lease_key("}é", "p:"), "p:{7dc3a9}#lease")
        self.assertEqual(generation_key("}é", "p:"), "p:{7dc3a9}#gen")

    def test_sentinel_managed_client_refused(self):
        """A Sentinel.master_for() client (sync or asyncio) is refused with a
        TypeError naming Sentinel, before any request: it could answer from a
        demoted master after a failover. A Cluster client is not a redis.Redis."""
        import redis.asyncio.sentinel
        import redis.sentinel
        sync = redis.sentinel.Sentinel([("127.0.0.1", 1)]).master_for("mymaster", socket_timeout=0.5)
        with self.assertRaisesRegex(TypeError, r"Sentinel-managed client .* not supported"):
            ClientSideLeases(sync)
        aio = redis.asyncio.sentinel.Sentinel([("127.0.0.1", 1)]).master_for("mymaster")
        with self.assertRaisesRegex(TypeError, r"Sentinel-managed client .* not supported"):
            AsyncClientSideLeases(aio)
        with self.assertRaisesRegex(TypeError, r"Redis Cluster client is not supported"):
            ClientSideLeases(object())
        # a plain client of one server is still taken
        ClientSideLeases(redis_py.Redis(unix_socket_path=REDIS_SOCK))

    def test_argument_errors_before_any_side_effect(self):
        """Bad arguments raise ValueError / TypeError; nothing drawn, nothing in Redis."""
        res = resource_name(self)
        before = highest_issued(self.conn)
        L = self.leases
        with self.assertRaises(TypeError):
            ClientSideLeases(object())
        with self.assertRaises(TypeError):
            ClientSideLeases(AsyncRedis(unix_socket_path=REDIS_SOCK))
        with self.assertRaises(ValueError):
            ClientSideLeases(self.client, key_prefix="bad{")
        with self.assertRaises(ValueError):
            ClientSideLeases(self.client, key_prefix="bad}")
        with self.assertRaises(TypeError):
            ClientSideLeases(self.client, key_prefix=b"bytes:")
        with self.assertRaises(ValueError):
            ClientSideLeases(self.client, gen_key_ttl_s=-1)
        with self.assertRaises(ValueError):
            ClientSideLeases(self.client, cleanup_timeout_ms=0)
        cases = [
            (ValueError, dict(resource="", ttl_ms=1000)),
            (TypeError, dict(resource=None, ttl_ms=1000)),
            (ValueError, dict(resource="x" * 1025, ttl_ms=1000)),
            (ValueError, dict(resource="a\x00b", ttl_ms=1000)),
            (ValueError, dict(resource=res, ttl_ms=0)),
            (ValueError, dict(resource=res, ttl_ms=-5)),
            (TypeError, dict(resource=res, ttl_ms="1000")),
            (TypeError, dict(resource=res, ttl_ms=True)),
            (ValueError, dict(resource=res, ttl_ms=1000 * 60 * 60 * 24 * 365 * 101)),
            (ValueError, dict(resource=res, ttl_ms=1000, min_validity_ms=1001)),
            (ValueError, dict(resource=res, ttl_ms=1000, min_validity_ms=-1)),
            (ValueError, dict(resource=res, ttl_ms=1000, wait_ms=-1)),
        ]
        for exc, kw in cases:
            with self.subTest(kw=kw):
                with self.assertRaises(exc):
                    L.try_acquire(self.conn, **kw)
                with self.assertRaises(exc):
                    L.acquire(self.conn, **kw)
        busy = ClientSideLease(False, "busy", res, None, None, None)
        with self.assertRaises(ValueError):
            L.release(self.conn, busy)
        with self.assertRaises(ValueError):
            L.renew(self.conn, busy, 1000)
        with self.assertRaises(TypeError):
            L.release(self.conn, "not a lease")
        held = ClientSideLease(True, "acquired", res, "0" * 32, 1, 1000)
        with self.assertRaises(ValueError):
            L.renew(self.conn, held, 0)
        with self.assertRaises(ValueError):
            L.renew(self.conn, held, 1000, min_validity_ms=2000)
        self.assertEqual(highest_issued(self.conn), before, "nothing drawn")
        self.assertEqual(redis("EXISTS", self.key(res), lease_key(res) + ":gen"), "0")

    def test_fair_refused_before_any_side_effect(self):
        """The client-side mode has no fair waiting (acquire.lua has no queue):
        fair=True is a ValueError and a fair that is not a bool a TypeError,
        raised before a generation is drawn or Redis is asked (a client of a
        socket that does not exist would answer LeaseUnavailable); nothing in
        Redis. fair=False takes the lease as before."""
        res = resource_name(self)
        before = highest_issued(self.conn)
        nowhere = ClientSideLeases(redis_client(sock=REDIS_SOCK + ".none"))
        for L in (self.leases, nowhere):
            for verb in (L.acquire, L.try_acquire):
                for wait_ms in (0, 1000):
                    with self.assertRaisesRegex(ValueError, r"^fair=True is not offered by the "
                                                            r"client-side mode"):
                        verb(self.conn, res, ttl_ms=1000, wait_ms=wait_ms, fair=True)
                for bad in ("yes", 1, None):
                    with self.assertRaisesRegex(TypeError, r"^fair is a bool"):
                        verb(self.conn, res, ttl_ms=1000, fair=bad)
        self.assertEqual(highest_issued(self.conn), before, "nothing drawn")
        self.assertEqual(redis("EXISTS", lease_key(res), generation_key(res)), "0")
        with self.assertRaises(LeaseUnavailable):   # what a request there would have answered
            nowhere.acquire(self.conn, res, ttl_ms=1000, fair=False)
        lease = self.leases.acquire(self.conn, res, ttl_ms=1000, fair=False)
        self.assertTrue(lease.acquired)
        self.assertEqual(self.leases.release(self.conn, lease), "released")

    # ------------------------------------------------------------ two holders

    def test_two_holders_stale_writer_refused(self):
        """A's lease expires; B acquires with a higher generation and writes;
        A's write is refused (StaleGeneration, LF001), B's stands; A's renew
        is LeaseLost, A's release leaves B's lease alone."""
        row_id = new_row(self.conn)
        res = resource_name(self)
        conn_b = portable_connect()
        self.addCleanup(conn_b.close)

        # a TTL long enough to look at the keys on a busy machine; then the
        # key is made to expire now, as the TTL would have
        a = self.leases.acquire(self.conn, res, ttl_ms=30000)
        self.assertIsInstance(a, Lease)
        self.assertEqual((a.acquired, a.status), (True, "acquired"))
        self.assertRegex(a.identity, IDENTITY)
        self.assertEqual(redis("GET", self.key(res)), a.identity)
        self.assertEqual(redis("GET", generation_key(res)), str(a.generation))
        redis("PEXPIRE", self.key(res), "1")
        wait_until("A's lease to expire", lambda: redis("EXISTS", self.key(res)) == "0")

        b = self.leases.acquire(conn_b, res, ttl_ms=30000)
        self.addCleanup(self.leases.release, None, b)
        self.assertGreater(b.generation, a.generation)
        self.assertNotEqual(b.identity, a.identity)
        with fenced(conn_b, b):
            conn_b.execute("UPDATE account SET owner = 'B', balance = balance + 1 "
                           "WHERE id = %s", (row_id,))

        with self.assertRaises(StaleGeneration) as cm:
            with fenced(self.conn, a):
                self.conn.execute("UPDATE account SET owner = 'A' WHERE id = %s", (row_id,))
        self.assertEqual(cm.exception.sqlstate, "LF001")
        with self.assertRaises(StaleGeneration):          # the row itself, without the resource
            with fenced(self.conn, a.generation):
                self.conn.execute("UPDATE account SET owner = 'A' WHERE id = %s", (row_id,))
        self.assertEqual(read_row(self.conn, row_id), ("B", 101, b.generation))

        with self.assertRaises(LeaseLost):
            self.leases.renew(self.conn, a, ttl_ms=30000)
        self.assertEqual(self.leases.release(self.conn, a), "not_held")
        self.assertEqual(redis("GET", self.key(res)), b.identity)

    # ------------------------------------------------------------ unknown

    def test_unknown_outcome_stays_unknown(self):
        """Redis paused: the acquire times out after sending → unknown
        (LeaseUnknown, not a LeaseDenied, from acquire and try_acquire), the
        conditional cleanup is bounded and unconfirmed, and after the pause
        the key is absent or holds exactly that identity."""
        res = resource_name(self)
        # one client each, connected before the pause: a connection made
        # during it never gets to send the script (redis-py 5 and later
        # send CLIENT SETINFO when they connect), which is "unavailable"
        short = redis_client(timeout=SOCKET_TIMEOUT_S)
        self.addCleanup(short.close)
        short2 = redis_client(timeout=SOCKET_TIMEOUT_S)
        self.addCleanup(short2.close)
        short.ping()
        short2.ping()
        L = ClientSideLeases(short, cleanup_timeout_ms=CLEANUP_TIMEOUT_MS)
        L2 = ClientSideLeases(short2, cleanup_timeout_ms=CLEANUP_TIMEOUT_MS)
        redis("CLIENT", "PAUSE", PAUSE_MS, "ALL")
        try:
            with self.assertRaises(LeaseUnknown) as cm:
                L.acquire(self.conn, res, ttl_ms=60000)
            with self.assertRaises(LeaseUnknown) as cm2:
                L2.try_acquire(self.conn, res + "b", ttl_ms=60000)
            lease = cm2.exception.lease
        finally:
            wait_for_redis()                     # PING waits out the pause
        e = cm.exception
        self.assertNotIsInstance(e, LeaseDenied)
        self.assertEqual(e.status, "unknown")
        self.assertIsInstance(e.lease, ClientSideLease)
        self.assertIsNone(e.lease.acquired)
        self.assertRegex(e.lease.identity, IDENTITY)
        self.assertIsNotNone(e.lease.generation)
        self.assertTrue(e.reason)
        self.assertEqual(e.lease.cleanup, "unconfirmed")
        self.assertEqual((lease.acquired, lease.status, lease.cleanup),
                         (None, "unknown", "unconfirmed"))
        for res_, ident in ((res, e.lease.identity), (res + "b", lease.identity)):
            self.assertIn(redis("GET", self.key(res_)), ("", ident))
        # its conditional release is safe; then the resource is free again
        self.assertIn(L.release(self.conn, e.lease), ("released", "not_held"))
        self.assertIn(L.release(self.conn, lease), ("released", "not_held"))
        again = self.leases.acquire(self.conn, res, ttl_ms=5000)
        self.assertEqual(self.leases.release(self.conn, again), "released")

    def test_renew_and_release_unknown_under_pause(self):
        """renew / release that time out after sending: LeaseUnknown / 'unknown'."""
        res = resource_name(self)
        lease = self.leases.acquire(self.conn, res, ttl_ms=60000)
        self.addCleanup(self.leases.release, None, lease)
        # one client each, connected before the pause (see above)
        short = redis_client(timeout=SOCKET_TIMEOUT_S)
        self.addCleanup(short.close)
        short2 = redis_client(timeout=SOCKET_TIMEOUT_S)
        self.addCleanup(short2.close)
        L = ClientSideLeases(short, cleanup_timeout_ms=CLEANUP_TIMEOUT_MS)
        L2 = ClientSideLeases(short2, cleanup_timeout_ms=CLEANUP_TIMEOUT_MS)
        short.ping()
        short2.ping()
        redis("CLIENT", "PAUSE", PAUSE_MS, "ALL")
        try:
            with self.assertRaises(LeaseUnknown) as cm:
                L.renew(self.conn, lease, ttl_ms=60000)
            status = L2.release(self.conn, lease)
        finally:
            wait_for_redis()
        self.assertNotIsInstance(cm.exception, LeaseDenied)
        self.assertIsInstance(status, ReleaseStatus)
        self.assertEqual(status, "unknown")
        self.assertTrue(status.reason)
        self.assertIn(redis("GET", self.key(res)), ("", lease.identity))

    # ------------------------------------------------------------ stale

    def test_stale_healed_within_bounds(self):
        """A :gen above the portable sequence (within 2^24): the acquire heals
        with next_generation(above) and gets a generation above it."""
        res = resource_name(self)
        stored = highest_issued(self.conn) + 1000
        redis("SET", generation_key(res), stored)
        lease = self.leases.acquire(self.conn, res, ttl_ms=10000)
        self.addCleanup(self.leases.release, None, lease)
        self.assertGreater(lease.generation, stored)
        self.assertEqual(redis("GET", generation_key(res)), str(lease.generation))
        self.assertEqual(redis("GET", self.key(res)), lease.identity)
        # the healed generation fences writes (it was issued by this database)
        row_id = new_row(self.conn)
        with fenced(self.conn, lease):
            self.conn.execute("UPDATE account SET owner = 'healed' WHERE id = %s", (row_id,))
        self.assertEqual(read_row(self.conn, row_id), ("healed", 100, lease.generation))

    def test_stale_too_far_surfaces_xx001(self):
        """A :gen 2^40 above: the database refuses the heal (XX001), it
        surfaces as the driver's error; nothing acquired; the heal moved
        nothing (the sequence has only the one draw of the first attempt)."""
        res = resource_name(self)
        before = highest_issued(self.conn)
        far = before + 2 ** 40
        redis("SET", generation_key(res), far)
        with self.assertRaises(psycopg.Error) as cm:
            self.leases.acquire(self.conn, res, ttl_ms=10000)
        self.assertEqual(cm.exception.sqlstate, "XX001")
        self.assertEqual(redis("EXISTS", self.key(res)), "0")
        self.assertEqual(redis("GET", generation_key(res)), str(far))
        self.assertEqual(highest_issued(self.conn), before + 1)
        with self.assertRaises(psycopg.Error):
            self.leases.try_acquire(self.conn, res, ttl_ms=10000)

    def test_heal_on_a_database_without_next_generation_above_surfaces(self):
        """The C edition's database has no next_generation(bigint): a stale
        answer's heal fails with its error (42883), not hidden."""
        res = resource_name(self)
        appdb = connect()
        self.addCleanup(appdb.close)
        redis("SET", generation_key(res), 2 ** 50)
        with self.assertRaises(psycopg.Error) as cm:
            self.leases.try_acquire(appdb, res, ttl_ms=10000)
        self.assertEqual(cm.exception.sqlstate, "42883")
        self.assertEqual(redis("EXISTS", self.key(res)), "0")

    def test_stale_without_retry_is_denied_but_healed(self):
        """retry_stale=False: LeaseDenied('stale'), nothing held; the heal
        moved the sequence past the stored generation, so the next acquire works."""
        res = resource_name(self)
        stored = highest_issued(self.conn) + 500
        redis("SET", generation_key(res), stored)
        with self.assertRaises(LeaseDenied) as cm:
            self.leases.acquire(self.conn, res, ttl_ms=10000, retry_stale=False)
        self.assertEqual(cm.exception.status, "stale")
        self.assertNotIsInstance(cm.exception, (LeaseBusy, LeaseUnavailable))
        self.assertEqual(redis("EXISTS", self.key(res)), "0")
        self.assertGreater(highest_issued(self.conn), stored)
        lease = self.leases.acquire(self.conn, res, ttl_ms=10000, retry_stale=False)
        self.assertGreater(lease.generation, stored)
        self.assertEqual(self.leases.release(self.conn, lease), "released")

    def test_corrupt_generation_key_is_data_corrupted(self):
        """The generation key holds no generation: DataCorrupted (a
        RuntimeError; SQLSTATE XX001, as the C edition says it), from
        acquire and try_acquire alike; nothing held."""
        res = resource_name(self)
        redis("SET", generation_key(res), "abc")
        for call in (self.leases.acquire, self.leases.try_acquire):
            with self.assertRaises(DataCorrupted) as cm:
                call(self.conn, res, ttl_ms=10000)
            self.assertIsInstance(cm.exception, RuntimeError)
            self.assertEqual(cm.exception.sqlstate, "XX001")
            self.assertIn("does not hold a generation", str(cm.exception))
        self.assertEqual(redis("EXISTS", self.key(res)), "0")

    # ------------------------------------------------------------ busy, unavailable

    def test_busy(self):
        """A held lease: busy (try_acquire None, LeaseBusy), the holder's key untouched."""
        res = resource_name(self)
        held = self.leases.acquire(self.conn, res, ttl_ms=30000)
        self.addCleanup(self.leases.release, None, held)
        self.assertIsNone(self.leases.try_acquire(self.conn, res, ttl_ms=30000))
        with self.assertRaises(LeaseBusy) as cm:
            self.leases.acquire(self.conn, res, ttl_ms=30000)
        self.assertIsInstance(cm.exception, LeaseDenied)
        self.assertEqual(redis("GET", self.key(res)), held.identity)
        self.assertEqual(redis("GET", generation_key(res)), str(held.generation))

    def test_insufficient_validity_is_released(self):
        """Granted with less validity left than min_validity_ms (here: ttl_ms,
        which the drift allowance never leaves): insufficient_validity, a
        definite no, the grant released at once (cleanup confirmed)."""
        res = resource_name(self)
        with self.assertRaises(LeaseDenied) as tried:
            self.leases.try_acquire(self.conn, res, ttl_ms=10000, min_validity_ms=10000)
        lease = tried.exception.lease
        self.assertEqual((lease.acquired, lease.status, lease.identity, lease.cleanup),
                         (False, "insufficient_validity", None, "confirmed"))
        self.assertLess(lease.validity_ms, 10000)
        self.assertEqual(redis("EXISTS", self.key(res)), "0")
        with self.assertRaises(LeaseDenied) as cm:
            self.leases.acquire(self.conn, res, ttl_ms=10000, min_validity_ms=10000)
        self.assertEqual(cm.exception.status, "insufficient_validity")
        self.assertNotIsInstance(cm.exception, (LeaseBusy, LeaseUnavailable))
        self.assertEqual(redis("EXISTS", self.key(res)), "0")

    def test_wait_for_a_busy_lease(self):
        """wait_ms: busy at first, acquired once the holder's lease runs out."""
        res = resource_name(self)
        held = self.leases.acquire(self.conn, res, ttl_ms=400)
        waited = self.leases.acquire(self.conn, res, ttl_ms=30000, wait_ms=20000)
        self.addCleanup(self.leases.release, None, waited)
        self.assertGreater(waited.generation, held.generation)
        self.assertEqual(redis("GET", self.key(res)), waited.identity)

    def test_unavailable(self):
        """No Redis at that socket: nothing sent → unavailable (a definite no)."""
        res = resource_name(self)
        absent = redis_client(sock=REDIS_SOCK + ".absent")
        self.addCleanup(absent.close)
        L = ClientSideLeases(absent)
        with self.assertRaises(LeaseUnavailable) as tried:
            L.try_acquire(self.conn, res, ttl_ms=1000)
        lease = tried.exception.lease
        self.assertEqual((lease.acquired, lease.status, lease.identity), (False, "unavailable",
                                                                         None))
        self.assertTrue(lease.reason)
        with self.assertRaises(LeaseUnavailable) as cm:
            L.acquire(self.conn, res, ttl_ms=1000)
        self.assertIsInstance(cm.exception, LeaseDenied)
        held = ClientSideLease(True, "acquired", res, uuid.uuid4().hex, 1, 1000)
        with self.assertRaises(LeaseUnavailable):
            L.renew(self.conn, held, 1000)
        status = L.release(self.conn, held)
        self.assertEqual(status, "unavailable")
        self.assertTrue(status.reason)
        self.assertEqual(redis("EXISTS", self.key(res)), "0")

    # ------------------------------------------------------------ renew, release

    def test_renew_held_and_lost(self):
        """renew extends a held lease (renew.lua: PEXPIRE); a lost one is
        LeaseLost and never recreated."""
        res = resource_name(self)
        lease = self.leases.acquire(self.conn, res, ttl_ms=5000)
        validity = self.leases.renew(self.conn, lease, ttl_ms=60000, min_validity_ms=1000)
        self.assertGreaterEqual(validity, 1000)
        self.assertGreater(int(redis("PTTL", self.key(res))), 5000)
        redis("DEL", self.key(res))
        with self.assertRaises(LeaseLost) as cm:
            self.leases.renew(self.conn, lease, ttl_ms=60000)
        self.assertEqual(cm.exception.status, "lost")
        self.assertEqual(redis("EXISTS", self.key(res)), "0", "never recreated")
        # someone else's key: lost too, and left alone
        redis("SET", self.key(res), "f" * 32, "PX", 60000)
        with self.assertRaises(LeaseLost):
            self.leases.renew(self.conn, lease, ttl_ms=60000)
        self.assertEqual(redis("GET", self.key(res)), "f" * 32)
        redis("DEL", self.key(res))

    def test_release_released_and_not_held(self):
        """release: 'released' (the key deleted, waiters woken), then
        'not_held'; another's key is left alone."""
        res = resource_name(self)
        lease = self.leases.acquire(self.conn, res, ttl_ms=30000)
        status = self.leases.release(self.conn, lease)
        self.assertIsInstance(status, ReleaseStatus)
        self.assertEqual(status, "released")
        self.assertIsNone(status.reason)
        self.assertEqual(redis("EXISTS", self.key(res)), "0")
        self.assertEqual(self.leases.release(self.conn, lease), "not_held")
        other = self.leases.acquire(self.conn, res, ttl_ms=30000)
        self.assertEqual(self.leases.release(self.conn, lease), "not_held")
        self.assertEqual(redis("GET", self.key(res)), other.identity)
        self.assertEqual(self.leases.release(None, other), "released")

    def test_scripts_loaded_after_script_flush(self):
        """EVALSHA, then EVAL on NOSCRIPT: works on a Redis that has not seen the scripts."""
        res = resource_name(self)
        redis("SCRIPT", "FLUSH")
        lease = self.leases.acquire(self.conn, res, ttl_ms=30000)
        self.assertEqual(self.leases.release(self.conn, lease), "released")

    # ------------------------------------------------------------ interop

    def test_interop_c_holder_then_client_side(self):
        """A lease the C edition holds (appdb) makes the client-side acquire
        busy; after the C release the client side acquires with a generation
        above the one the C side granted."""
        prefix = c_key_prefix()
        L = ClientSideLeases(self.client, key_prefix=prefix)
        res = resource_name(self)
        appdb = connect()
        self.addCleanup(appdb.close)
        c_lease = c_acquire(appdb, res, ttl_ms=30000)
        self.assertEqual(redis("GET", lease_key(res, prefix)), c_lease.identity)
        self.assertIsNone(L.try_acquire(self.conn, res, ttl_ms=30000))
        with self.assertRaises(LeaseBusy):
            L.acquire(self.conn, res, ttl_ms=30000)
        self.assertEqual(c_release(appdb, c_lease), "released")
        mine = L.acquire(self.conn, res, ttl_ms=30000)
        self.addCleanup(L.release, None, mine)
        self.assertGreater(mine.generation, c_lease.generation)
        self.assertEqual(redis("GET", lease_key(res, prefix)), mine.identity)

    def test_interop_client_side_holder_then_c(self):
        """A client-side lease makes the C edition's acquire busy; after the
        client-side release the C side acquires (its stale answer healed) with
        a generation above the client side's."""
        prefix = c_key_prefix()
        L = ClientSideLeases(self.client, key_prefix=prefix)
        res = resource_name(self)
        appdb = connect()
        self.addCleanup(appdb.close)
        # the portable sequence ahead of appdb's: the C side must heal
        c_next = appdb.execute("SELECT lease_fence.next_generation()").fetchone()[0]
        self.conn.execute("SELECT lease_fence.next_generation(%s::bigint)", (c_next + 1000,))
        mine = L.acquire(self.conn, res, ttl_ms=30000)
        self.assertGreater(mine.generation, c_next + 1000)
        self.assertIsNone(c_try_acquire(appdb, res, ttl_ms=30000))
        self.assertEqual(L.release(self.conn, mine), "released")
        c_lease = c_acquire(appdb, res, ttl_ms=30000)      # stale, healed, tried again
        self.addCleanup(c_release, appdb, c_lease)
        self.assertGreater(c_lease.generation, mine.generation)
        self.assertEqual(redis("GET", lease_key(res, prefix)), c_lease.identity)
        # and the client side now sees the C side's lease as busy
        self.assertIsNone(L.try_acquire(self.conn, res, ttl_ms=1000))


def test_harness_gives_the_portable_server():
    """Under ci.sh the client-side tests must not be skipped."""
    if EXPECT:
        assert PORTABLE_PORT, "LF_PORTABLE_PGPORT is not set"
        assert REDIS_SOCK, "LF_REDIS_SOCK is not set"
    else:
        pytest.skip("not under ci.sh")

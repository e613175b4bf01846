"""lease_fence with Django: Model.save() full-row saves (ported from the
examples' test_orm.py) and the ``lease_fence.django`` helper.

Leases for the ported tests are taken on a psycopg 3 connection (an
explicit lease lives in the application, so its generation can fence any
connection); the helper's tests take them through Django.
"""

import re
import time
import unittest

import pytest

from lf_testlib import connect, read_item, resource_fence, resource_name, setup_django

setup_django()

from django.db import DatabaseError, connection, connections, models, transaction  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402

import lease_fence  # noqa: E402
from lease_fence import (FenceError, LeaseBusy, LeaseLostAtCommit, StaleGeneration,  # noqa: E402
                         TransactionRolledBack, acquire, fence_error_from, fence_errors, fenced,
                         release)
from lease_fence import django as lf_django  # noqa: E402


def expired_lease_and_successor(test, conn, load):
    """A takes a 300 ms lease and loads what it will write (``load()``), then
    stalls past its TTL; B takes the lease over. Returns (a, b, loaded)."""
    res = resource_name(test)
    a = acquire(conn, res, ttl_ms=300)
    loaded = load()
    time.sleep(0.6)                      # A stalls; its lease expires
    b = acquire(conn, res, ttl_ms=10000)
    test.addCleanup(release, conn, b)
    test.assertGreater(b.generation, a.generation)
    return a, b, loaded


# The statements Django ran, without transaction control: Django 4.2 and
# later also capture BEGIN, COMMIT and SAVEPOINT, 3.2 does not.
_CONTROL = re.compile(r"\s*(BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE SAVEPOINT)\b", re.I)


def statements(captured):
    return [q["sql"] for q in captured if not _CONTROL.match(q["sql"])]


# -------------------------------------------------------------- Django 3.2

class DjangoItem(models.Model):
    name = models.TextField(default="")
    qty = models.IntegerField(default=0)
    fence = models.BigIntegerField(default=0)

    class Meta:
        app_label = "lease_fence_example"
        managed = False                  # created (and protected) by the DBA
        db_table = "django_item"


def django_set_generation(generation, resource=None):
    """The one statement a fenced Django transaction starts with."""
    with connection.cursor() as cur:
        cur.execute("SELECT lease_fence.set_generation(%s, %s)", [generation, resource])


class DjangoTests(unittest.TestCase):
    """Model.save() writes every column back: the full-row pattern."""

    @classmethod
    def tearDownClass(cls):
        connections.close_all()

    def setUp(self):
        self.check = connect()           # psycopg 3: leases, and rows read back
        self.addCleanup(self.check.close)

    def test_two_saves_in_one_fenced_transaction_commit_the_generation(self):
        """transaction.atomic() + set_generation(g, resource), save() twice:
        each UPDATE writes the fence back as loaded (0), both pass, the
        fence commits as g and the resource is fenced at g;
        refresh_from_db() reads g."""
        item = DjangoItem.objects.create(name="new")          # no generation: lenient table
        res = resource_name(self)
        lease = acquire(self.check, res, ttl_ms=10000)
        self.addCleanup(release, self.check, lease)

        obj = DjangoItem.objects.get(pk=item.pk)
        self.assertEqual(obj.fence, 0)
        with CaptureQueriesContext(connection) as queries, transaction.atomic():
            django_set_generation(lease.generation, lease.resource)
            obj.name = "saved once"
            obj.save()
            obj.qty = 2
            obj.save()
            self.assertEqual(obj.fence, 0, "the object still holds the fence it loaded")
        updates = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("UPDATE")]
        self.assertEqual(len(updates), 2)
        for sql in updates:
            self.assertIn('"fence" = 0', sql, "save() writes the loaded fence back")

        self.assertEqual(read_item(self.check, "django_item", item.pk),
                         ("saved once", 2, lease.generation))
        self.assertEqual(resource_fence(self.check, res), lease.generation)
        obj.refresh_from_db()
        self.assertEqual(obj.fence, lease.generation)

    def test_stale_save_is_stale_generation(self):
        """A loads the object, stalls past its TTL; B takes over and saves.
        A's save() under its generation is LF001: Django raises its
        DatabaseError (the driver's error as __cause__), fence_error_from maps
        it to StaleGeneration naming django_item.fence; with the resource,
        A is refused at set_generation, before the save. Nothing of A's is
        committed; refresh_from_db() shows B's row and fence."""
        item = DjangoItem.objects.create(name="start")
        a, b, stale = expired_lease_and_successor(
            self, self.check, lambda: DjangoItem.objects.get(pk=item.pk))

        fresh = DjangoItem.objects.get(pk=item.pk)
        with transaction.atomic():
            django_set_generation(b.generation, b.resource)
            fresh.name = "B"
            fresh.save()
            fresh.save()

        stale.name = "A late"
        stale.qty = 99
        with self.assertRaises(DatabaseError) as cm:
            with transaction.atomic():
                django_set_generation(a.generation)              # rows only
                stale.save()
        self.assertEqual(type(cm.exception).__module__, "django.db.utils")
        cause = cm.exception.__cause__         # psycopg2 (Django 3.2) or psycopg 3 (Django 4.2+)
        self.assertEqual(getattr(cause, "pgcode", None) or cause.sqlstate, "LF001")
        err = fence_error_from(cm.exception)
        self.assertIsInstance(err, StaleGeneration)
        self.assertEqual((err.schema, err.table, err.column, err.resource),
                         ("public", "django_item", "fence", None))

        ran = []
        with self.assertRaises(StaleGeneration) as cm:
            with fence_errors(), transaction.atomic():
                django_set_generation(a.generation, a.resource)
                ran.append(True)
                stale.save()
        self.assertEqual(cm.exception.resource, a.resource)
        self.assertEqual(ran, [], "refused before the save")

        self.assertEqual(read_item(self.check, "django_item", item.pk), ("B", 0, b.generation))
        stale.refresh_from_db()
        self.assertEqual((stale.name, stale.qty, stale.fence), ("B", 0, b.generation))




# -------------------------------------------------------------- lease_fence.django

class DjangoHelperTests(unittest.TestCase):
    """lease_fence.django: fenced(lease_or_generation, resource, using),
    acquire / release / transaction_lease through Django's connection."""

    @classmethod
    def tearDownClass(cls):
        connections.close_all()

    def setUp(self):
        self.check = connect()
        self.addCleanup(self.check.close)

    def test_two_holders_stale_save_raises_stale_generation(self):
        """acceptance: A and B hold one resource in turn (A's lease expired);
        B's fenced save stands, A's fenced save raises
        lease_fence.StaleGeneration (naming the resource: refused at
        set_generation), and the row keeps B's write and generation."""
        item = DjangoItem.objects.create(name="start")
        res = resource_name(self)
        a = lf_django.acquire(res, ttl_ms=300)
        stale = DjangoItem.objects.get(pk=item.pk)
        time.sleep(0.6)                              # A stalls; its lease expires
        b = lf_django.acquire(res, ttl_ms=10000)
        self.addCleanup(lf_django.release, b)
        self.assertGreater(b.generation, a.generation)

        with lf_django.fenced(b) as conn:
            self.assertIs(conn, connections["default"])
            fresh = DjangoItem.objects.get(pk=item.pk)
            fresh.name = "B"
            fresh.save()
        stale.name = "A late"
        with self.assertRaises(lease_fence.StaleGeneration) as cm:
            with lf_django.fenced(a):
                stale.save()
        err = cm.exception
        self.assertEqual((err.sqlstate, err.resource), ("LF001", res))
        self.assertIsInstance(err.__cause__, DatabaseError)
        self.assertEqual(read_item(self.check, "django_item", item.pk), ("B", 0, b.generation))

        # rows only (a bare generation): the row fence refuses it, naming the row
        with self.assertRaises(StaleGeneration) as cm:
            with lf_django.fenced(a.generation):
                stale.save()
        self.assertEqual((cm.exception.table, cm.exception.column, cm.exception.resource),
                         ("django_item", "fence", None))
        self.assertEqual(read_item(self.check, "django_item", item.pk), ("B", 0, b.generation))
        self.assertEqual(lf_django.release(a), "not_held")

    def test_fenced_is_one_atomic_block_with_one_set_generation(self):
        """fenced() runs the block in transaction.atomic(), with exactly one
        statement before it: set_generation(g, resource); the row and the
        resource carry the generation; a resource= names another resource."""
        item = DjangoItem.objects.create(name="one")
        res = resource_name(self)
        lease = lf_django.acquire(res, ttl_ms=10000)
        self.addCleanup(lf_django.release, lease)
        with CaptureQueriesContext(connection) as queries:
            with lf_django.fenced(lease):
                self.assertTrue(connection.in_atomic_block)
                before_block = statements(queries.captured_queries)
                obj = DjangoItem.objects.get(pk=item.pk)
                obj.qty = 5
                obj.save()
        self.assertEqual(len(before_block), 1, before_block)
        self.assertIn("lease_fence.set_generation", before_block[0])
        self.assertEqual(read_item(self.check, "django_item", item.pk),
                         ("one", 5, lease.generation))
        self.assertEqual(resource_fence(self.check, res), lease.generation)

        with lf_django.fenced(lease.generation, resource=f"{res}:other"):
            pass
        self.assertEqual(resource_fence(self.check, f"{res}:other"), lease.generation)

    def test_fenced_refuses_to_run_inside_atomic(self):
        """inside an outer transaction.atomic() the generation would outlive
        the block: RuntimeError, nothing set."""
        with transaction.atomic():
            with self.assertRaises(RuntimeError):
                with lf_django.fenced(1):
                    self.fail("block must not run")

    def test_transaction_lease_and_lost_at_commit(self):
        """lf_django.transaction_lease: the write commits with the lease's
        generation and the lease is released; with the key deleted before
        COMMIT it is LeaseLostAtCommit and nothing is committed; busy is
        LeaseBusy."""
        item = DjangoItem.objects.create(name="tx")
        res = resource_name(self)
        with lf_django.transaction_lease(res, ttl_ms=10000) as lease:
            DjangoItem.objects.filter(pk=item.pk).update(qty=7)
        self.assertEqual(read_item(self.check, "django_item", item.pk),
                         ("tx", 7, lease.generation))
        from lf_testlib import lease_key, redis
        self.assertEqual(redis("EXISTS", lease_key(res)), "0")
        with self.assertRaises(LeaseLostAtCommit) as cm:
            with lf_django.transaction_lease(res, ttl_ms=2000):
                DjangoItem.objects.filter(pk=item.pk).update(qty=8)
                redis("DEL", lease_key(res))
                time.sleep(1.1)                   # past ttl/2: COMMIT asks Redis
        self.assertIsInstance(cm.exception, FenceError)
        self.assertEqual(read_item(self.check, "django_item", item.pk),
                         ("tx", 7, lease.generation))
        holder = acquire(self.check, res, ttl_ms=10000)
        self.addCleanup(release, self.check, holder)
        with self.assertRaises(LeaseBusy):
            lf_django.acquire(res, ttl_ms=10000)

    def test_job_that_catches_a_refused_write_raises_transaction_rolled_back(self):
        """lf_django.job whose block catches a refused save (StaleGeneration)
        and goes on: Django would roll the atomic block back without a word
        at its end; the job raises TransactionRolledBack instead, nothing of
        it committed."""
        from lf_testlib import next_generation
        mine = DjangoItem.objects.create(name="mine")
        theirs = DjangoItem.objects.create(name="theirs")
        res = resource_name(self)
        caught = []
        with self.assertRaises(TransactionRolledBack):
            with lf_django.job(res, ttl_ms=10000):
                DjangoItem.objects.filter(pk=mine.pk).update(qty=5)
                with fenced(self.check, next_generation(self.check)):   # rows only
                    self.check.execute("UPDATE django_item SET qty = 1 WHERE id = %s",
                                       (theirs.pk,))
                try:
                    with fence_errors():
                        DjangoItem.objects.filter(pk=theirs.pk).update(qty=9)
                except StaleGeneration as e:
                    caught.append(e)
        self.assertEqual([e.sqlstate for e in caught], ["LF001"])
        self.assertEqual(read_item(self.check, "django_item", mine.pk), ("mine", 0, 0))
        self.assertFalse(connection.in_atomic_block)
        holder = acquire(self.check, res, ttl_ms=10000)     # the lease went with it
        self.assertEqual(release(self.check, holder), "released")

    def test_job_through_django(self):
        """lf_django.job (Django: BEGIN and the acquire one after the other):
        the write commits under the lease's generation and the lease is
        released; busy raises before the block; the key deleted before
        COMMIT is LeaseLostAtCommit, nothing committed."""
        from lf_testlib import lease_key, redis
        item = DjangoItem.objects.create(name="job")
        res = resource_name(self)
        with lf_django.job(res, ttl_ms=10000) as lease:
            self.assertTrue(connection.in_atomic_block)
            DjangoItem.objects.filter(pk=item.pk).update(qty=3)
        self.assertEqual(read_item(self.check, "django_item", item.pk),
                         ("job", 3, lease.generation))
        self.assertEqual(redis("EXISTS", lease_key(res)), "0")

        holder = acquire(self.check, res, ttl_ms=10000)
        ran = []
        with self.assertRaises(LeaseBusy):
            with lf_django.job(res, ttl_ms=10000):
                ran.append(True)
        self.assertEqual(ran, [])
        self.assertFalse(connection.in_atomic_block)
        self.assertEqual(release(self.check, holder), "released")

        with self.assertRaises(LeaseLostAtCommit):
            with lf_django.job(res, ttl_ms=2000):
                DjangoItem.objects.filter(pk=item.pk).update(qty=4)
                redis("DEL", lease_key(res))
                time.sleep(1.1)               # past ttl/2: COMMIT asks Redis
        self.assertEqual(read_item(self.check, "django_item", item.pk),
                         ("job", 3, lease.generation))


def test_django_helper_needs_a_known_alias():
    """using= names a configured database: an unknown alias is Django's error."""
    from django.db.utils import ConnectionDoesNotExist
    with pytest.raises(ConnectionDoesNotExist):
        with lf_django.fenced(1, using="nope"):
            pass

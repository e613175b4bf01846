"""lease_fence under ORMs that save whole rows: Django 3.2 and SQLAlchemy 1.4.

Run by test/clients/run.sh as ``/usr/bin/python3 -m unittest -v test_orm``
(Debian's interpreter, with python3-django, python3-sqlalchemy and
python3-psycopg2), with the variables of test_clients.py. The tables
``django_item`` and ``sa_item`` (id, name, qty, fence) are owned by postgres,
protected with ``lease_fence.protect`` and granted to the app role.

An ORM writes an object back whole: Django's ``save()`` UPDATEs every
column, the fence as it was loaded. With a current generation G the fence
treats a written fence at or below the stored one as left alone: the row is
checked against G (LF001 when G is lower than the stored fence), else the
fence becomes G. So each test proves, with the real ORM against the real
server:

- two full-row saves of one object in one fenced transaction commit, with
  the fence at the transaction's generation;
- a stale worker's full-row save raises LF001, which ``fence_error_from`` /
  ``fence_errors`` turn into StaleGeneration naming the table and the fence
  column, and nothing of it is committed.

Leases are taken with the helper on a psycopg 3 connection: an explicit
lease lives in the application, so its generation can fence any connection.
"""

import time
import unittest

import django
from django.conf import settings

from test_clients import (APP_USER, DATABASE, PGHOST, PGPORT, connect, engine_for,
                          resource_name)

if not settings.configured:
    settings.configure(
        DATABASES={"default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": DATABASE, "USER": APP_USER,
            "HOST": PGHOST, "PORT": str(PGPORT),       # HOST: the unix socket's directory
        }},
        INSTALLED_APPS=[], USE_TZ=True, TIME_ZONE="UTC",
        DEFAULT_AUTO_FIELD="django.db.models.AutoField")
    django.setup()

from django.db import DatabaseError, connection, connections, models, transaction  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from sqlalchemy import BigInteger, Column, FetchedValue, Integer, Text, event  # noqa: E402
from sqlalchemy.orm import Session, declarative_base  # noqa: E402
from sqlalchemy.orm.attributes import flag_modified  # noqa: E402

from lease_fence_client import (StaleGeneration, acquire, fence_error_from,  # noqa: E402
                                fence_errors, fenced, release)


def read_item(conn, table, item_id):
    return conn.execute(f"SELECT name, qty, fence FROM {table} WHERE id = %s",
                        (item_id,)).fetchone()


def resource_fence(conn, resource):
    return conn.execute("SELECT generation FROM lease_fence.resource_fences "
                        "WHERE resource = %s", (resource,)).fetchone()[0]


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
        DatabaseError (psycopg2's error as __cause__), fence_error_from maps
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
        self.assertEqual(cm.exception.__cause__.pgcode, "LF001")
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


# -------------------------------------------------------------- SQLAlchemy 1.4 ORM

Base = declarative_base()


class SaItem(Base):
    """The fence as a plain column: flushed only when it changed, so the
    full-row tests force it into the UPDATE (flag_modified, merge)."""

    __tablename__ = "sa_item"
    id = Column(Integer, primary_key=True)
    name = Column(Text, nullable=False, default="")
    qty = Column(Integer, nullable=False, default=0)
    fence = Column(BigInteger, nullable=False, default=0)


FetchedBase = declarative_base()


class FencedItem(FetchedBase):
    """The recommended mapping: the server writes the fence (server_default,
    server_onupdate = FetchedValue()), the application never does, and
    eager_defaults reads it back with RETURNING at each flush."""

    __tablename__ = "sa_item"
    __mapper_args__ = {"eager_defaults": True}
    id = Column(Integer, primary_key=True)
    name = Column(Text, nullable=False, default="")
    qty = Column(Integer, nullable=False, default=0)
    fence = Column(BigInteger, nullable=False, server_default=FetchedValue(),
                   server_onupdate=FetchedValue())


class SQLAlchemyORMTests(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.engine = engine_for()
        cls.statements = []
        event.listen(cls.engine, "before_cursor_execute",
                     lambda conn, cursor, statement, *args: cls.statements.append(statement))

    @classmethod
    def tearDownClass(cls):
        cls.engine.dispose()

    def setUp(self):
        self.check = connect()
        self.addCleanup(self.check.close)
        self.statements.clear()

    def new_item(self, name):
        return self.check.execute("INSERT INTO sa_item (name) VALUES (%s) RETURNING id",
                                  (name,)).fetchone()[0]

    def updates(self):
        return [s for s in self.statements if s.startswith("UPDATE sa_item")]

    def test_forced_full_row_flush_twice_in_one_transaction(self):
        """flag_modified(item, 'fence') puts the loaded fence into each
        UPDATE; two flushes in one fenced transaction pass and the fence
        commits as the generation."""
        item_id = self.new_item("new")
        res = resource_name(self)
        lease = acquire(self.check, res, ttl_ms=10000)
        self.addCleanup(release, self.check, lease)
        with Session(self.engine) as session:
            with fenced(session, lease):
                item = session.get(SaItem, item_id)
                item.name = "flushed once"
                flag_modified(item, "fence")
                session.flush()
                item.qty = 2
                flag_modified(item, "fence")
                session.flush()
                self.assertEqual(item.fence, 0, "the object still holds the fence it loaded")
        self.assertEqual(len(self.updates()), 2)
        for sql in self.updates():
            self.assertIn("fence=", sql.replace(" ", ""), "the fence is in the UPDATE")
        self.assertEqual(read_item(self.check, "sa_item", item_id),
                         ("flushed once", 2, lease.generation))
        self.assertEqual(resource_fence(self.check, res), lease.generation)

    def test_stale_forced_flush_is_stale_generation(self):
        """A loads the item (and keeps it: expire_on_commit=False), stalls;
        B takes over and writes. A's flush with the loaded fence forced in
        is LF001 -> StaleGeneration naming sa_item.fence; so is the merge of
        a detached copy loaded before B wrote. Nothing of A's is committed."""
        item_id = self.new_item("start")
        with Session(self.engine, expire_on_commit=False) as a_session, \
                Session(self.engine) as b_session:
            def load():
                with a_session.begin():
                    return a_session.get(SaItem, item_id)
            a, b, stale = expired_lease_and_successor(self, self.check, load)
            with Session(self.engine, expire_on_commit=False) as loader:
                detached = loader.get(SaItem, item_id)      # loaded before B wrote
                loader.expunge(detached)

            with fenced(b_session, b):
                b_session.get(SaItem, item_id).name = "B"

            with self.assertRaises(StaleGeneration) as cm:
                with fenced(a_session, a.generation):       # rows only
                    stale.name = "A late"
                    flag_modified(stale, "fence")
                    a_session.flush()
            err = cm.exception
            self.assertEqual((err.schema, err.table, err.column), ("public", "sa_item", "fence"))
            self.assertEqual(err.__cause__.orig.pgcode, "LF001")

            detached.qty = 99
            with Session(self.engine) as merger:
                with self.assertRaises(StaleGeneration) as cm:
                    with fenced(merger, a.generation):
                        merger.merge(detached)
                        merger.flush()
            self.assertEqual((cm.exception.table, cm.exception.column), ("sa_item", "fence"))
            self.assertIn("fence=", self.updates()[-1].replace(" ", ""),
                          "merge wrote the detached copy's fence back")
        self.assertEqual(read_item(self.check, "sa_item", item_id), ("B", 0, b.generation))

    def test_fetched_value_mapping_reads_the_generation(self):
        """FencedItem (server_default / server_onupdate FetchedValue,
        eager_defaults): the INSERT and each UPDATE leave the fence to the
        server and read back the generation it wrote; a stale flush is
        still StaleGeneration."""
        res = resource_name(self)
        lease = acquire(self.check, res, ttl_ms=10000)
        self.addCleanup(release, self.check, lease)
        with Session(self.engine, expire_on_commit=False) as session:
            with fenced(session, lease):
                item = FencedItem(name="fetched")
                session.add(item)
                session.flush()
                self.assertEqual(item.fence, lease.generation, "RETURNING read it back")
                item.qty = 1
                session.flush()
                item.qty = 2
                session.flush()
                self.assertEqual(item.fence, lease.generation)
        self.assertEqual(len(self.updates()), 2)
        for sql in self.updates():
            written, returning = sql.split("RETURNING")
            self.assertNotIn("fence=", written.replace(" ", ""),
                             "the application never writes the fence")
            self.assertIn("sa_item.fence", returning, "eager_defaults reads it back")
        self.assertEqual(read_item(self.check, "sa_item", item.id),
                         ("fetched", 2, lease.generation))

        older = self.check.execute("SELECT lease_fence.next_generation()").fetchone()[0]
        newer = self.check.execute("SELECT lease_fence.next_generation()").fetchone()[0]
        with Session(self.engine, expire_on_commit=False) as a_session, \
                Session(self.engine, expire_on_commit=False) as b_session:
            with a_session.begin():
                stale = a_session.get(FencedItem, item.id)
            with fenced(b_session, newer):
                b_item = b_session.get(FencedItem, item.id)
                b_item.name = "B"
            self.assertEqual(b_item.fence, newer)
            with self.assertRaises(StaleGeneration) as cm:
                with fenced(a_session, older):
                    stale.name = "A late"
                    a_session.flush()
            self.assertEqual((cm.exception.table, cm.exception.column), ("sa_item", "fence"))
        self.assertEqual(read_item(self.check, "sa_item", item.id), ("B", 2, newer))


if __name__ == "__main__":
    unittest.main(verbosity=2)

"""lease_fence over SQLAlchemy (sync, psycopg2 driver): Core and ORM.

Ported from the examples' unittest suites (test_clients.py's SQLAlchemy
tests and test_orm.py's SQLAlchemy ORM full-row saves).
"""

import time
import unittest

import sqlalchemy
from sqlalchemy import BigInteger, Column, FetchedValue, Integer, Text, event, text
from sqlalchemy.orm import Session, declarative_base
from sqlalchemy.orm.attributes import flag_modified

from lease_fence import (
    LeaseBusy, LeaseLostAtCommit, MissingGeneration, StaleGeneration, TransactionRolledBack,
    acquire, fence_errors, fenced, job, kept_alive_lease, release, transaction_lease)
from lf_testlib import (engine_for, read_item, resource_fence, connect, lease_key,
                        new_row, next_generation, read_row, redis, resource_name)


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


# -------------------------------------------------------------- SQLAlchemy 1.4

Base = declarative_base()


class Account(Base):
    __tablename__ = "account"
    id = Column(Integer, primary_key=True)
    owner = Column(Text)
    balance = Column(Integer)
    fence = Column(BigInteger)


class SQLAlchemyTests(unittest.TestCase):
    """The same helper over SQLAlchemy 1.4 (psycopg2 driver): Core and ORM."""

    @classmethod
    def setUpClass(cls):
        cls.engine = engine_for()

    @classmethod
    def tearDownClass(cls):
        cls.engine.dispose()

    def setUp(self):
        self.check = connect()           # psycopg 3, to read rows back
        self.addCleanup(self.check.close)

    def test_core_transaction_lease_commits(self):
        """Connection + transaction_lease: the row and fence are committed."""
        row_id = new_row(self.check)
        res = resource_name(self)
        with self.engine.connect() as conn:
            with transaction_lease(conn, res, ttl_ms=10000, min_validity_ms=500) as lease:
                conn.execute(text("UPDATE account SET owner = 'sa', balance = balance - 1 "
                                  "WHERE id = :id"), {"id": row_id})
        self.assertEqual(read_row(self.check, row_id), ("sa", 99, lease.generation))
        self.assertEqual(redis("EXISTS", lease_key(res)), "0")

    def test_job_falls_back_to_the_plain_sequence(self):
        """job() over a SQLAlchemy Connection (BEGIN and the acquire one
        after the other): the write commits under the lease's generation and
        the lease is released; busy raises before the block, nothing
        written; the block's exception rolls back and propagates; the key
        deleted before COMMIT is LeaseLostAtCommit."""
        row_id = new_row(self.check)
        res = resource_name(self)
        with self.engine.connect() as conn:
            with job(conn, res, ttl_ms=10000) as lease:
                conn.execute(text("UPDATE account SET owner = 'sa job' WHERE id = :id"),
                             {"id": row_id})
            self.assertEqual(read_row(self.check, row_id), ("sa job", 100, lease.generation))
            self.assertEqual(release(self.check, acquire(self.check, res, ttl_ms=10000)),
                             "released")

            holder = acquire(self.check, res, ttl_ms=10000)
            ran = []
            with self.assertRaises(LeaseBusy):
                with job(conn, res, ttl_ms=10000):
                    ran.append(True)
            self.assertEqual(ran, [])
            self.assertFalse(conn.in_transaction())
            self.assertEqual(release(self.check, holder), "released")

            with self.assertRaises(KeyError):
                with job(conn, res, ttl_ms=10000):
                    conn.execute(text("UPDATE account SET owner = 'gone' WHERE id = :id"),
                                 {"id": row_id})
                    raise KeyError("the block's own")
            self.assertEqual(read_row(self.check, row_id), ("sa job", 100, lease.generation))
            self.assertEqual(redis("EXISTS", lease_key(res)), "0")

            with self.assertRaises(LeaseLostAtCommit):
                with job(conn, res, ttl_ms=2000):
                    conn.execute(text("UPDATE account SET owner = 'doomed' WHERE id = :id"),
                                 {"id": row_id})
                    redis("DEL", lease_key(res))
                    time.sleep(1.1)           # past ttl/2: COMMIT asks Redis
            self.assertEqual(read_row(self.check, row_id), ("sa job", 100, lease.generation))
            self.assertFalse(conn.in_transaction())

    def test_caught_refused_write_raises_transaction_rolled_back(self):
        """job over a Core Connection and transaction_lease over an ORM
        Session, each block catching a refused write and going on: the
        helper raises TransactionRolledBack, nothing of it committed."""
        def newer_fence(row_id):
            with fenced(self.check, next_generation(self.check)):     # rows only
                self.check.execute("UPDATE account SET owner = 'newer' WHERE id = %s", (row_id,))

        row_id, mine = new_row(self.check), new_row(self.check)
        res = resource_name(self)
        caught = []
        with self.engine.connect() as conn:
            with self.assertRaises(TransactionRolledBack):
                with job(conn, res, ttl_ms=10000):
                    conn.execute(text("UPDATE account SET owner = 'job' WHERE id = :id"),
                                 {"id": mine})
                    newer_fence(row_id)
                    try:
                        with fence_errors():
                            conn.execute(text("UPDATE account SET owner = 'stale' "
                                              "WHERE id = :id"), {"id": row_id})
                    except StaleGeneration as e:
                        caught.append(e)
            self.assertFalse(conn.in_transaction())
        with Session(self.engine) as session:
            with self.assertRaises(TransactionRolledBack):
                with transaction_lease(session, res, ttl_ms=10000):
                    session.get(Account, mine).owner = "session"
                    session.flush()
                    newer_fence(row_id)
                    session.get(Account, row_id).owner = "stale"
                    try:
                        with fence_errors():
                            session.flush()
                    except StaleGeneration as e:
                        caught.append(e)
        self.assertEqual([e.sqlstate for e in caught], ["LF001", "LF001"])
        self.assertEqual(read_row(self.check, mine), ("nobody", 100, 0))
        self.assertEqual(release(self.check, acquire(self.check, res, ttl_ms=10000)), "released")

    def test_orm_stale_write_raises_stale_generation(self):
        """ORM Session, explicit scope: B takes over after A's lease expired;
        A's flush under its old generation raises StaleGeneration, wrapping
        SQLAlchemy's DBAPIError (psycopg2 pgcode LF001); B's row stands."""
        row_id = new_row(self.check)
        res = resource_name(self)
        with Session(self.engine) as a_session, Session(self.engine) as b_session:
            a = acquire(a_session, res, ttl_ms=300)
            time.sleep(0.6)
            b = acquire(b_session, res, ttl_ms=10000)
            with fenced(b_session, b.generation):
                b_session.get(Account, row_id).owner = "B (orm)"
            with self.assertRaises(StaleGeneration) as cm:
                with fenced(a_session, a.generation):
                    a_session.get(Account, row_id).owner = "A (orm, late)"
            a_session.expire_all()
            self.assertEqual(release(b_session, b), "released")
        err = cm.exception
        self.assertEqual((err.schema, err.table, err.column), ("public", "account", "fence"))
        self.assertIsInstance(err.__cause__, sqlalchemy.exc.DBAPIError)
        self.assertEqual(err.__cause__.orig.pgcode, "LF001")
        self.assertEqual(read_row(self.check, row_id), ("B (orm)", 100, b.generation))

    def test_orm_fenced_lease_fences_the_resource(self):
        """ORM Session, fenced(session, lease): after B fenced the resource,
        A's late INSERT of a new row is refused with StaleGeneration."""
        res = resource_name(self)
        with Session(self.engine) as a_session, Session(self.engine) as b_session:
            a = acquire(a_session, res, ttl_ms=300)
            time.sleep(0.6)
            b = acquire(b_session, res, ttl_ms=10000)
            with fenced(b_session, b):
                pass
            with self.assertRaises(StaleGeneration) as cm:
                with fenced(a_session, a):
                    a_session.add(Account(owner=f"{res} A late", balance=0))
                    a_session.flush()
            self.assertEqual(release(b_session, b), "released")
        err = cm.exception
        self.assertEqual((err.schema, err.table, err.column, err.resource),
                         ("lease_fence", "resource_generation", None, res))
        self.assertEqual(self.check.execute("SELECT count(*) FROM account WHERE owner = %s",
                                            (f"{res} A late",)).fetchone()[0], 0)

    def test_lease_lost_at_commit(self):
        """LF010 through SQLAlchemy: LeaseLostAtCommit, nothing committed."""
        row_id = new_row(self.check)
        res = resource_name(self)
        with Session(self.engine) as session:
            with self.assertRaises(LeaseLostAtCommit):
                with transaction_lease(session, res, ttl_ms=2000):
                    session.get(Account, row_id).balance = 0
                    session.flush()
                    redis("DEL", lease_key(res))
                    time.sleep(1.1)               # past ttl/2: COMMIT asks Redis
        self.assertEqual(read_row(self.check, row_id), ("nobody", 100, 0))

    def test_orm_kept_alive_lease_and_waiting(self):
        """kept_alive_lease over a Core Connection with an ORM Session bound
        to it, watched on another Connection: a 2 s flush-and-sleep under a
        1 s TTL is fenced and committed; a waiting acquire through
        SQLAlchemy ends in LeaseBusy. A Session bound to the Engine (a new
        connection per transaction) is refused."""
        row_id = new_row(self.check)
        res = resource_name(self)
        with self.engine.connect() as owner, Session(bind=owner) as session, \
                self.engine.connect() as watch:
            with kept_alive_lease(owner, res, ttl_ms=1000, watch=watch) as lease:
                with fenced(session, lease):
                    session.get(Account, row_id).owner = "sa kept alive"
                    session.flush()
                    session.execute(text("SELECT pg_sleep(2)"))
                self.assertEqual(lease.state, "active")
                t0 = time.monotonic()
                with self.assertRaises(LeaseBusy):
                    acquire(watch, res, ttl_ms=10000, wait_ms=300)
                self.assertGreaterEqual(time.monotonic() - t0, 0.3)
        self.assertEqual(read_row(self.check, row_id), ("sa kept alive", 100, lease.generation))
        self.assertEqual(redis("EXISTS", lease_key(res)), "0")

        with Session(self.engine) as session:
            with self.assertRaises(TypeError):
                with kept_alive_lease(session, res, ttl_ms=1000):
                    self.fail("block must not run")
        self.assertEqual(redis("EXISTS", lease_key(res)), "0", "nothing was acquired")

    def test_busy_and_missing_generation(self):
        """busy is LeaseBusy through SQLAlchemy too; a strict-table write
        without a generation is MissingGeneration."""
        res = resource_name(self)
        holder = acquire(self.check, res, ttl_ms=10000)
        self.addCleanup(release, self.check, holder)
        with self.engine.connect() as conn:
            with self.assertRaises(LeaseBusy):
                acquire(conn, res, ttl_ms=10000)
            with self.assertRaises(MissingGeneration):
                with fence_errors(), conn.begin():
                    conn.execute(text("INSERT INTO ledger (note) VALUES ('sa unfenced')"))


# -------------------------------------------------------------- SQLAlchemy 1.4 ORM

OrmBase = declarative_base()


class SaItem(OrmBase):
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

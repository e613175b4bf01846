"""Shared helpers of the lease_fence tests: where the servers are (the
harness's environment), connections, redis-cli, rows.

  PGHOST / PGPORT         PostgreSQL's unix socket dir and port
  PGDATABASE              database with the extension, tables ``account``
                          (lenient), ``ledger`` (strict), ``django_item``,
                          ``sa_item``, all protected
  PGUSER                  role that takes leases: owns no table
  LF_NOREDIS_USER         same grants, its Redis socket does not exist
  LF_REDIS_SOCK           Redis's unix socket (redis-cli: DEL, SET, CLIENT PAUSE)
  LF_REDIS_CLI            that program (default redis-cli; valkey-cli for Valkey)
  LF_BOUNCER_HOST/PORT    PgBouncer, transaction pooling (test_pgbouncer)
  LF_PORTABLE_PGPORT      server 2 (same PGHOST): the portable edition, no C library
  LF_PORTABLE_DB          its database (table ``account``, protected)
  LF_SRC                  the repository (its scripts/*.lua), test_client_side
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from typing import Any, Callable

import psycopg

ENV = os.environ
PGHOST = ENV.get("PGHOST", "/var/run/postgresql")
PGPORT = int(ENV.get("PGPORT", "5432"))
DATABASE = ENV.get("PGDATABASE", "appdb")
APP_USER = ENV.get("PGUSER", "app")
NOREDIS_USER = ENV.get("LF_NOREDIS_USER", "app_noredis")
REDIS_SOCK = ENV.get("LF_REDIS_SOCK", "")
KEY_PREFIX = ENV.get("LF_KEY_PREFIX", "lease_fence:")
BOUNCER_HOST = ENV.get("LF_BOUNCER_HOST", "")
BOUNCER_PORT = int(ENV.get("LF_BOUNCER_PORT", "6432"))
PORTABLE_PORT = ENV.get("LF_PORTABLE_PGPORT", "")
PORTABLE_DB = ENV.get("LF_PORTABLE_DB", "portabledb")


def connect(user: str = APP_USER, host: str = PGHOST, port: int = PGPORT,
            **kw: Any) -> psycopg.Connection:
    """A psycopg 3 connection in autocommit mode, as an application holds one."""
    return psycopg.connect(host=host, port=port, dbname=DATABASE, user=user,
                           autocommit=True, **kw)


def portable_connect(user: str = APP_USER, **kw: Any) -> psycopg.Connection:
    """A connection to the portable edition's database (server 2)."""
    return psycopg.connect(host=PGHOST, port=int(PORTABLE_PORT), dbname=PORTABLE_DB, user=user,
                           autocommit=True, **kw)


async def aconnect(user: str = APP_USER, **kw: Any) -> psycopg.AsyncConnection:
    return await psycopg.AsyncConnection.connect(host=PGHOST, port=PGPORT, dbname=DATABASE,
                                                 user=user, autocommit=True, **kw)


def redis(*args: object) -> str:
    """redis-cli on the harness's socket: the 'admin' side of the tests."""
    out = subprocess.run([ENV.get("LF_REDIS_CLI") or "redis-cli", "-s", REDIS_SOCK, *map(str, args)],
                         check=True, capture_output=True, text=True, timeout=30)
    return out.stdout.strip()


def lease_key(resource: str) -> str:
    return f"{KEY_PREFIX}{{{resource}}}"


def resource_name(test: Any, tag: str = "") -> str:
    """A resource of its own for each test (and each run); ``test`` is a
    unittest.TestCase or a str."""
    name = test if isinstance(test, str) else test.id().rsplit(".", 1)[-1]
    return f"py:{name}{tag}:{uuid.uuid4().hex[:8]}"


def new_row(conn: psycopg.Connection, owner: str = "nobody", balance: int = 100) -> int:
    """A fresh ``account`` row (fence 0) written without a generation."""
    return conn.execute("INSERT INTO account (owner, balance) VALUES (%s, %s) RETURNING id",
                        (owner, balance)).fetchone()[0]


def read_row(conn: psycopg.Connection, row_id: int) -> Any:
    return conn.execute("SELECT owner, balance, fence FROM account WHERE id = %s",
                        (row_id,)).fetchone()


def read_item(conn: psycopg.Connection, table: str, item_id: int) -> Any:
    return conn.execute(f"SELECT name, qty, fence FROM {table} WHERE id = %s",
                        (item_id,)).fetchone()


def resource_fence(conn: psycopg.Connection, resource: str) -> Any:
    row = conn.execute("SELECT generation FROM lease_fence.resource_fences "
                       "WHERE resource = %s", (resource,)).fetchone()
    return row[0] if row else None


def next_generation(conn: psycopg.Connection) -> int:
    return conn.execute("SELECT lease_fence.next_generation()").fetchone()[0]


def wait_for_redis() -> None:
    """Returns once a paused Redis answers again (PING waits out CLIENT PAUSE)."""
    redis("PING")


def wait_until(what: str, predicate: Callable[[], bool], limit_s: float = 30.0) -> None:
    """Poll ``predicate`` until it is true; fail after ``limit_s`` (a safety
    net against a hang, not a bound the test asserts)."""
    deadline = time.monotonic() + limit_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


def sa_url(driver: str = "psycopg2", user: str = APP_USER) -> str:
    return f"postgresql+{driver}://{user}@/{DATABASE}?host={PGHOST}&port={PGPORT}"


def engine_for(user: str = APP_USER) -> Any:
    import sqlalchemy
    return sqlalchemy.create_engine(sa_url("psycopg2", user), future=True,
                                    poolclass=sqlalchemy.pool.NullPool)


def async_drivers() -> list:
    """SQLAlchemy async drivers available here: asyncpg (SQLAlchemy 1.4 and
    2.0), psycopg (SQLAlchemy 2.0 only)."""
    import sqlalchemy
    drivers = []
    try:
        import asyncpg  # noqa: F401
        drivers.append("asyncpg")
    except ImportError:
        pass
    if int(sqlalchemy.__version__.split(".")[0]) >= 2:
        drivers.append("psycopg")
    return drivers


def async_engine_for(driver: str, user: str = APP_USER) -> Any:
    import sqlalchemy
    from sqlalchemy.ext.asyncio import create_async_engine
    return create_async_engine(sa_url(driver, user), poolclass=sqlalchemy.pool.NullPool)


_django_ready = False


def setup_django() -> None:
    """Configure Django once (settings for the harness's database)."""
    global _django_ready
    if _django_ready:
        return
    import django
    from django.conf import settings
    if not settings.configured:
        settings.configure(
            DATABASES={"default": {
                "ENGINE": "django.db.backends.postgresql",
                "NAME": DATABASE, "USER": APP_USER,
                "HOST": PGHOST, "PORT": str(PGPORT),   # HOST: the unix socket's directory
            }},
            INSTALLED_APPS=[], USE_TZ=True, TIME_ZONE="UTC",
            DEFAULT_AUTO_FIELD="django.db.models.AutoField")
        django.setup()
    _django_ready = True


def private_redis(directory: str) -> Any:
    """A redis-server of the test's own (a job system's broker), on a unix
    socket in ``directory``, no persistence: the lease Redis may be paused
    (CLIENT PAUSE) by a test without stalling the broker. Returns
    (process, socket path); stop it with stop_private_redis."""
    cli = ENV.get("LF_REDIS_CLI") or "redis-cli"
    server = cli[:-len("-cli")] + "-server" if cli.endswith("-cli") else "redis-server"
    sock = os.path.join(directory, "broker.sock")
    proc = subprocess.Popen([server, "--port", "0", "--unixsocket", sock,
                             "--unixsocketperm", "700", "--save", "", "--appendonly", "no",
                             "--dir", directory],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def up() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"{server} exited with {proc.returncode}")
        return subprocess.run([cli, "-s", sock, "PING"], capture_output=True,
                              text=True).stdout.strip() == "PONG"
    wait_until("the broker's redis-server answers", up)
    return proc, sock


def stop_private_redis(proc: Any) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def warm_connection(**kw: Any) -> psycopg.Connection:
    """A connection whose lease requests time out fast
    (lease_fence.command_timeout_ms 150), whose backend has already talked
    to Redis (a lease taken and released): the first acquire of a new
    backend checks the key prefix first, and that check, not the acquire,
    would stall under CLIENT PAUSE (unavailable, not unknown)."""
    conn = connect(options="-c lease_fence.command_timeout_ms=150 "
                           "-c lease_fence.cleanup_timeout_ms=150", **kw)
    res = f"py:warm:{uuid.uuid4().hex[:8]}"
    conn.execute("SELECT lease_fence.release(resource, identity) "
                 "FROM lease_fence.acquire(%s, 10000)", (res,))
    return conn


def freeze_between_transactions(monkeypatch: Any, res: str, successor: Callable[[], None]) -> None:
    """The resumable job of ``res`` freezes between a checkpoint's COMMIT
    and its next fenced transaction (ResumableJob._open wrapped, with
    pytest's monkeypatch) long enough for ``successor()`` to run: what a
    holder paused there (GC, SIGSTOP) would see."""
    from lease_fence import ResumableJob
    opened = ResumableJob._open

    def frozen(job: Any, read_checkpoint: bool) -> None:
        if not read_checkpoint and job.resource == res:
            successor()
        opened(job, read_checkpoint)
    monkeypatch.setattr(ResumableJob, "_open", frozen)

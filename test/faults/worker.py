#!/usr/bin/python3
# test/faults/worker.py — one worker of the fault-injection run
# (test/faults/faults.py starts LF_FAULTS_WORKERS of them, each a process of
# its own with its own PostgreSQL connection).
#
# It loops, until the stop file appears:
#   acquire(resource, ttl_ms, wait_ms => wait) on a random resource of R;
#   if acquired, one transaction
#     BEGIN; SELECT lease_fence.set_generation(g);
#     SELECT lease_fence.fence_resource(resource);
#     UPDATE item SET v = v + 1 WHERE id = <the resource's row> RETURNING v;
#     INSERT INTO history (resource, item, v, generation, worker, identity);
#     COMMIT
#   then release(resource, identity).
# After a connection error it reconnects (the connection string may name
# several servers: target_session_attrs=read-write finds the primary), and a
# release whose connection broke is sent once more on the new connection
# (a retry reuses the same identity: docs/guides/leases.md, "The Redis lease helper").  It
# never writes under an acquire that did not say acquired.
#
# Every outcome is one JSON line in its log, stamped with time.monotonic()
# (CLOCK_MONOTONIC: one clock for every process of the machine, the
# driver's included) before the call (t0) and when it returned (t1):
#   {"op": "acquire", "w", "res", "t0", "t1", "status", "acquired",
#    "identity", "generation", "validity_ms"}       or "error" / "sqlstate"
#   {"op": "write", ..., "acq_t0" (its acquire's t0), "outcome":
#    "committed" | "rejected" (an LF SQLSTATE) | "error" | "commit_unknown"
#    (the connection broke during COMMIT), "v", "stage", "sqlstate", "error"}
#   {"op": "release", ..., "status", "attempt"}     or "error"
#   {"op": "connect", "t0", "t1", "ok", "error"}
# Lines are written unbuffered, so a killed worker leaves what it saw.
#
#   worker.py --conninfo STR --worker N --resources R --ttl-ms MS
#             --wait-ms MS --log FILE --stop-file FILE [--seed S]

import argparse
import json
import os
import random
import signal
import sys
import time

import psycopg

stopping = False


def on_term(signum, frame):
    global stopping
    stopping = True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--conninfo', required=True)
    ap.add_argument('--worker', type=int, required=True)
    ap.add_argument('--resources', type=int, required=True)
    ap.add_argument('--ttl-ms', type=int, default=3000)
    ap.add_argument('--wait-ms', type=int, default=2000)
    ap.add_argument('--log', required=True)
    ap.add_argument('--stop-file', required=True)
    ap.add_argument('--seed', type=int, default=None)
    a = ap.parse_args()

    signal.signal(signal.SIGTERM, on_term)
    rng = random.Random(a.seed if a.seed is not None else a.worker)
    log = open(a.log, 'a', buffering=1)
    w = a.worker

    def emit(rec):
        rec['w'] = w
        log.write(json.dumps(rec, separators=(',', ':')) + '\n')

    def err_fields(e):
        d = {'error': (str(e).strip().splitlines() or [''])[0][:300],
             'etype': type(e).__name__}
        st = getattr(e, 'sqlstate', None)
        if st:
            d['sqlstate'] = st
        return d

    conn = None

    def connect():
        nonlocal conn
        t0 = time.monotonic()
        try:
            conn = psycopg.connect(a.conninfo, autocommit=True,
                                   application_name='faults-worker-%d' % w)
            # a statement never hangs the run: the longest call is a
            # waiting acquire (wait_ms plus one command timeout)
            conn.execute("SET statement_timeout = '30s'")
            emit({'op': 'connect', 't0': t0, 't1': time.monotonic(), 'ok': True})
            return True
        except psycopg.Error as e:
            conn = None
            rec = {'op': 'connect', 't0': t0, 't1': time.monotonic(), 'ok': False}
            rec.update(err_fields(e))
            emit(rec)
            return False

    def broken():
        return conn is None or conn.closed or conn.broken

    def drop():
        nonlocal conn
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass
        conn = None

    def release(res, identity, attempt):
        t0 = time.monotonic()
        try:
            row = conn.execute('SELECT released, status FROM lease_fence.release(%s, %s)',
                               (res, identity)).fetchone()
            emit({'op': 'release', 'res': res, 'identity': identity, 'attempt': attempt,
                  't0': t0, 't1': time.monotonic(), 'released': row[0], 'status': row[1]})
            return True
        except psycopg.Error as e:
            rec = {'op': 'release', 'res': res, 'identity': identity, 'attempt': attempt,
                   't0': t0, 't1': time.monotonic(), 'status': None}
            rec.update(err_fields(e))
            emit(rec)
            return False

    parent = os.getppid()
    backoff = 0.05
    # (a driver that died leaves no worker behind: its children notice)
    while not stopping and not os.path.exists(a.stop_file) and os.getppid() == parent:
        if broken():
            drop()
            if not connect():
                time.sleep(backoff)
                backoff = min(backoff * 2, 0.5)
                continue
            backoff = 0.05

        item = rng.randrange(a.resources)
        res = 'res%d' % item

        # acquire
        t0 = time.monotonic()
        try:
            row = conn.execute(
                'SELECT acquired, status, identity, generation, validity_ms '
                "FROM lease_fence.acquire(%s, %s, 0, 'explicit', %s)",
                (res, a.ttl_ms, a.wait_ms)).fetchone()
        except psycopg.Error as e:
            rec = {'op': 'acquire', 'res': res, 't0': t0, 't1': time.monotonic(),
                   'status': None}
            rec.update(err_fields(e))
            emit(rec)
            if broken():
                drop()
            continue
        t1 = time.monotonic()
        acquired, status, identity, generation, validity = row
        emit({'op': 'acquire', 'res': res, 't0': t0, 't1': t1, 'status': status,
              'acquired': acquired, 'identity': identity, 'generation': generation,
              'validity_ms': validity})
        if status != 'acquired':
            continue

        # the fenced write
        t2 = time.monotonic()
        stage = 'begin'
        rec = {'op': 'write', 'res': res, 'item': item, 'generation': generation,
               'identity': identity, 't0': t2, 'acq_t0': t0}
        try:
            conn.execute('BEGIN')
            stage = 'set_generation'
            conn.execute('SELECT lease_fence.set_generation(%s)', (generation,))
            stage = 'fence_resource'
            conn.execute('SELECT lease_fence.fence_resource(%s)', (res,))
            stage = 'update'
            v = conn.execute('UPDATE item SET v = v + 1 WHERE id = %s RETURNING v',
                             (item,)).fetchone()[0]
            rec['v'] = v
            stage = 'insert'
            conn.execute('INSERT INTO history (resource, item, v, generation, worker, identity) '
                         'VALUES (%s, %s, %s, %s, %s, %s)',
                         (res, item, v, generation, w, identity))
            stage = 'commit'
            conn.execute('COMMIT')
            rec.update({'t1': time.monotonic(), 'outcome': 'committed'})
        except psycopg.Error as e:
            rec['t1'] = time.monotonic()
            rec['stage'] = stage
            rec.update(err_fields(e))
            st = getattr(e, 'sqlstate', None)
            if stage == 'commit' and broken():
                # the COMMIT was sent: it may have committed
                rec['outcome'] = 'commit_unknown'
            elif st and st.startswith('LF'):
                rec['outcome'] = 'rejected'
            else:
                rec['outcome'] = 'error'
            if not broken():
                try:
                    conn.execute('ROLLBACK')
                except psycopg.Error:
                    pass
        emit(rec)

        # release: once, and once more on a new connection if this one broke
        if broken():
            drop()
            connect()
        if not broken() and not release(res, identity, 1) and broken():
            drop()
            if connect():
                release(res, identity, 2)

    drop()
    log.close()
    return 0


if __name__ == '__main__':
    sys.exit(main())

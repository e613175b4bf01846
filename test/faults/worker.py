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
#     INSERT INTO history (resource, item, v, generation, worker, identity,
#                          resource_fenced);
#     COMMIT
#   then release(resource, identity).
# A fraction of the jobs (--stall, e.g. 0.05) are stalled holders: they
# acquire with --stall-ttl-ms, then sleep that TTL plus --stall-margin-ms
# before the write, so their lease has run out by then (a sleep, not a
# race: Redis expired the key before the write begins) and the write is a
# stale one whenever another holder wrote the row meanwhile.  Half of them
# skip fence_resource, so that the row trigger alone meets their write.
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
#   {"op": "write", ..., "acq_t0" (its acquire's t0), "stall" (a stalled
#    holder's), "resource_fenced" (fence_resource was called), "outcome":
#    "committed" | "rejected" (an LF SQLSTATE) | "error" | "commit_unknown"
#    (the connection broke during COMMIT), "v", "stage", "sqlstate", "error"}
#   {"op": "release", ..., "status", "attempt"}     or "error"
#   {"op": "connect", "t0", "t1", "ok", "error"}
# Lines are written unbuffered, so a killed worker leaves what it saw.
#
#   worker.py --conninfo STR --worker N --resources R --ttl-ms MS
#             --wait-ms MS --log FILE --stop-file FILE [--seed S]
#             [--stall FRACTION --stall-ttl-ms MS --stall-margin-ms MS]

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


class Worker:
    """One client: a PostgreSQL connection as the workers' role, and a log
    of JSON lines.  faults.py uses one too, for a job of its own."""

    def __init__(self, conninfo, w, log_path):
        self.conninfo = conninfo
        self.w = w
        self.log = open(log_path, 'a', buffering=1)
        self.conn = None

    def emit(self, rec):
        rec['w'] = self.w
        self.log.write(json.dumps(rec, separators=(',', ':')) + '\n')

    @staticmethod
    def err_fields(e):
        d = {'error': (str(e).strip().splitlines() or [''])[0][:300],
             'etype': type(e).__name__}
        st = getattr(e, 'sqlstate', None)
        if st:
            d['sqlstate'] = st
        return d

    def connect(self):
        t0 = time.monotonic()
        try:
            self.conn = psycopg.connect(self.conninfo, autocommit=True,
                                        application_name='faults-worker-%d' % self.w)
            # a statement never hangs the run: the longest call is a
            # waiting acquire (wait_ms plus one command timeout)
            self.conn.execute("SET statement_timeout = '30s'")
            self.emit({'op': 'connect', 't0': t0, 't1': time.monotonic(), 'ok': True})
            return True
        except psycopg.Error as e:
            self.conn = None
            rec = {'op': 'connect', 't0': t0, 't1': time.monotonic(), 'ok': False}
            rec.update(self.err_fields(e))
            self.emit(rec)
            return False

    def broken(self):
        return self.conn is None or self.conn.closed or self.conn.broken

    def drop(self):
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:
                pass
        self.conn = None

    def close(self):
        self.drop()
        self.log.close()

    def release(self, res, identity, attempt):
        t0 = time.monotonic()
        try:
            row = self.conn.execute('SELECT released, status FROM lease_fence.release(%s, %s)',
                                    (res, identity)).fetchone()
            self.emit({'op': 'release', 'res': res, 'identity': identity, 'attempt': attempt,
                       't0': t0, 't1': time.monotonic(), 'released': row[0], 'status': row[1]})
            return True
        except psycopg.Error as e:
            rec = {'op': 'release', 'res': res, 'identity': identity, 'attempt': attempt,
                   't0': t0, 't1': time.monotonic(), 'status': None}
            rec.update(self.err_fields(e))
            self.emit(rec)
            return False

    def job(self, item, ttl, wait_ms, stall=False, stall_margin_ms=0, resource_fenced=True):
        """acquire -> (a stall) -> the fenced write -> release, on a
        connection that is up; returns the acquire's status (None when
        the call failed)"""
        lease = self.acquire(item, ttl, wait_ms, stall)
        if lease is None or lease['status'] != 'acquired':
            return lease and lease['status']
        if stall:
            # past the TTL: the key was set before the acquire returned
            time.sleep((ttl + stall_margin_ms) / 1000.0)
        self.write(lease, resource_fenced)
        self.release_lease(lease)
        return lease['status']

    def acquire(self, item, ttl, wait_ms, stall=False):
        """the acquire, logged; its record, or None when the call failed"""
        conn = self.conn
        res = 'res%d' % item

        # acquire
        t0 = time.monotonic()
        try:
            row = conn.execute(
                'SELECT acquired, status, identity, generation, validity_ms '
                "FROM lease_fence.acquire(%s, %s, 0, 'explicit', %s)",
                (res, ttl, wait_ms)).fetchone()
        except psycopg.Error as e:
            rec = {'op': 'acquire', 'res': res, 't0': t0, 't1': time.monotonic(),
                   'status': None}
            rec.update(self.err_fields(e))
            self.emit(rec)
            if self.broken():
                self.drop()
            return None
        t1 = time.monotonic()
        acquired, status, identity, generation, validity = row
        rec = {'op': 'acquire', 'res': res, 't0': t0, 't1': t1, 'status': status,
               'acquired': acquired, 'identity': identity, 'generation': generation,
               'validity_ms': validity, 'ttl_ms': ttl, 'stall': stall}
        self.emit(rec)
        return dict(rec, item=item)

    def write(self, lease, resource_fenced=True):
        """the fenced write under an acquired lease, logged"""
        conn = self.conn
        res, item, generation, identity = lease['res'], lease['item'], lease['generation'], lease['identity']
        stall, t0 = lease['stall'], lease['t0']
        t2 = time.monotonic()
        stage = 'begin'
        rec = {'op': 'write', 'res': res, 'item': item, 'generation': generation,
               'identity': identity, 't0': t2, 'acq_t0': t0, 'stall': stall,
               'resource_fenced': resource_fenced}
        try:
            conn.execute('BEGIN')
            stage = 'set_generation'
            conn.execute('SELECT lease_fence.set_generation(%s)', (generation,))
            if resource_fenced:
                stage = 'fence_resource'
                conn.execute('SELECT lease_fence.fence_resource(%s)', (res,))
            stage = 'update'
            v = conn.execute('UPDATE item SET v = v + 1 WHERE id = %s RETURNING v',
                             (item,)).fetchone()[0]
            rec['v'] = v
            stage = 'insert'
            conn.execute('INSERT INTO history (resource, item, v, generation, worker, identity, '
                         'resource_fenced) VALUES (%s, %s, %s, %s, %s, %s, %s)',
                         (res, item, v, generation, self.w, identity, resource_fenced))
            stage = 'commit'
            conn.execute('COMMIT')
            rec.update({'t1': time.monotonic(), 'outcome': 'committed'})
        except psycopg.Error as e:
            rec['t1'] = time.monotonic()
            rec['stage'] = stage
            rec.update(self.err_fields(e))
            st = getattr(e, 'sqlstate', None)
            if stage == 'commit' and self.broken():
                # the COMMIT was sent: it may have committed
                rec['outcome'] = 'commit_unknown'
            elif st and st.startswith('LF'):
                rec['outcome'] = 'rejected'
            else:
                rec['outcome'] = 'error'
            if not self.broken():
                try:
                    conn.execute('ROLLBACK')
                except psycopg.Error:
                    pass
        self.emit(rec)
        return rec

    def release_lease(self, lease):
        """release: once, and once more on a new connection if this one broke"""
        res, identity = lease['res'], lease['identity']
        if self.broken():
            self.drop()
            self.connect()
        if not self.broken() and not self.release(res, identity, 1) and self.broken():
            self.drop()
            if self.connect():
                self.release(res, identity, 2)


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
    ap.add_argument('--stall', type=float, default=0.0)
    ap.add_argument('--stall-ttl-ms', type=int, default=200)
    ap.add_argument('--stall-margin-ms', type=int, default=100)
    a = ap.parse_args()

    signal.signal(signal.SIGTERM, on_term)
    rng = random.Random(a.seed if a.seed is not None else a.worker)
    wk = Worker(a.conninfo, a.worker, a.log)

    parent = os.getppid()
    backoff = 0.05
    # (a driver that died leaves no worker behind: its children notice)
    while not stopping and not os.path.exists(a.stop_file) and os.getppid() == parent:
        if wk.broken():
            wk.drop()
            if not wk.connect():
                time.sleep(backoff)
                backoff = min(backoff * 2, 0.5)
                continue
            backoff = 0.05
        item = rng.randrange(a.resources)
        stall = rng.random() < a.stall
        wk.job(item, a.stall_ttl_ms if stall else a.ttl_ms, a.wait_ms, stall=stall,
               stall_margin_ms=a.stall_margin_ms, resource_fenced=not stall or rng.random() < 0.5)

    wk.close()
    return 0


if __name__ == '__main__':
    sys.exit(main())

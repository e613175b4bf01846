#!/usr/bin/python3
# test/faults/faults.py — the fault-injection run of lease_fence, Jepsen
# style: workers (test/faults/worker.py, one process and one PostgreSQL
# connection each) loop acquire -> fenced write -> release while the driver
# fails over the servers under them, then the driver checks the histories.
#
# 5 % of the jobs are stalled holders: they sleep past their (200 ms) TTL
# between acquire and write, so their writes are stale whenever another
# holder wrote the row meanwhile (worker.py).
#
# Five scenarios, each with servers of its own (all real: redis-server,
# redis-sentinel, PostgreSQL; TCP on 127.0.0.1 private ports, unix sockets in
# the work dir; stopped at the end of the scenario, whatever happens); the
# faults are timed from the workers' first commits:
#
#   sentinel  a Redis master, two replicas, three redis-sentinels
#             (down-after 1000 ms); PostgreSQL with lease_fence preloaded
#             (the sentinel watch), redis_sentinels / redis_sentinel_master,
#             redis_min_replicas = 1.  Faults: SENTINEL FAILOVER (graceful:
#             the old master stays up, writable, until the sentinels turn it
#             into a replica about ten seconds later), then, once everything
#             is settled again, kill -9 of the current master (restarted
#             later, empty, as a replica of the new one).
#   cluster   a Redis Cluster, 3 masters with a replica each;
#             redis_cluster = on, redis_min_replicas = 1.  Faults: CLUSTER
#             FAILOVER on a replica, then kill -9 of a master (restarted
#             later; it rejoins as a replica).  The shard faulted is the one
#             that serves most of the resources.
#   postgres  a PostgreSQL primary with a synchronous standby
#             (synchronous_standby_names, synchronous_commit = on) and one
#             plain Redis.  Fault: the primary stopped (immediate) and the
#             standby promoted; the workers' connection string names both
#             (target_session_attrs=read-write), so they reconnect to the
#             new primary.
#   lossy     a Redis master and one replica, redis_min_replicas = 0.
#             Faults: the replica cut off (REPLICAOF NO ONE), then, while a
#             holder of the old master stalls, lease_fence pointed at the
#             replica (ALTER SYSTEM, reload) and the lease asked of it by a
#             second holder: a double grant, the older holder writing last.
#   postgres-async  as postgres, with an asynchronous standby.  Faults: the
#             standby cut off (primary_conninfo emptied), then, once the
#             primary committed under generations the standby never got,
#             the failover: acknowledged writes are lost (expected).
#
# The workers run as the role "app", which owns nothing and has EXECUTE on
# acquire / renew / release / fence_resource (docs/security.md, "Privileges"), SELECT
# and UPDATE on item, INSERT on history.
#
# Checks, per scenario, each one test point ("ok - <scenario>: <property>:
# ..." / "not ok - ..."), then "N passed, N failed" over all scenarios.
# Each point prints the evidence it saw, and a property with no evidence
# fails ("had no chance to fail"):
#   - progress: every fault was injected, with acquired-and-committed cycles
#     before it and after it;
#   - unique generations: no generation returned as acquired twice
#     (evidence: in the PostgreSQL scenarios, generations acquired after the
#     promotion, and in postgres-async between the cut and the failover);
#   - stale writes refused: every write under a generation lower than one
#     committed on its row (acknowledged before it began, and in the
#     history) was refused with LF001 (evidence: such writes, with the row
#     trigger alone and with fence_resource);
#   - no fence lowered: per item row the committed history, in commit order
#     (the row's counter v), has strictly increasing generations, v runs
#     1..n, and the row's fence and its resource's fence are the highest
#     committed (evidence: stale writes attempted);
#   - mutual exclusion: no two holders reported for one resource at one
#     time: a holder holds from its acquire returning to the earlier of its
#     release being sent and its acquire's sending + validity_ms; two such
#     intervals of one resource with different identities must not overlap
#     at all (a release still in flight when the next holder's acquire
#     returns is a handover: the release deleted the key and woke the
#     waiter on Redis before its reply was back; those are counted, and
#     shown as "in flight"); in lossy, overlaps in the cut's window are
#     double grants, expected (evidence: acquires that had to wait for
#     another holder);
#   - double grants (lossy): every older holder of a double grant that wrote
#     after the newer one committed was refused with LF001 (evidence: double
#     grants, and such writes);
#   - statuses: every status is a documented one (docs/guides/leases.md,
#     "Statuses"), and no write follows an unknown under that generation by
#     that worker;
#   - history: every write whose COMMIT was acknowledged is in the history
#     (postgres-async: lost ones are counted, expected), and every history
#     row is a write of an acquire that returned acquired to that worker
#     with that generation and identity.
# and, per fault, availability: cycles (acquired, and the write committed)
# per second before it, during it (to the first cycle committed after the
# longest stall that followed it, when that stall was 0.25 s or more; else
# to the first cycle begun once the injection was done) and after it, with
# the unavailable / unknown / other outcomes of each window.
#
# Settings (environment): LF_FAULTS_SECONDS (per scenario, default 20; a
# scenario runs longer when a fault needs the servers to settle first),
# LF_FAULTS_WORKERS (6), LF_FAULTS_RESOURCES (3), LF_FAULTS_SCENARIOS
# ("sentinel cluster postgres lossy postgres-async"), LF_FAULTS_TTL_MS
# (3000), LF_FAULTS_WAIT_MS (2000), LF_FAULTS_SEED, LF_FAULTS_STALL (0.05),
# LF_FAULTS_STALL_TTL_MS (200).
#
#   faults.py --pg-bin DIR --work DIR
# Run as the user PostgreSQL runs as (test/faults/run.sh and test/run.sh do
# that); the extension must be installed in the installation of --pg-bin.

import argparse
import bisect
import collections
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import traceback

import psycopg
import redis

mono = time.monotonic
HERE = os.path.dirname(os.path.abspath(__file__))

ACQUIRE_STATUSES = {'acquired', 'busy', 'stale', 'insufficient_validity',
                    'unreplicated', 'unavailable', 'unknown'}
RELEASE_STATUSES = {'released', 'not_held', 'unavailable', 'unknown'}

SETTLE_TIMEOUT = 60.0


def program(name, env):
    """A Redis program: the environment's choice, else the first on PATH."""
    path = os.environ.get(env) or shutil.which(name)
    if not path:
        raise SystemExit('faults: no %s on PATH; set %s' % (name, env))
    return path


def env_num(name, default, kind=float):
    v = os.environ.get(name, '')
    return kind(v) if v.strip() else default


SECONDS = env_num('LF_FAULTS_SECONDS', 20.0)
WORKERS = env_num('LF_FAULTS_WORKERS', 6, int)
RESOURCES = env_num('LF_FAULTS_RESOURCES', 3, int)
TTL_MS = env_num('LF_FAULTS_TTL_MS', 3000, int)
WAIT_MS = env_num('LF_FAULTS_WAIT_MS', 2000, int)
SEED = env_num('LF_FAULTS_SEED', int(time.time()) % 100000, int)
ALL_SCENARIOS = ['sentinel', 'cluster', 'postgres', 'lossy', 'postgres-async']
SCENARIOS = os.environ.get('LF_FAULTS_SCENARIOS', '').split() or ALL_SCENARIOS
# stalled holders: this fraction of the jobs acquire with STALL_TTL_MS and
# sleep that TTL plus STALL_MARGIN_MS before they write
STALL = env_num('LF_FAULTS_STALL', 0.05)
STALL_TTL_MS = env_num('LF_FAULTS_STALL_TTL_MS', 200, int)
STALL_MARGIN_MS = 100


def say(msg=''):
    print(msg, flush=True)


def note(msg):
    # progress on stderr, test points and the report on stdout
    print('== faults: ' + msg, file=sys.stderr, flush=True)


class HarnessError(Exception):
    pass


def wait_for(what, cond, timeout=SETTLE_TIMEOUT, every=0.05):
    deadline = mono() + timeout
    while True:
        try:
            if cond():
                return
        except (redis.RedisError, psycopg.Error, OSError):
            pass
        if mono() > deadline:
            raise HarnessError('timed out waiting for ' + what)
        time.sleep(every)


# ----------------------------------------------------------------------
# servers

used_ports = set()


def free_port():
    """A free 127.0.0.1 port p whose p + 10000 (a Cluster bus) is free too."""
    rng = random.Random()
    for _ in range(500):
        p = rng.randint(20000, 29999)
        if p in used_ports:
            continue
        ok = True
        for q in (p, p + 10000):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind(('127.0.0.1', q))
            except OSError:
                ok = False
            finally:
                s.close()
        if ok:
            used_ports.add(p)
            return p
    raise HarnessError('no free port')


LIVE = []   # every server started, for the clean-up


class Redis:
    """A redis-server (or redis-sentinel) of this run: 127.0.0.1:port and a
    unix socket in its own directory, nothing on disk."""

    def __init__(self, work, name, extra=(), sentinel=None):
        self.name = name
        self.dir = os.path.join(work, name)
        os.makedirs(self.dir, exist_ok=True)
        self.port = free_port()
        self.sock = os.path.join(self.dir, 'redis.sock')
        self.log = os.path.join(self.dir, 'redis.log')
        self.extra = list(extra)
        self.sentinel = sentinel      # (master name, master port) for a sentinel
        self.proc = None
        LIVE.append(self)

    def command(self):
        if self.sentinel:
            conf = os.path.join(self.dir, 'sentinel.conf')
            if not os.path.exists(conf):
                mname, mport = self.sentinel
                with open(conf, 'w') as f:
                    f.write('\n'.join([
                        'port %d' % self.port, 'bind 127.0.0.1', 'dir ' + self.dir,
                        'logfile ' + self.log, 'daemonize no',
                        'sentinel monitor %s 127.0.0.1 %d 2' % (mname, mport),
                        'sentinel down-after-milliseconds %s 1000' % mname,
                        'sentinel failover-timeout %s 3000' % mname,
                        'sentinel parallel-syncs %s 1' % mname]) + '\n')
            return [program('redis-sentinel', 'LF_REDIS_SENTINEL'), conf]
        return [program('redis-server', 'LF_REDIS_SERVER'), '--port', str(self.port), '--bind', '127.0.0.1',
                '--unixsocket', self.sock, '--unixsocketperm', '700',
                '--dir', self.dir, '--logfile', self.log,
                '--save', '', '--appendonly', 'no', '--daemonize', 'no',
                '--repl-diskless-sync-delay', '0'] + self.extra

    def start(self, extra=None):
        if extra is not None:
            self.extra = list(extra)
        if self.proc is not None:
            raise HarnessError(self.name + ' already running')
        with open(os.path.join(self.dir, 'stdout.log'), 'ab') as out:
            self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL,
                                         stdout=out, stderr=subprocess.STDOUT, cwd=self.dir)
        with open(os.path.join(self.dir, 'pid'), 'w') as f:
            f.write('%d\n' % self.proc.pid)
        deadline = mono() + 30
        while True:
            if self.proc.poll() is not None:
                self.proc = None
                raise HarnessError('%s exited at start:\n%s' % (self.name, tail(self.log)))
            try:
                if self.client().ping():
                    return self
            except redis.RedisError:
                pass
            if mono() > deadline:
                raise HarnessError('%s does not answer PING:\n%s' % (self.name, tail(self.log)))
            time.sleep(0.05)

    def client(self, timeout=2.0):
        return redis.Redis(host='127.0.0.1', port=self.port, decode_responses=True,
                           socket_timeout=timeout, socket_connect_timeout=1.0)

    def cmd(self, *args):
        c = self.client()
        try:
            return c.execute_command(*args)
        finally:
            c.close()

    def info(self, section):
        return self.cmd('INFO', section)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill9(self):
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.proc = None
        try:
            os.unlink(self.sock)
        except OSError:
            pass

    def stop(self):
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


def tail(path, n=30):
    try:
        with open(path, errors='replace') as f:
            return ''.join(f.readlines()[-n:])
    except OSError:
        return '(no %s)\n' % path


class PG:
    """A PostgreSQL server of this run: unix socket in its own directory."""

    def __init__(self, work, name, pg_bin):
        self.name = name
        self.dir = os.path.join(work, name)
        os.makedirs(self.dir, exist_ok=True)
        self.data = os.path.join(self.dir, 'data')
        self.log = os.path.join(self.dir, 'postgres.log')
        self.port = 5432
        self.bin = pg_bin
        self.running = False
        LIVE.append(self)

    def run(self, *args, check=True):
        r = subprocess.run([os.path.join(self.bin, args[0])] + list(args[1:]),
                           stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if check and r.returncode != 0:
            raise HarnessError('%s failed:\n%s%s' % (' '.join(args), r.stdout, r.stderr))
        return r

    def conf_lines(self):
        return ["listen_addresses = ''", "unix_socket_directories = '%s'" % self.dir,
                'port = %d' % self.port, 'fsync = off', "log_line_prefix = '%m [%p] '"]

    def init(self, conf):
        self.run('initdb', '-D', self.data, '-U', 'postgres', '-A', 'trust', '--no-sync',
                 '--locale=C.UTF-8', '-E', 'UTF8')
        self.append_conf(self.conf_lines() + conf)

    def append_conf(self, lines):
        with open(os.path.join(self.data, 'postgresql.conf'), 'a') as f:
            f.write('\n'.join(lines) + '\n')

    def start(self):
        self.run('pg_ctl', '-D', self.data, '-l', self.log, '-w', '-t', '60', 'start')
        self.running = True

    def stop(self, mode='fast'):
        if not os.path.exists(os.path.join(self.data, 'postmaster.pid')):
            self.running = False
            return
        r = self.run('pg_ctl', '-D', self.data, '-m', mode, '-w', '-t', '30', 'stop', check=False)
        if r.returncode != 0 and mode != 'immediate':
            self.run('pg_ctl', '-D', self.data, '-m', 'immediate', '-w', 'stop', check=False)
        self.running = False

    def promote(self):
        self.run('pg_ctl', '-D', self.data, '-w', '-t', '60', 'promote')

    def conninfo(self, db='postgres', user='postgres'):
        return 'host=%s port=%d dbname=%s user=%s' % (self.dir, self.port, db, user)

    def sql(self, q, db='postgres', params=None):
        with psycopg.connect(self.conninfo(db), autocommit=True, connect_timeout=10,
                             options='-c statement_timeout=60s') as c:
            cur = c.execute(q, params)
            return cur.fetchall() if cur.description else None


def stop_all():
    for s in reversed(LIVE):
        try:
            if isinstance(s, PG):
                s.stop('immediate')
            else:
                s.stop()
        except Exception as e:  # keep stopping the others
            note('stopping %s: %s' % (s.name, e))
    del LIVE[:]


# ----------------------------------------------------------------------
# the database the workers write

def setup_database(pg):
    pg.sql('CREATE DATABASE faults')
    with psycopg.connect(pg.conninfo('faults'), autocommit=True, options='-c statement_timeout=60s') as c:
        c.execute('CREATE EXTENSION lease_fence')
        c.execute('CREATE TABLE item (id int PRIMARY KEY, resource text NOT NULL UNIQUE, '
                  'v bigint NOT NULL DEFAULT 0)')
        c.execute("INSERT INTO item (id, resource) SELECT i, 'res' || i "
                  'FROM generate_series(0, %d) i' % (RESOURCES - 1))
        c.execute("SELECT lease_fence.protect('item')")
        c.execute('CREATE TABLE history (resource text NOT NULL, item int NOT NULL, '
                  'v bigint NOT NULL, generation bigint NOT NULL, worker int NOT NULL, '
                  'identity text NOT NULL, resource_fenced boolean NOT NULL, '
                  'committed_at timestamptz NOT NULL DEFAULT clock_timestamp())')
        c.execute('CREATE ROLE app LOGIN')
        c.execute('GRANT EXECUTE ON FUNCTION '
                  'lease_fence.acquire(text, bigint, bigint, text, bigint, boolean, boolean), '
                  'lease_fence.renew(text, text, bigint, bigint), '
                  'lease_fence.release(text, text), '
                  'lease_fence.fence_resource(text) TO app')
        c.execute('GRANT SELECT, UPDATE ON item TO app')
        c.execute('GRANT SELECT, INSERT ON history TO app')


def read_count(conninfo):
    with psycopg.connect(conninfo, autocommit=True, connect_timeout=5,
                         options='-c statement_timeout=10s') as c:
        return c.execute('SELECT count(*) FROM history').fetchone()[0]


def read_final(conninfo):
    with psycopg.connect(conninfo, autocommit=True, options='-c statement_timeout=60s') as c:
        hist = c.execute('SELECT resource, item, v, generation, worker, identity, resource_fenced '
                         'FROM history ORDER BY item, v').fetchall()
        items = c.execute('SELECT id, resource, v, fence FROM item ORDER BY id').fetchall()
        fences = dict(c.execute('SELECT resource, generation FROM lease_fence.resource_fences').fetchall())
    return hist, items, fences


# ----------------------------------------------------------------------
# scenarios: servers, faults

class Fault:
    def __init__(self, name, at, ready, inject, settled, after=None):
        self.name = name
        self.at = at            # fraction of SECONDS: not before then
        self.ready = ready      # the servers are in a state to inject it
        self.inject = inject    # returns a description
        self.settled = settled  # the servers are settled after it
        self.after = after      # run once settled (a restart)
        self.t = None           # the injection began
        self.t_done = None      # and was done (a process reaped, a promotion over)
        self.t_settled = None
        self.what = ''


class SentinelScenario:
    name = 'sentinel'

    def __init__(self, work, pg_bin):
        self.work = work
        self.pg_bin = pg_bin
        self.master_name = 'lf'

    def setup(self):
        m = Redis(self.work, 'redis1').start()
        self.nodes = [m] + [Redis(self.work, 'redis%d' % i, ['--replicaof', '127.0.0.1', str(m.port)]).start()
                            for i in (2, 3)]
        wait_for('the replicas to sync', lambda: all(
            n.info('replication').get('master_link_status') == 'up' for n in self.nodes[1:]))
        self.sentinels = [Redis(self.work, 'sentinel%d' % i, sentinel=(self.master_name, m.port)).start()
                          for i in (1, 2, 3)]
        wait_for('the sentinels to settle', lambda: self.settled(2))
        self.pg = PG(self.work, 'pg', self.pg_bin)
        self.pg.init(["shared_preload_libraries = 'lease_fence'",
                      "lease_fence.redis_sentinels = '%s'" % ','.join(
                          '127.0.0.1:%d' % s.port for s in self.sentinels),
                      "lease_fence.redis_sentinel_master = '%s'" % self.master_name,
                      'lease_fence.redis_min_replicas = 1'])
        self.pg.start()
        setup_database(self.pg)
        self.conninfo = self.pg.conninfo('faults', 'app')
        self.final_conninfo = self.pg.conninfo('faults')
        self.logs = [self.pg.log]
        self.faults = [
            Fault('SENTINEL FAILOVER', 0.2, lambda: self.settled(2), self.failover,
                  lambda: self.settled(2, moved_from=self.before)),
            Fault('kill -9 of the master', 0.55, lambda: self.settled(2), self.kill_master,
                  lambda: self.settled(1, moved_from=self.before), self.restart_killed),
        ]

    def node_at(self, port):
        for n in self.nodes:
            if n.port == port:
                return n
        return None

    def views(self):
        out = []
        for s in self.sentinels:
            raw = s.cmd('SENTINEL', 'MASTER', self.master_name)
            d = dict(zip(raw[0::2], raw[1::2]))
            out.append(d)
        return out

    def master_port(self):
        """The port every sentinel names, none reporting anything amiss; else None."""
        vs = self.views()
        ports = {int(v['port']) for v in vs}
        if len(ports) != 1 or any(v['flags'] != 'master' for v in vs):
            return None
        return ports.pop()

    def settled(self, replicas, moved_from=None):
        port = self.master_port()
        if port is None or (moved_from is not None and port == moved_from):
            return False
        m = self.node_at(port)
        if m is None or not m.alive():
            return False
        info = m.info('replication')
        if info.get('role') != 'master' or int(info.get('connected_slaves', 0)) < replicas:
            return False
        online = sum(1 for k, v in info.items()
                     if re.match(r'slave\d+$', k) and isinstance(v, dict) and v.get('state') == 'online')
        if online < replicas:
            return False
        for s in self.sentinels:
            raw = s.cmd('SENTINEL', 'MASTER', self.master_name)
            d = dict(zip(raw[0::2], raw[1::2]))
            if int(d['num-other-sentinels']) != 2:
                return False
        self.current = m
        return True

    def failover(self):
        self.before = self.current.port
        self.sentinels[0].cmd('SENTINEL', 'FAILOVER', self.master_name)
        return 'master 127.0.0.1:%d, asked of sentinel 127.0.0.1:%d' % (self.before, self.sentinels[0].port)

    def kill_master(self):
        self.before = self.current.port
        self.killed = self.current
        self.killed.kill9()
        return 'master 127.0.0.1:%d killed' % self.before

    def restart_killed(self):
        new = self.current
        self.killed.start(['--replicaof', '127.0.0.1', str(new.port)])
        wait_for('the killed master to sync as a replica',
                 lambda: self.killed.info('replication').get('master_link_status') == 'up')
        return 'old master 127.0.0.1:%d restarted as a replica of 127.0.0.1:%d' % (self.killed.port, new.port)

    def describe_settled(self):
        return 'master now 127.0.0.1:%d' % self.current.port

    def topology_events(self):
        """What the sentinels did, from their logs: (wall time, text),
        each event once (the earliest sentinel to log it)."""
        want = ('+try-failover', '+elected-leader', '+selected-slave', '+promoted-slave',
                '+switch-master', '+convert-to-slave', '+sdown master', '-sdown master',
                '+odown', '-odown', '+failover-end')
        seen = {}
        for i, sn in enumerate(self.sentinels, 1):
            try:
                lines = open(sn.log, errors='replace').read().splitlines()
            except OSError:
                continue
            for line in lines:
                m = re.match(r'\d+:X (\d+ \w+ \d+ [\d:]+)\.(\d+) [#*] (\S+ \S+)(.*)', line)
                if not m or not m.group(3).startswith(want):
                    continue
                when = time.mktime(time.strptime(m.group(1), '%d %b %Y %H:%M:%S')) + int(m.group(2)) / 1000.0
                text = (m.group(3) + m.group(4)).replace('127.0.0.1 ', '').replace('127.0.0.1:', '')
                text = re.sub(r' @ lf \d+$', '', text)
                per = text.startswith(('+sdown', '-sdown', '+odown', '-odown', '+elected'))
                key = (text + ' (sentinel%d)' % i) if per else text
                if key not in seen or when < seen[key]:
                    seen[key] = when
        return sorted((w, k) for k, w in seen.items())


class ClusterScenario:
    name = 'cluster'

    def __init__(self, work, pg_bin):
        self.work = work
        self.pg_bin = pg_bin

    def setup(self):
        extra = ['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf',
                 '--cluster-node-timeout', '1000', '--cluster-replica-validity-factor', '0']
        self.nodes = [Redis(self.work, 'node%d' % i, extra).start() for i in range(1, 7)]
        r = subprocess.run([program('redis-cli', 'LF_REDIS_CLI'), '--cluster', 'create'] +
                           ['127.0.0.1:%d' % n.port for n in self.nodes] +
                           ['--cluster-replicas', '1', '--cluster-yes'],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise HarnessError('redis-cli --cluster create failed:\n' + r.stdout + r.stderr)
        wait_for('the cluster to be ready', lambda: self.healthy())
        # the shard that serves most of the resources
        slots = {}
        for i in range(RESOURCES):
            slots[i] = int(self.nodes[0].cmd('CLUSTER', 'KEYSLOT', 'lease_fence:{res%d}' % i))
        owners = collections.Counter(self.owner(slots[i]).port for i in range(RESOURCES))
        first = self.owner(slots[0]).port
        best = max(owners.items(), key=lambda kv: (kv[1], kv[0] == first))[0]
        self.shard = [self.node_at(best)] + [n for n in self.nodes if self.replica_of(n) == best]
        self.shard_desc = 'the shard of %s' % ', '.join(
            'res%d' % i for i in range(RESOURCES) if self.owner(slots[i]).port == best)
        seed = self.nodes[0]
        self.pg = PG(self.work, 'pg', self.pg_bin)
        self.pg.init(["shared_preload_libraries = 'lease_fence'",
                      'lease_fence.redis_cluster = on',
                      "lease_fence.redis_host = '127.0.0.1'",
                      'lease_fence.redis_port = %d' % seed.port,
                      'lease_fence.redis_min_replicas = 1'])
        self.pg.start()
        setup_database(self.pg)
        self.conninfo = self.pg.conninfo('faults', 'app')
        self.final_conninfo = self.pg.conninfo('faults')
        self.logs = [self.pg.log]
        self.faults = [
            Fault('CLUSTER FAILOVER', 0.2, lambda: self.healthy(), self.manual_failover,
                  lambda: self.healthy(moved_from=self.before)),
            Fault('kill -9 of a master', 0.55, lambda: self.healthy(), self.kill_master,
                  lambda: self.healthy(replicas=False, moved_from=self.before), self.restart_killed),
        ]

    def node_at(self, port):
        for n in self.nodes:
            if n.port == port:
                return n
        return None

    def table(self, node):
        """CLUSTER NODES as node sees it: {port: (id, flags, master id, slots)}"""
        out = {}
        for line in node.cmd('CLUSTER', 'NODES').splitlines():
            f = line.split()
            port = int(re.match(r'[^:]*:(\d+)', f[1]).group(1))
            out[port] = (f[0], f[2].split(','), f[3], f[8:])
        return out

    def owner(self, slot, ask=None):
        ask = ask or next(n for n in self.nodes if n.alive())
        for port, (nid, flags, master, ranges) in self.table(ask).items():
            if 'master' not in flags or 'fail' in flags or 'fail?' in flags:
                continue
            for r in ranges:
                if r.startswith('['):
                    continue
                lo, _, hi = r.partition('-')
                if int(lo) <= slot <= int(hi or lo):
                    return self.node_at(port)
        return None

    def replica_of(self, node):
        """The port of node's master, or None for a master."""
        t = self.table(node)
        me = next(v for v in t.values() if 'myself' in v[1])
        if 'slave' not in me[1]:
            return None
        for port, v in t.items():
            if v[0] == me[2]:
                return port
        return None

    def healthy(self, replicas=True, moved_from=None):
        """Every running node says cluster_state:ok and agrees on the
        masters of the faulted shard; with replicas, every master has an
        online replica.  Sets self.master (the shard's master)."""
        alive = [n for n in self.nodes if n.alive()]
        masters = set()
        for n in alive:
            if 'cluster_state:ok' not in n.cmd('CLUSTER', 'INFO'):
                return False
            t = self.table(n)
            ms = frozenset(p for p, v in t.items() if 'master' in v[1] and 'fail' not in v[1]
                           and 'fail?' not in v[1] and v[3])
            masters.add(ms)
        if len(masters) != 1:
            return False
        ms = masters.pop()
        if len(ms) != 3:
            return False
        if hasattr(self, 'shard'):
            mine = [n for n in self.shard if n.port in ms]
            if len(mine) != 1 or not mine[0].alive():
                return False
            if moved_from is not None and mine[0].port == moved_from:
                return False
            self.master = mine[0]
        if replicas:
            for p in ms:
                info = self.node_at(p).info('replication')
                if not any(re.match(r'slave\d+$', k) and isinstance(v, dict) and v.get('state') == 'online'
                           for k, v in info.items()):
                    return False
        return True

    def manual_failover(self):
        self.before = self.master.port
        replica = next(n for n in self.shard if n is not self.master)
        replica.cmd('CLUSTER', 'FAILOVER')
        return 'replica 127.0.0.1:%d of master 127.0.0.1:%d (%s)' % (replica.port, self.before, self.shard_desc)

    def kill_master(self):
        self.before = self.master.port
        self.killed = self.master
        self.killed.kill9()
        return 'master 127.0.0.1:%d killed (%s)' % (self.before, self.shard_desc)

    def restart_killed(self):
        self.killed.start()
        wait_for('the killed master to rejoin as a replica', lambda: (
            self.replica_of(self.killed) == self.master.port and
            self.killed.info('replication').get('master_link_status') == 'up'))
        return 'old master 127.0.0.1:%d rejoined as a replica of 127.0.0.1:%d' % (
            self.killed.port, self.master.port)

    def describe_settled(self):
        return 'shard master now 127.0.0.1:%d' % self.master.port


class PostgresScenario:
    name = 'postgres'
    synchronous = True

    def __init__(self, work, pg_bin):
        self.work = work
        self.pg_bin = pg_bin

    def setup(self):
        self.redis = Redis(self.work, 'redis').start()
        p = PG(self.work, 'primary', self.pg_bin)
        p.init(["shared_preload_libraries = 'lease_fence'",
                "lease_fence.redis_socket = '%s'" % self.redis.sock,
                'synchronous_commit = on'])
        p.start()
        setup_database(p)
        s = PG(self.work, 'standby', self.pg_bin)
        p.run('pg_basebackup', '-h', p.dir, '-p', str(p.port), '-U', 'postgres',
              '-D', s.data, '-X', 'stream', '-c', 'fast')
        # the standby's own socket; once promoted it has no standby of its
        # own to wait for
        s.append_conf(s.conf_lines() + [
            "synchronous_standby_names = ''",
            "primary_conninfo = 'host=%s port=%d user=postgres application_name=standby'" % (p.dir, p.port)])
        open(os.path.join(s.data, 'standby.signal'), 'w').close()
        s.start()
        self.primary, self.standby = p, s
        if self.synchronous:
            # synchronous from now on (set before, the base backup's commits
            # would wait for a standby that does not exist yet)
            p.sql("ALTER SYSTEM SET synchronous_standby_names = 'standby'")
            p.sql('SELECT pg_reload_conf()')
            wait_for('the standby to be synchronous', lambda: p.sql(
                "SELECT sync_state FROM pg_stat_replication WHERE application_name = 'standby'") == [('sync',)])
        else:
            wait_for('the standby to stream', self.streaming)
        self.conninfo = ('host=%s,%s port=%d,%d dbname=faults user=app '
                         'target_session_attrs=read-write connect_timeout=2' % (p.dir, s.dir, p.port, s.port))
        self.final_conninfo = self.conninfo.replace('user=app', 'user=postgres')
        self.logs = [p.log, s.log]
        self.faults = self.make_faults()

    def make_faults(self):
        return [Fault('primary stopped (immediate), standby promoted', 0.35, lambda: True,
                      self.fail_over, self.promoted)]

    def streaming(self):
        return self.primary.sql("SELECT state FROM pg_stat_replication "
                                "WHERE application_name = 'standby'") == [('streaming',)]

    def fail_over(self):
        self.primary.stop('immediate')
        self.promote_started = mono()
        self.standby.promote()
        return 'standby promoted %.2f s after the primary stopped' % (mono() - self.promote_started)

    def promoted(self):
        return self.standby.sql('SELECT pg_is_in_recovery()') == [(False,)]

    def describe_settled(self):
        return 'the standby is the primary'

    def promotion(self):
        return self.faults[-1]


class PostgresAsyncScenario(PostgresScenario):
    """The same, with an asynchronous standby that is cut off first: the
    primary goes on committing (and handing out generations) that the
    standby never receives, then fails over to it.  Acknowledged writes and
    fences are lost, as docs/guides/failover-and-generations.md says they
    can be; what must hold is that no generation is handed out twice."""
    name = 'postgres-async'
    synchronous = False

    def make_faults(self):
        return [
            Fault("replication cut (the standby's primary_conninfo emptied)", 0.25,
                  self.streaming, self.cut, self.cut_off),
            Fault('primary stopped (immediate), standby promoted', 0.45, self.primary_ahead,
                  self.fail_over, self.promoted),
        ]

    def cut(self):
        self.cut_gen = self.top_generation()
        self.standby.sql("ALTER SYSTEM SET primary_conninfo = ''")
        self.standby.sql('SELECT pg_reload_conf()')
        return 'the standby stops receiving WAL'

    def cut_off(self):
        return (self.standby.sql('SELECT count(*) FROM pg_stat_wal_receiver') == [(0,)] and
                self.primary.sql('SELECT count(*) FROM pg_stat_replication') == [(0,)])

    def top_generation(self):
        return self.primary.sql('SELECT coalesce(max(generation), 0) FROM history', db='faults')[0][0]

    def primary_ahead(self):
        """The primary committed since the cut, under a generation drawn
        since, what the standby never got."""
        got = self.standby.sql('SELECT pg_last_wal_receive_lsn()::text')[0][0]
        return (self.top_generation() > self.cut_gen and
                self.primary.sql('SELECT pg_current_wal_lsn() > %s::pg_lsn', params=(got,))[0][0])


class LossyScenario:
    """Redis without the replica acknowledgement: a master and one replica,
    redis_min_replicas = 0.  The replica is cut off (REPLICAOF NO ONE: it
    keeps the data it had); a holder takes a lease from the old master and
    stalls; the operator points lease_fence at the cut replica (ALTER
    SYSTEM, reload); a second holder asks the replica for the same lease and
    gets it: a double grant.  The stalled holder then writes after the newer
    one, and the fence must refuse it.  The two holders are the driver's
    own clients (their logs follow the workers'; they connect as the
    superuser, the one role that may read where lease_fence connects, and
    the fence applies to it too), so that the double grant happens every
    run; the workers meanwhile run on, stalled holders and all.  Two
    holders at one time are expected in the cut's window only."""
    name = 'lossy'
    item = 0

    def __init__(self, work, pg_bin):
        self.work = work
        self.pg_bin = pg_bin

    def setup(self):
        self.master = Redis(self.work, 'redis1').start()
        self.replica = Redis(self.work, 'redis2', ['--replicaof', '127.0.0.1', str(self.master.port)]).start()
        wait_for('the replica to sync', self.linked)
        self.pg = PG(self.work, 'pg', self.pg_bin)
        self.pg.init(["shared_preload_libraries = 'lease_fence'",
                      "lease_fence.redis_host = '127.0.0.1'",
                      'lease_fence.redis_port = %d' % self.master.port,
                      'lease_fence.redis_min_replicas = 0'])
        self.pg.start()
        setup_database(self.pg)
        self.conninfo = self.pg.conninfo('faults', 'app')
        self.final_conninfo = self.pg.conninfo('faults')
        self.logs = [self.pg.log]
        self.faults = [
            Fault('replication cut (REPLICAOF NO ONE on the replica)', 0.3, self.linked, self.cut,
                  lambda: self.replica.info('replication').get('role') == 'master'),
            Fault('lease_fence pointed at the cut replica while a holder of the old master stalls', 0.45,
                  self.replica_free, self.switch, self.switched),
        ]

    def linked(self):
        return self.replica.info('replication').get('master_link_status') == 'up'

    def cut(self):
        self.replica.cmd('REPLICAOF', 'NO', 'ONE')
        return 'replica 127.0.0.1:%d of master 127.0.0.1:%d' % (self.replica.port, self.master.port)

    def replica_free(self):
        """The lease the replica kept from before the cut has expired (no
        one writes to it now): the second holder will not wait for it."""
        return int(self.replica.cmd('PTTL', 'lease_fence:{res%d}' % self.item)) == -2

    def client(self, n):
        import worker
        wk = worker.Worker(self.final_conninfo, WORKERS + n, os.path.join(self.logdir, 'w%d.jsonl' % (WORKERS + n)))
        if not wk.connect():
            raise HarnessError('the driver cannot connect as a client')
        return wk

    def switch(self):
        old, new = self.client(0), self.client(1)
        try:
            # the first holder: from the old master (waiting its turn)
            for _ in range(10):
                a = old.acquire(self.item, TTL_MS, WAIT_MS)
                if a is not None and a['status'] == 'acquired':
                    break
            else:
                raise HarnessError('the first holder did not get res%d: %s' % (self.item, a and a['status']))
            self.pg.sql('ALTER SYSTEM SET lease_fence.redis_port = %d' % self.replica.port)
            self.pg.sql('SELECT pg_reload_conf()')
            # the second holder's backend has the new setting (it reads it
            # between statements, once the reload's signal is there)
            wait_for('the reload', lambda: new.conn.execute('SHOW lease_fence.redis_port').fetchone()[0]
                     == str(self.replica.port), every=0.005)
            b = new.acquire(self.item, TTL_MS, WAIT_MS)
            if b is not None and b['status'] == 'acquired':
                new.write(b)
                new.release_lease(b)
            # the first holder wakes up, and writes
            w = old.write(a)
            old.release_lease(a)
        finally:
            old.close()
            new.close()
        return ('redis_port = %d, reloaded; res%d: the first holder (generation %d) got it from the old '
                'master, the second from the replica: %s%s; the first one\'s write then: %s %s' % (
                    self.replica.port, self.item, a['generation'], b and b['status'],
                    ' (generation %d)' % b['generation'] if b and b['generation'] else '',
                    w['outcome'], w.get('sqlstate', '')))

    def switched(self):
        return self.pg.sql('SHOW lease_fence.redis_port') == [(str(self.replica.port),)]

    def describe_settled(self):
        return 'the replica is a master; lease_fence.redis_port = %s' % self.pg.sql('SHOW lease_fence.redis_port')[0][0]

    def lossy_window(self):
        """From the cut to when no holder of the old master can be left:
        a waiting acquire begun on it, and the lease it got."""
        cut, switch = self.faults
        if cut.t is None:
            return None
        end = (switch.t_done if switch.t_done is not None else float('inf'))
        return cut.t, end + (WAIT_MS + TTL_MS) / 1000.0 + 1.0


# ----------------------------------------------------------------------
# running a scenario

def run_scenario(sc, work):
    """Set up, run the workers through the faults, stop them; returns
    (the workers' records, events, t0, t_end, the final tables, problems)."""
    sc.setup()
    note('%s: servers up, %d workers for %.0f s' % (sc.name, WORKERS, SECONDS))
    logdir = os.path.join(work, 'workers')
    os.makedirs(logdir, exist_ok=True)
    stop_file = os.path.join(work, 'stop')
    workers = []
    errs = []
    for i in range(WORKERS):
        errs.append(open(os.path.join(logdir, 'w%d.err' % i), 'w'))
        workers.append(subprocess.Popen(
            [sys.executable, os.path.join(HERE, 'worker.py'), '--conninfo', sc.conninfo,
             '--worker', str(i), '--resources', str(RESOURCES), '--ttl-ms', str(TTL_MS),
             '--wait-ms', str(WAIT_MS), '--log', os.path.join(logdir, 'w%d.jsonl' % i),
             '--stop-file', stop_file, '--seed', str(SEED * 100 + i),
             '--stall', str(STALL), '--stall-ttl-ms', str(STALL_TTL_MS),
             '--stall-margin-ms', str(STALL_MARGIN_MS)],
            stdin=subprocess.DEVNULL, stderr=errs[-1]))
    t0 = mono()
    sc.wall0 = time.time()
    sc.logdir = logdir
    events = []
    problems = []
    try:
        # the faults are timed from when the workers commit (starting six
        # Python processes can take seconds on a loaded machine)
        wait_for('the workers to commit', lambda: read_count(sc.final_conninfo) >= 2 * WORKERS)
        t_warm = mono()
        last = t_warm
        for f in sc.faults:
            not_before = t_warm + max(f.at * SECONDS, 1.0)
            while mono() < not_before:
                time.sleep(0.05)
            try:
                wait_for('the servers to be ready for ' + f.name, f.ready)
            except HarnessError as e:
                problems.append('%s: not injected: %s' % (f.name, e))
                break
            f.t = mono()
            f.what = f.inject()
            f.t_done = mono()
            note('%s: %.2f s: %s: %s' % (sc.name, f.t - t0, f.name, f.what))
            try:
                wait_for('the servers to settle after ' + f.name, f.settled)
                f.t_settled = mono()
                f.what_settled = sc.describe_settled()
                note('%s: %.2f s: settled: %s' % (sc.name, f.t_settled - t0, f.what_settled))
                if f.after:
                    msg = f.after()
                    events.append((mono(), msg))
                    note('%s: %.2f s: %s' % (sc.name, mono() - t0, msg))
                last = mono()
            except HarnessError as e:
                problems.append('%s: %s' % (f.name, e))
                break
        # the run lasts SECONDS, and at least 2 s (or 15%) after the last fault settled
        end = max(t_warm + SECONDS, last + max(2.0, 0.15 * SECONDS))
        while mono() < end:
            time.sleep(0.05)
    finally:
        t_end = mono()
        open(stop_file, 'w').close()
        deadline = mono() + WAIT_MS / 1000.0 + 8
        for p in workers:
            try:
                p.wait(max(0.1, deadline - mono()))
            except subprocess.TimeoutExpired:
                p.terminate()
        for p in workers:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        os.unlink(stop_file)
        for e in errs:
            e.close()
    records = []
    # the workers' logs, and the driver's clients' when it had some
    for i in range(WORKERS + 2):
        path = os.path.join(logdir, 'w%d.jsonl' % i)
        if not os.path.exists(path):
            if i < WORKERS:
                problems.append('worker %d left no log' % i)
            continue
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        records.append(json.loads(line))
                    except ValueError:
                        problems.append('worker %d: a torn log line: %r' % (i, line[:80]))
        err = open(os.path.join(logdir, 'w%d.err' % i)).read().strip() if i < WORKERS else ''
        if err:
            problems.append('worker %d wrote to stderr:\n%s' % (i, err[-2000:]))
    final = read_final(sc.final_conninfo)
    return records, events, t0, t_end, final, problems


# ----------------------------------------------------------------------
# checks

class Points:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def point(self, ok, name, details=()):
        if ok:
            self.passed += 1
            say('ok - ' + name)
        else:
            self.failed += 1
            say('not ok - ' + name)
        for d in details:
            for line in str(d).splitlines():
                say('#   ' + line)


def fmt_rec(r, t0):
    keys = ['op', 'w', 'res', 'status', 'outcome', 'generation', 'identity', 'validity_ms', 'v',
            'attempt', 'sqlstate', 'error']
    parts = ['t0=%.4f' % (r['t0'] - t0), 't1=%.4f' % (r['t1'] - t0)]
    parts += ['%s=%s' % (k, r[k]) for k in keys if k in r and r[k] is not None]
    return ' '.join(parts)


def check(sc, records, faults, events, t0, t_end, final, problems, pts):
    """One test point per property.  Each names the evidence it saw; a
    property with none had no chance to fail, and that fails it too."""
    name = sc.name
    hist, items, res_fences = final
    acq = [r for r in records if r['op'] == 'acquire']
    writes = [r for r in records if r['op'] == 'write']
    rels = [r for r in records if r['op'] == 'release']
    got = [r for r in acq if r.get('status') == 'acquired']
    committed = [w for w in writes if w['outcome'] == 'committed']
    # an asynchronous standby's failover may lose acknowledged commits
    keeps_acknowledged = getattr(sc, 'synchronous', True)
    hist_key = {(h[1], h[2]): h for h in hist}

    def point(ok, prop, text, det=(), evidence=()):
        """evidence: (what is missing, count) pairs; each count must be above 0"""
        missing = [what for what, n in evidence if n <= 0]
        det = list(det)
        if missing:
            det = ['had no chance to fail: %s' % '; '.join(missing)] + det
            text += ' — had no chance to fail'
        pts.point(ok and not missing, '%s: %s: %s' % (name, prop, text), det)

    # progress
    det = list(problems)
    injected = [f for f in faults if f.t is not None]
    if len(injected) != len(faults):
        det.append('injected %d of %d faults' % (len(injected), len(faults)))
    for f in injected:
        nb = sum(1 for w in committed if w['t1'] < f.t)
        na = sum(1 for w in committed if w['t0'] > f.t)
        if nb == 0 or na == 0:
            det.append('%s: %d committed cycles before it, %d begun after it' % (f.name, nb, na))
        if f.t_settled is None:
            det.append('%s: the servers did not settle after it' % f.name)
    point(not det, 'progress', 'every fault injected, with committed cycles before and after each '
          '(%d cycles, %d faults)' % (len(committed), len(injected)), det)

    # no generation returned as acquired twice
    by_gen = collections.defaultdict(list)
    for r in got:
        by_gen[r['generation']].append(r)
    dup = {g: rs for g, rs in by_gen.items() if len(rs) > 1}
    det = []
    for g, rs in sorted(dup.items())[:10]:
        det.append('generation %d acquired %d times:' % (g, len(rs)))
        det += ['  ' + fmt_rec(r, t0) for r in rs]
    text = '%d acquired' % len(got)
    evidence = [('fewer than two generations acquired', len(got) - 1)]
    if hasattr(sc, 'promotion'):
        pf = sc.promotion()
        after = sum(1 for r in got if pf.t_done is not None and r['t0'] > pf.t_done)
        text += ', %d after the promotion' % after
        evidence.append(('no generation acquired after the promotion', after))
        if not keeps_acknowledged:
            cut = faults[0]
            unsent = sum(1 for r in got if cut.t_done is not None and pf.t is not None
                         and cut.t_done < r['t0'] and r['t1'] < pf.t)
            text += ', %d between the replication cut and the failover (the new primary never saw them)' % unsent
            evidence.append(('no generation acquired between the replication cut and the failover', unsent))
    point(not dup, 'unique generations', 'no generation returned as acquired twice (%s)' % text, det, evidence)

    # Stale writes: a write under a generation lower than one whose write
    # on the same row was acknowledged (and is in the history) before this
    # write began.  The fence must refuse each with LF001: at
    # fence_resource, or at the row trigger when the job did not call it.
    by_item = collections.defaultdict(list)
    for w in committed:
        h = hist_key.get((w['item'], w['v']))
        if h is not None and h[3] == w['generation']:
            by_item[w['item']].append((w['t1'], w['generation']))
    highest = {}
    for iid, cs in by_item.items():
        cs.sort()
        top, tops = 0, []
        for _, g in cs:
            top = max(top, g)
            tops.append(top)
        highest[iid] = ([c[0] for c in cs], tops)

    def stale_write(w):
        ts, tops = highest.get(w['item'], ([], []))
        k = bisect.bisect_left(ts, w['t0'])
        return k > 0 and tops[k - 1] > w['generation']

    det = []
    n = collections.Counter()
    for w in writes:
        if not stale_write(w):
            continue
        row_only = not w.get('resource_fenced', True)
        if w['outcome'] not in ('committed', 'rejected'):
            n['undecided'] += 1      # the connection broke: no verdict
            continue
        n['row trigger alone' if row_only else 'with fence_resource'] += 1
        if w['outcome'] == 'rejected' and w.get('sqlstate') == 'LF001':
            n['refused at ' + ('the row trigger' if w.get('stage') == 'update' else w.get('stage', '?'))] += 1
        else:
            det.append('a stale write %s: %s' % ('committed' if w['outcome'] == 'committed' else 'not refused with LF001',
                                                 fmt_rec(w, t0)))
    attempted = n['row trigger alone'] + n['with fence_resource']
    refused = sum(v for k, v in n.items() if k.startswith('refused at '))
    lf001 = sum(1 for w in writes if w.get('sqlstate') == 'LF001')
    point(not det, 'stale writes refused',
          'every write under a generation lower than one already committed on its row was refused '
          'with LF001 (stale writes attempted: %d, %d of them with the row trigger alone, %d with '
          'fence_resource; refused by LF001: %d, %d at fence_resource, %d at the row trigger; '
          '%d without a verdict; %d LF001 in all; %d stalled holders)'
          % (attempted, n['row trigger alone'], n['with fence_resource'], refused,
             n['refused at fence_resource'], n['refused at the row trigger'], n['undecided'], lf001,
             sum(1 for r in got if r.get('stall'))),
          det[:40], [('no stale write attempted with the row trigger alone', n['row trigger alone']),
                     ('no stale write attempted with fence_resource', n['with fence_resource'])])

    # no fence lowered
    det = []
    hist_by_item = collections.defaultdict(list)
    for h in hist:
        hist_by_item[h[1]].append(h)
    for iid, resource, v, fence in items:
        hs = sorted(hist_by_item.get(iid, []), key=lambda h: h[2])
        vs = [h[2] for h in hs]
        if vs != list(range(1, len(hs) + 1)):
            det.append('item %d: commit counters are not 1..%d' % (iid, len(hs)))
        for a, b in zip(hs, hs[1:]):
            if b[3] <= a[3]:
                det.append('item %d: generation did not increase in commit order:' % iid)
                det.append('  history v=%d generation=%d worker=%d identity=%s' % (a[2], a[3], a[4], a[5]))
                det.append('  history v=%d generation=%d worker=%d identity=%s' % (b[2], b[3], b[4], b[5]))
        top = max((h[3] for h in hs), default=0)
        top_res = max((h[3] for h in hs if h[6]), default=None)
        if v != len(hs):
            det.append('item %d: v = %d, but %d history rows' % (iid, v, len(hs)))
        if fence != top:
            det.append('item %d: fence %d, highest committed generation %d' % (iid, fence, top))
        if top_res is not None and res_fences.get(resource) != top_res:
            det.append('resource %s: resource fence %s, highest committed generation that fenced it %d' % (
                resource, res_fences.get(resource), top_res))
    point(not det, 'no fence lowered', 'per item the committed generations strictly increase in commit '
          'order, and the final fences are the highest (%d committed writes, %d stale writes attempted)'
          % (len(hist), attempted), det[:40], [('no stale write attempted', attempted)])

    # No two holders at one time.  A holder reports holding from its acquire
    # returning until it gives the lease up: when it sends the release (its
    # first attempt), or when the validity acquire returned runs out,
    # whichever is earlier.  validity_ms is what was left when the backend
    # had Redis's reply, a moment the worker does not see: it counts it from
    # when it sent the acquire (t0), which is no later (counted from t1, the
    # worker would claim the time the answer spent on its way back through
    # PostgreSQL, tens of ms on a loaded machine, as lease time).  Not until the release *returns*: the release
    # deletes the key, and publishes the message that wakes the waiters, on
    # Redis before its reply is back, so the next holder's acquire often
    # returns first — a handover, not two holders.  Those are counted apart
    # ("in flight"), and are no failure.  Where a scenario makes Redis lose
    # leases on purpose (lossy_window), two holders in that window are
    # double grants: expected, and counted as the next property's evidence.
    first_rel = {}
    for r in sorted(rels, key=lambda r: r['t0']):
        first_rel.setdefault((r['res'], r['identity']), r)

    def intervals_of(ends):
        intervals = collections.defaultdict(list)
        for r in got:
            end = r['t0'] + r['validity_ms'] / 1000.0
            rel = first_rel.get((r['res'], r['identity']))
            if rel is not None:
                end = min(end, rel[ends])
            intervals[r['res']].append((r['t1'], end, r, rel))
        for ivs in intervals.values():
            ivs.sort(key=lambda x: x[0])
        return intervals

    def overlapping(ends):
        found = []
        for res, ivs in intervals_of(ends).items():
            active = []
            for iv in ivs:
                active = [a for a in active if a[1] > iv[0]]
                for a in active:
                    if a[2]['identity'] != iv[2]['identity']:
                        found.append((min(a[1], iv[1]) - iv[0], res, a, iv))
                active.append(iv)
        found.sort(key=lambda o: -o[0])
        return found

    window = sc.lossy_window() if hasattr(sc, 'lossy_window') else None

    def in_window(o):
        return window is not None and window[0] <= o[3][0] <= window[1]

    all_overlaps = overlapping('t0')
    double = [o for o in all_overlaps if in_window(o)]
    overlaps = [o for o in all_overlaps if not in_window(o)]
    strict = [o for o in overlapping('t1') if not in_window(o)]
    in_flight = len(strict) - len(overlaps)
    worst_in_flight = strict[0][0] * 1000 if strict else 0.0
    # grants whose acquire was sent while another holder held the lease:
    # there the lease server's refusal (NX) was what kept them apart
    contended = 0
    for res, ivs in intervals_of('t0').items():
        starts = [iv[0] for iv in ivs]
        for iv in ivs:
            k = bisect.bisect_left(starts, iv[2]['t0'])
            if any(a[1] > iv[2]['t0'] and a[2]['identity'] != iv[2]['identity']
                   for a in ivs[max(0, k - 8):k]):
                contended += 1
    det = []
    hist_by_gen = {h[3]: h for h in hist}

    def describe(found, label):
        out = ['%d %s; the worst %.1f ms (resource %s):' % (len(found), label, found[0][0] * 1000, found[0][1])]
        for ov, res, a, b in found[:5]:
            out.append('%s: overlap %.1f ms' % (res, ov * 1000))
            for (s, e, r, rel) in (a, b):
                out.append('  holder w%d generation %d: held %.4f .. %.4f (%s)' % (
                    r['w'], r['generation'], s - t0, e - t0,
                    'release sent %.4f, returned %.4f: %s' % (rel['t0'] - t0, rel['t1'] - t0, rel.get('status') or rel.get('error'))
                    if rel else 'no release: validity end'))
                out.append('    acquire ' + fmt_rec(r, t0))
                h = hist_by_gen.get(r['generation'])
                out.append('    history ' + ('v=%d generation=%d worker=%d identity=%s' % (h[2], h[3], h[4], h[5])
                                             if h else '(no committed write)'))
        return out

    if overlaps:
        det += describe(overlaps, 'overlapping pairs')
    text = ('no two holders reported for one resource at one time (%d holder intervals, %d grants '
            'that had to wait for another holder; %d handovers while a release was in flight, the '
            'longest %.1f ms' % (len(got), contended, in_flight, worst_in_flight))
    if window is not None:
        text += '; %d double grants in the replication cut\'s window, %.2f-%.2f s, expected' % (
            len(double), window[0] - t0, window[1] - t0)
    point(not overlaps, 'mutual exclusion', text + ')', det,
          [('no acquire had to wait for another holder', contended)])

    # where Redis lost leases: double grants, and the fence refusing the
    # older holder when it writes after the newer one
    if window is not None:
        writes_of = {(w['w'], w['generation']): w for w in writes}
        late = {}
        for ov, res, a, b in double:
            old, new = sorted((a[2], b[2]), key=lambda r: r['generation'])
            wo, wn = writes_of.get((old['w'], old['generation'])), writes_of.get((new['w'], new['generation']))
            if wo and wn and wn['outcome'] == 'committed' and wn['t1'] < wo['t0'] \
                    and wo['outcome'] in ('committed', 'rejected'):
                late[(old['w'], old['generation'])] = wo
        bad = ['an older holder\'s late write not refused with LF001: ' + fmt_rec(w, t0)
               for w in late.values() if not (w['outcome'] == 'rejected' and w.get('sqlstate') == 'LF001')]
        det = bad + (describe(double, 'double grants (expected)') if double else [])
        point(not bad, 'double grants',
              'with redis_min_replicas = 0 the replication cut let Redis grant leases twice, and every '
              'older holder that wrote after the newer one had committed was refused with LF001 '
              '(double grants observed: %d; late writes of the older holder: %d, refused by LF001: %d)'
              % (len(double), len(late), sum(1 for w in late.values() if w['outcome'] == 'rejected'
                                              and w.get('sqlstate') == 'LF001')),
              det[:60], [('no double grant observed', len(double)),
                         ('no older holder wrote after the newer one', len(late))])

    # documented statuses; nothing written under an unknown
    det = []
    for r in acq:
        st = r.get('status')
        if st is None:
            continue      # a client-side error (connection lost): no status
        if st not in ACQUIRE_STATUSES:
            det.append('undocumented acquire status: ' + fmt_rec(r, t0))
        want = True if st == 'acquired' else (None if st == 'unknown' else False)
        if r.get('acquired') is not want:
            det.append('acquired = %s with status %s: %s' % (r.get('acquired'), st, fmt_rec(r, t0)))
        if st == 'acquired' and not (r.get('generation') and r.get('validity_ms', 0) > 0 and
                                     re.fullmatch(r'[0-9a-f]{32}', r.get('identity') or '')):
            det.append('acquired without a generation, identity or validity: ' + fmt_rec(r, t0))
    for r in rels:
        st = r.get('status')
        if st is not None and st not in RELEASE_STATUSES:
            det.append('undocumented release status: ' + fmt_rec(r, t0))
    unknown = {(r['w'], r['generation']) for r in acq if r.get('status') == 'unknown'}
    for w in writes:
        if (w['w'], w['generation']) in unknown:
            det.append('a write under an unknown generation: ' + fmt_rec(w, t0))
    for h in hist:
        if (h[4], h[3]) in unknown:
            det.append('history row under an unknown generation: v=%d generation=%d worker=%d' % (h[2], h[3], h[4]))
    counts = collections.Counter('acquire ' + str(r.get('status')) for r in acq if r.get('status'))
    counts.update('release ' + str(r.get('status')) for r in rels if r.get('status'))
    point(not det, 'statuses', 'every status is a documented one, and no write follows an unknown '
          'under its generation (%s)' % ', '.join('%s %d' % kv for kv in sorted(counts.items())), det[:40])

    # acknowledged writes are in the history; history rows are acquired leases' writes
    det = []
    lost = []
    for w in committed:
        h = hist_key.get((w['item'], w['v']))
        if h is None or (h[3], h[4], h[5]) != (w['generation'], w['w'], w['identity']):
            lost.append('acknowledged write missing from the history: %s; history has %s' % (fmt_rec(w, t0), h))
    if keeps_acknowledged:
        det += lost
    acquired_by = {(r['w'], r['generation'], r['identity']) for r in got}
    failed_writes = {(w['w'], w['generation']) for w in writes if w['outcome'] in ('rejected', 'error')}
    for h in hist:
        if (h[4], h[3], h[5]) not in acquired_by:
            det.append('history row of no acquired lease of its worker: v=%d item=%d generation=%d worker=%d'
                       % (h[2], h[1], h[3], h[4]))
        if (h[4], h[3]) in failed_writes:
            det.append('history row of a write its worker saw fail: v=%d item=%d generation=%d worker=%d'
                       % (h[2], h[1], h[3], h[4]))
    unsure = sum(1 for w in writes if w['outcome'] == 'commit_unknown')
    if keeps_acknowledged:
        point(not det, 'history', 'every acknowledged write is in the history, and every history row is a '
              'write of a lease acquired by its worker (%d acknowledged, %d commits unknown, %d rows)'
              % (len(committed), unsure, len(hist)), det[:40])
    else:
        point(not det, 'history', 'every history row is a write of a lease acquired by its worker; '
              'acknowledged writes lost by the failover to the asynchronous standby are expected, '
              'not checked (%d acknowledged, %d of them lost, %d commits unknown, %d rows)'
              % (len(committed), len(lost), unsure, len(hist)), det[:40] + lost[:5])


# ----------------------------------------------------------------------
# availability

def availability(sc, records, faults, events, t0, t_end):
    cycles = sorted(w['t1'] for w in records if w['op'] == 'write' and w['outcome'] == 'committed')
    say('# %s: availability (a cycle = acquired and its write committed; times in s from the workers\' start)'
        % sc.name)
    for t, msg in events:
        say('#   %7.2f  %s' % (t - t0, msg))
    injected = [f for f in faults if f.t is not None]
    first = min((r['t1'] for r in records), default=t0)
    start = first
    for k, f in enumerate(injected):
        nxt = injected[k + 1].t if k + 1 < len(injected) else t_end
        # "during" ends at the first cycle committed after the longest
        # stall that followed the fault, when that stall is one (0.25 s or
        # more: cycles come every few ms otherwise) — a graceful failover
        # lets cycles through before it bites; else at the first cycle
        # begun once the injection was done
        pts_ = [f.t] + [c for c in cycles if f.t < c <= nxt]
        rec, stall = None, None
        if len(pts_) > 1:
            gap = max(zip(pts_, pts_[1:]), key=lambda ab: ab[1] - ab[0])
            stall = (gap[1] - gap[0], gap[0])
            if stall[0] >= 0.25:
                rec = gap[1]
            else:
                rec = min((w['t1'] for w in records if w['op'] == 'write' and w['outcome'] == 'committed'
                           and w.get('acq_t0', w['t0']) > f.t_done and w['t1'] <= nxt), default=None)
        say('#   fault %d: %s at %.2f s (done at %.2f s): %s' % (k + 1, f.name, f.t - t0, f.t_done - t0, f.what))
        if f.t_settled is not None:
            say('#     servers settled at %.2f s (%s)' % (f.t_settled - t0, f.what_settled))
        if stall:
            say('#     longest stall without a committed cycle: %.2f s, from %.2f s' % (stall[0], stall[1] - t0))
        windows = [('before', start, f.t)]
        if rec is None:
            windows.append(('during', f.t, nxt))
        else:
            windows += [('during', f.t, rec), ('after', rec, nxt)]
        for label, a, b in windows:
            say('#     ' + window_line(label, a, b, records, cycles, t0))
        if rec is None:
            say('#     no committed cycle after it')
        start = rec if rec is not None else nxt
    if hasattr(sc, 'topology_events'):
        evs = sc.topology_events()
        if evs:
            say('# %s: what the sentinels did (from their logs; times on the same axis)' % sc.name)
            for when, text in evs:
                say('#   %7.2f  %s' % (when - sc.wall0, text))


def window_line(label, a, b, records, cycles, t0):
    n = sum(1 for c in cycles if a < c <= b)
    c = collections.Counter()
    for r in records:
        if not (a < r['t1'] <= b):
            continue
        st = r.get('status')
        if r['op'] in ('acquire', 'release'):
            if st is None:
                c['errors'] += 1
            elif st in ('unavailable', 'unknown', 'unreplicated', 'busy', 'stale', 'not_held'):
                c[st if r['op'] == 'acquire' or st in ('unavailable', 'unknown') else 'release ' + st] += 1
        elif r['op'] == 'write' and r['outcome'] != 'committed':
            c['write ' + r['outcome']] += 1
        elif r['op'] == 'connect' and not r['ok']:
            c['connect failed'] += 1
    d = b - a
    rate = n / d if d > 0 else 0.0
    other = ', '.join('%s %d' % kv for kv in sorted(c.items()) if kv[0] not in ('unavailable', 'unknown'))
    return '%-6s %7.2f-%-7.2f (%5.2f s) %5d cycles %7.1f/s  unavailable %d, unknown %d%s' % (
        label, a - t0, b - t0, d, n, rate, c['unavailable'], c['unknown'], ('; ' + other) if other else '')


def log_summary(sc):
    """lease_fence's WARNINGs in the server logs, by kind."""
    c = collections.Counter()
    for path in sc.logs:
        try:
            with open(path, errors='replace') as f:
                for line in f:
                    m = re.search(r'(WARNING|ERROR|PANIC|FATAL|TRAP):\s+(.*)', line)
                    if not m:
                        continue
                    text = re.sub(r'"res\d+"', '"R"', m.group(2))
                    text = re.sub(r'\d+', 'N', text)
                    c['%s: %s' % (m.group(1), text[:150])] += 1
        except OSError:
            pass
    if c:
        say('# %s: server log, by kind (numbers as N):' % sc.name)
        for k, n in c.most_common(12):
            say('#   %6d  %s' % (n, k))


# ----------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--pg-bin', required=True)
    ap.add_argument('--work', required=True)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    kinds = {'sentinel': SentinelScenario, 'cluster': ClusterScenario, 'postgres': PostgresScenario,
             'lossy': LossyScenario, 'postgres-async': PostgresAsyncScenario}
    for s in SCENARIOS:
        if s not in kinds:
            say('LF_FAULTS_SCENARIOS: unknown scenario %s (of: %s)' % (s, ' '.join(kinds)))
            return 2
    say('# lease_fence fault injection: %s; %g s each, %d workers, %d resources, ttl %d ms, '
        'wait %d ms, seed %d' % (' '.join(SCENARIOS), SECONDS, WORKERS, RESOURCES, TTL_MS, WAIT_MS, SEED))
    pts = Points()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    for s in SCENARIOS:
        work = os.path.join(a.work, s)
        os.makedirs(work, exist_ok=True)
        sc = kinds[s](work, a.pg_bin)
        started = mono()
        try:
            records, events, t0, t_end, final, problems = run_scenario(sc, work)
            faults = sc.faults
            check(sc, records, faults, events, t0, t_end, final, problems, pts)
            availability(sc, records, faults, events, t0, t_end)
            log_summary(sc)
        except Exception as e:
            pts.point(False, '%s: the scenario ran' % s, [traceback.format_exc()])
            for path in getattr(sc, 'logs', []):
                say('# --- ' + path)
                for line in tail(path).splitlines():
                    say('#   ' + line)
        finally:
            stop_all()
        note('%s: done in %.0f s' % (s, mono() - started))
    say('%d passed, %d failed' % (pts.passed, pts.failed))
    return 0 if pts.failed == 0 else 1


if __name__ == '__main__':
    try:
        sys.exit(main())
    finally:
        stop_all()

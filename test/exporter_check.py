#!/usr/bin/python3
"""test/exporter_check.py — docs/operations.md's postgres_exporter queries, in
the exporter Debian ships, against a real server.

  exporter_check.py EXPORTER QUERIES.yaml DSN

Starts EXPORTER (prometheus-postgres-exporter) on a free 127.0.0.1 port with
--extend.query-path=QUERIES.yaml and DATA_SOURCE_NAME=DSN, reads /metrics,
and checks what the page promises: the queries load, the lease_fence.stats
counters and their reset time are exported, lease_fence.latency as a
Prometheus histogram, the leases of lease_fence.all_leases by state, and
lease_fence.protected_tables
shows a sound table as ok 1 and a table whose fence trigger is disabled as
ok 0 with its problem.  The caller prepares the database (test/run.sh, suite
docs): a table "account" fenced and written, a table "broken" whose
zz_lease_fence trigger is disabled, and DSN's role a plain login role.
Prints one "ok - ..." / "not ok - ..." line per check; stops the exporter.
"""

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def main():
    exporter, queries, dsn = sys.argv[1:4]
    port = free_port()
    env = dict(os.environ, DATA_SOURCE_NAME=dsn)
    log = open(os.path.join(os.path.dirname(queries), 'exporter.log'), 'w')
    proc = subprocess.Popen([exporter, f'--extend.query-path={queries}',
                             f'--web.listen-address=127.0.0.1:{port}',
                             '--disable-default-metrics', '--disable-settings-metrics'],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    failed = 0

    def check(good, name, why=''):
        nonlocal failed
        print(('ok - ' if good else 'not ok - ') + name + ('' if good or not why else f': {why}'))
        failed += 0 if good else 1

    try:
        text = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f'http://127.0.0.1:{port}/metrics', timeout=10) as r:
                    text = r.read().decode()
                break
            except OSError:
                time.sleep(0.2)
        check(text is not None, 'exporter: postgres_exporter serves /metrics with the queries of docs/operations.md',
              f'exit status {proc.poll()}')
        if text is None:
            return 1
        samples = [l for l in text.split('\n') if l and not l.startswith('#')]

        def find(metric, **labels):
            out = []
            for l in samples:
                m = re.match(r'^(\w+)(?:\{(.*)\})? (\S+)$', l)
                if not m or m.group(1) != metric:
                    continue
                have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ''))
                if all(have.get(k) == v for k, v in labels.items()):
                    out.append(float(m.group(3)))
            return out

        errors = find('pg_exporter_user_queries_load_error')
        check(errors and all(v == 0 for v in errors), 'exporter: the queries file loads without error', f'{errors}')
        check(find('pg_exporter_last_scrape_error') == [0.0], 'exporter: the scrape ran every query without error',
              f'{find("pg_exporter_last_scrape_error")}; see exporter.log')
        accepted = find('lease_fence_stats_count', operation='fence', outcome='accepted')
        check(len(accepted) == 1, 'exporter: lease_fence_stats_count has the fence/accepted counter, labelled',
              f'{accepted}')
        check(len(find('lease_fence_stats_count')) > 20, 'exporter: ... and every other counter of lease_fence.stats',
              f'{len(find("lease_fence_stats_count"))} series')
        check(len(find('lease_fence_stats_reset_time_seconds')) == 1 and find('lease_fence_stats_reset_time_seconds')[0] > 0,
              'exporter: lease_fence_stats_reset_time_seconds is the reset time')
        check(find('lease_fence_protected_tables_ok', table_name='account') == [1.0],
              'exporter: a sound protected table is ok 1', f'{find("lease_fence_protected_tables_ok")}')
        check(find('lease_fence_protected_tables_ok', table_name='broken') == [0.0],
              'exporter: a table whose fence trigger is disabled is ok 0', f'{find("lease_fence_protected_tables_ok")}')
        check(len(find('lease_fence_protected_table_problem_present', table_name='broken')) >= 1,
              'exporter: ... and its problem is exported as a label')
        check(not find('lease_fence_protected_table_problem_present', table_name='account'),
              'exporter: the sound table has no problem series')
        ops = ['acquire', 'renew', 'release', 'commit_check', 'keepalive_renew']
        buckets = {op: [l for l in samples if l.startswith('lease_fence_latency_seconds_bucket{')
                        and f'operation="{op}"' in l] for op in ops}
        check(all(len(b) == 12 for b in buckets.values()),
              'exporter: lease_fence_latency_seconds is a histogram of 12 buckets (+Inf included) per operation',
              f'{ {op: len(b) for op, b in buckets.items()} }')
        check(all(find('lease_fence_latency_seconds_bucket', operation=op, le='+Inf') ==
                  find('lease_fence_latency_seconds_count', operation=op) and
                  len(find('lease_fence_latency_seconds_sum', operation=op)) == 1 for op in ops),
              'exporter: ... with its _count (the +Inf bucket) and _sum')
        check(len(find('lease_fence_latency_seconds_bucket', operation='acquire', le='0.001')) == 1,
              'exporter: ... its bounds in seconds (le="0.001" is 1 ms)')
        check(find('lease_fence_leases_count', state='held') == [0.0],
              'exporter: lease_fence_leases_count by state (none held here)', f'{find("lease_fence_leases_count")}')
        check(find('lease_fence_leases_expiring_seconds') == [-1.0],
              'exporter: lease_fence_leases_expiring_seconds (-1: none held)',
              f'{find("lease_fence_leases_expiring_seconds")}')
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())

#!/usr/bin/python3
# test/faults/mutants.py — the fault-injection run's self-test: a run that
# cannot fail proves nothing, so the run must fail against builds that are
# broken on purpose, and name the property they break.
#
# Each mutant is a copy of the built tree with one patch applied (nothing of
# it is committed: the patch is made here, in the copy), built with
# -Werror and installed into a copy of the private PostgreSQL installation,
# then run through faults.py (one scenario, briefly).  One test point each:
#   "ok - mutant <name> caught by <property>"     the run failed, and the
#                                                 property named failed
#   "not ok - mutant <name> not caught ..."       it passed, or failed
#                                                 only elsewhere
# A patch that no longer applies (the source changed under it) is a
# "not ok" too: the self-test must be mended, not skipped.
#
# The mutants:
#   fence-accepts-lower   src/fence/fence_trigger.c: the stale comparisons made
#                         false, so the row trigger accepts a generation
#                         lower than the stored one -> "stale writes refused"
#   acquire-without-nx    scripts/acquire.lua: no check that the key is
#                         free and no NX, so acquire grants a held lease
#                         -> "mutual exclusion"
#
#   mutants.py --src DIR --pg-root DIR --pg-bin DIR --work DIR --faults-work DIR
# (test/lib.sh, lf_faults_mutants: --src is the built tree, --pg-root the
# private PostgreSQL installation that --pg-bin is in.)  Settings:
# LF_FAULTS_MUTANTS (names, default all), LF_FAULTS_MUTANT_SECONDS (6),
# LF_FAULTS_MUTANT_SCENARIO (lossy); the other LF_FAULTS_* pass through.

import argparse
import os
import re
import shutil
import subprocess
import sys
import time

MUTANTS = [
    # name, file, [(text, replacement)] (each text must occur exactly once),
    # the property whose test point must fail
    ('fence-accepts-lower', 'src/fence/fence_trigger.c',
     [('if (!s_null && lf_generation < s)', 'if (!s_null && lf_generation < s && false)'),
      ('if (!s_null && supplied < s)', 'if (!s_null && supplied < s && false)')],
     'stale writes refused'),
    ('acquire-without-nx', 'scripts/acquire.lua',
     [("if left ~= -2 then return {0, tostring(left)} end\n", ''),
      ("redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])",
       "redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])")],
     'mutual exclusion'),
]


def say(msg=''):
    print(msg, flush=True)


def note(msg):
    print('== faults: ' + msg, file=sys.stderr, flush=True)


class Broken(Exception):
    pass


def patch(path, edits):
    with open(path) as f:
        text = f.read()
    for old, new in edits:
        n = text.count(old)
        if n != 1:
            raise Broken('the patch does not apply to %s: %r occurs %d times' % (path, old, n))
        text = text.replace(old, new)
    with open(path, 'w') as f:
        f.write(text)


def run_logged(cmd, log, env=None):
    with open(log, 'ab') as out:
        return subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                              env=env).returncode


def tail(path, n=20):
    try:
        with open(path, errors='replace') as f:
            return f.readlines()[-n:]
    except OSError:
        return []


def mutant(a, name, rel, edits, prop):
    top = os.path.join(a.work, name)
    shutil.rmtree(top, ignore_errors=True)
    src, root = os.path.join(top, 'src'), os.path.join(top, 'pg')
    # the built tree, objects and all (copy2 keeps their times), so that
    # make rebuilds only what the patch touches
    shutil.copytree(a.src, src, symlinks=True)
    shutil.copytree(a.pg_root, root, symlinks=True)
    pg_bin = os.path.join(root, os.path.relpath(a.pg_bin, a.pg_root))
    # a second later than the copies, whatever the file system's resolution
    time.sleep(1.0)
    patch(os.path.join(src, rel), edits)
    build_log = os.path.join(top, 'build.log')
    pg_config = os.path.join(pg_bin, 'pg_config')
    for target in ([], ['install']):
        if run_logged(['make', '-s', '-C', src, 'PG_CONFIG=' + pg_config, 'WERROR=1'] + target, build_log) != 0:
            raise Broken('the build failed:\n' + ''.join(tail(build_log)))
    out = os.path.join(a.faults_work, 'mutant-%s.out' % name)
    env = dict(os.environ)
    env['LF_FAULTS_SCENARIOS'] = os.environ.get('LF_FAULTS_MUTANT_SCENARIO', 'lossy')
    env['LF_FAULTS_SECONDS'] = os.environ.get('LF_FAULTS_MUTANT_SECONDS', '6')
    # more stalled holders: a short run still sees stale writes
    env.setdefault('LF_FAULTS_STALL', '0.1')
    work = os.path.join(a.faults_work, 'mutant-' + name)
    os.makedirs(work, exist_ok=True)
    started = time.monotonic()
    rc = run_logged([sys.executable, os.path.join(src, 'test', 'faults', 'faults.py'),
                     '--pg-bin', pg_bin, '--work', work], out, env)
    note('mutant %s: ran in %.0f s (%s)' % (name, time.monotonic() - started, out))
    failed = []
    summary = ''
    with open(out, errors='replace') as f:
        lines = f.read().splitlines()
    for line in lines:
        m = re.match(r'not ok - [^:]+: ([^:]+):', line)
        if m and m.group(1) not in failed:
            failed.append(m.group(1))
        if re.match(r'\d+ passed, \d+ failed$', line):
            summary = line
    caught = rc != 0 and prop in failed
    if caught:
        say('ok - mutant %s caught by %s (%s; failed: %s)' % (name, prop, summary, ', '.join(failed)))
    else:
        say('not ok - mutant %s not caught by %s (exit status %d, %s; failed: %s)'
            % (name, prop, rc, summary or 'no summary', ', '.join(failed) or 'nothing'))
    # the mutant run's failed points, as evidence either way
    shown = 0
    for line in lines:
        if line.startswith('not ok - ') and shown < 6:
            say('#   ' + line)
            shown += 1
    if not caught:
        for line in lines[-40:]:
            say('#   ' + line)
    return caught


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--src', required=True)
    ap.add_argument('--pg-root', required=True)
    ap.add_argument('--pg-bin', required=True)
    ap.add_argument('--work', required=True)
    ap.add_argument('--faults-work', required=True)
    a = ap.parse_args()
    names = os.environ.get('LF_FAULTS_MUTANTS', '').split() or [m[0] for m in MUTANTS]
    known = {m[0]: m for m in MUTANTS}
    for n in names:
        if n not in known:
            say('LF_FAULTS_MUTANTS: unknown mutant %s (of: %s)' % (n, ' '.join(known)))
            return 2
    if os.path.relpath(a.pg_bin, a.pg_root).startswith('..'):
        say('# mutants: not run: PostgreSQL (%s) is not a private copy under %s' % (a.pg_bin, a.pg_root))
        return 0
    os.makedirs(a.work, exist_ok=True)
    os.makedirs(a.faults_work, exist_ok=True)
    bad = 0
    for n in names:
        name, rel, edits, prop = known[n]
        try:
            if not mutant(a, name, rel, edits, prop):
                bad += 1
        except Broken as e:
            say('not ok - mutant %s: %s' % (name, str(e).splitlines()[0]))
            for line in str(e).splitlines()[1:]:
                say('#   ' + line)
            bad += 1
        finally:
            # the copies are large; their logs stay
            for d in ('src', 'pg'):
                shutil.rmtree(os.path.join(a.work, name, d), ignore_errors=True)
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())

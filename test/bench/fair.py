#!/usr/bin/python3
"""test/bench/fair.py — fair waiting under contention (section 9 of
test/bench/run.sh).

Usage: fair.py MODE ROUND GRANTS WAITERS HOLD_MS REDIS_SOCKET

Connects with libpq's environment (the bench's own server) and Redis' unix
socket (for INFO only), and prints one CSV line per sample on stdout, as
run.sh's samples.csv has them (section,variant,round,value,unit); progress
and notes go to stderr.

WAITERS + 1 sessions (one process and one connection each) contend for one
resource: each in a loop acquires it with wait_ms 60000 (fair => true, or
false: today's unfair wait), holds it HOLD_MS, releases it and acquires
again, so that while one holds, WAITERS wait.  After GRANTS grants the
sessions stop once they have released (the waiters still queued are granted
and stop: those grants are not counted in the order and the times, only in
the requests per grant).  Grants are ordered by their generation (a
generation is above every one granted before: the grant order).  MODE:

  order    fair => true; each holder, before it releases, reads the next
           identity of the queue (SELECT identity FROM lease_fence.queue(r)
           WHERE position = 1): while the lease is held nobody is granted and
           nobody leaves (nothing times out here), so the queue's head is the
           waiter whose first request reached Redis first among those still
           waiting.  A grant is in arrival order when it goes to that
           identity (a fair waiter is granted under its waiter identity).
           The read is a request of its own: this run's times and requests
           are not reported.
  fair     fair => true, nothing else: the Redis requests per grant and the
           handover times.
  unfair   fair => false, the same.
  advisory the baseline, in the same load: pg_advisory_lock() and
           pg_advisory_unlock() of one key instead of acquire() and
           release() (PostgreSQL's own lock queue, no Redis): the handover
           times of a lock that needs no Redis and wakes one waiter, through
           the same sessions, processes and clock.  Grant order: the count
           of grants, incremented by each holder while it holds.

Redis requests: INFO commandstats before and after (every session has made
its connection to Redis before: one grant of a resource of its own), the
calls of the commands the backends send (REQUESTS below); the commands the
scripts run inside Redis are counted by Redis under their own names and
reported apart.  Handover: from just before the holder's release() was
sent (and from it returning) to the next grant's acquire() returning, on
the machine's monotonic clock (CLOCK_MONOTONIC, one for all processes).
"""
import multiprocessing
import statistics
import sys
import time

import psycopg
import redis

RESOURCE = "bench:fair"
WAIT_MS = 60000
# what the backends send to Redis (redis_script.c, redis_conn.c,
# redis_subscriber.c, redis_topology.c): scripts, the connection's set-up,
# the subscription; a closed subscriber connection sends no UNSUBSCRIBE
REQUESTS = ("evalsha", "eval", "evalsha_ro", "eval_ro", "subscribe", "ssubscribe",
            "unsubscribe", "sunsubscribe", "psubscribe", "punsubscribe", "ping",
            "auth", "select", "role", "hello", "wait", "script|load", "client|setname")


def out(section, variant, rnd, value, unit):
    print(f"{section},{variant},{rnd},{value},{unit}", flush=True)


def die(msg):
    print(f"fair: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def commandstats(r):
    stats = {}
    for key, v in r.info("commandstats").items():
        name = key[len("cmdstat_"):] if key.startswith("cmdstat_") else key
        stats[name] = int(v["calls"])
    stats["(connections)"] = int(r.info("stats")["total_connections_received"])
    return stats


def session(i, mode, grants, hold_s, counter, barrier, go, results):
    fair = mode != "unfair"
    rows = []
    try:
        conn = psycopg.connect("", autocommit=True)
        conn.execute("SELECT set_config('statement_timeout', %s, false)", (str(2 * WAIT_MS),))
        # this session's Redis connection, outside the measured window
        own = f"bench:fair:own:{i}"
        st, ident = conn.execute("SELECT status, identity FROM lease_fence.acquire(%s, 30000::bigint)",
                                 (own,)).fetchone()
        if st != "acquired":
            raise RuntimeError(f"the warm-up acquire answered {st}")
        conn.execute("SELECT lease_fence.release(%s, %s)", (own, ident))
        barrier.wait()
        go.wait()               # (after the main process read INFO)
        while True:
            sent = time.monotonic()
            stale = 0
            if mode == "advisory":
                conn.execute("SELECT pg_advisory_lock(53)")
                st, ident, gen = "acquired", None, None
            else:
                while True:
                    st, ident, gen = conn.execute(
                        "SELECT status, identity, generation FROM lease_fence.acquire(%s, 30000::bigint, "
                        "wait_ms => %s::bigint, fair => %s)", (RESOURCE, WAIT_MS, fair)).fetchone()
                    # (a wait ends 'stale' after its fourth stale attempt: asked again)
                    if st != "stale":
                        break
                    stale += 1
            got = time.monotonic()
            if st != "acquired":
                raise RuntimeError(f"acquire answered {st}")
            with counter.get_lock():
                counter.value += 1
                n = counter.value
            if gen is None:
                gen = n
            head = None
            if mode == "order":
                h = conn.execute("SELECT identity FROM lease_fence.queue(%s) WHERE position = 1",
                                 (RESOURCE,)).fetchone()
                if h and h[0] is None:
                    raise RuntimeError("queue() did not show the next identity")
                head = h[0] if h else None
            rest = got + hold_s - time.monotonic()
            if rest > 0:
                time.sleep(rest)
            rel = time.monotonic()
            if mode == "advisory":
                (rst,) = conn.execute("SELECT CASE WHEN pg_advisory_unlock(53) THEN 'released' END").fetchone()
            else:
                (rst,) = conn.execute("SELECT status FROM lease_fence.release(%s, %s)",
                                      (RESOURCE, ident)).fetchone()
            rel_done = time.monotonic()
            if rst != "released":
                raise RuntimeError(f"release answered {rst}")
            rows.append((int(gen), ident, sent, got, head, rel, rel_done, i, stale))
            if n >= grants:
                break
        conn.close()
        results.put(("ok", rows))
    except Exception as e:          # reported by the main process
        results.put(("error", f"session {i}: {e!r}"))


def pct(vals, p):
    # nearest rank
    s = sorted(vals)
    return s[max(0, -(-p * len(s) // 100) - 1)]


def main():
    mode, rnd, grants, waiters, hold_ms, sock = (sys.argv[1], int(sys.argv[2]), int(sys.argv[3]),
                                                 int(sys.argv[4]), float(sys.argv[5]), sys.argv[6])
    if mode not in ("order", "fair", "unfair", "advisory"):
        die(f"unknown mode {mode}")
    r = redis.Redis(unix_socket_path=sock)
    ctx = multiprocessing.get_context("fork")
    n = waiters + 1
    counter = ctx.Value("i", 0)
    barrier = ctx.Barrier(n + 1)
    go = ctx.Event()
    results = ctx.Queue()
    procs = [ctx.Process(target=session, args=(i, mode, grants, hold_ms / 1000.0, counter, barrier, go, results))
             for i in range(n)]
    for p in procs:
        p.start()
    try:
        barrier.wait(timeout=60)
    except Exception:
        die("the sessions did not all start")
    before = commandstats(r)
    t0 = time.monotonic()
    go.set()
    rows = []
    for _ in range(n):
        status, what = results.get(timeout=600)
        if status != "ok":
            for p in procs:
                p.kill()
            die(what)
        rows.extend(what)
    elapsed = time.monotonic() - t0
    after = commandstats(r)
    for p in procs:
        p.join()

    rows.sort()
    gens = [x[0] for x in rows]
    if len(set(gens)) != len(gens):
        die("two grants with one generation")
    total = len(rows)
    counted = rows[:grants]
    print(f"fair: {mode} round {rnd}: {total} grants in {elapsed:.2f} s", file=sys.stderr)

    if mode == "order":
        in_order = empty = 0
        for prev, cur in zip(counted, counted[1:]):
            if prev[4] is None:
                empty += 1
            elif cur[1] == prev[4]:
                in_order += 1
        judged = len(counted) - 1 - empty
        out("fair_order", "in_order", rnd, f"{100.0 * in_order / judged if judged else 0:.3f}", "percent")
        out("fair_order", "judged", rnd, judged, "grants")
        out("fair_order", "queue_empty", rnd, empty, "grants")
        return

    # handovers: the release of grant k-1 to grant k's acquire returning
    from_sent = [(cur[3] - prev[5]) * 1000 for prev, cur in zip(counted, counted[1:])]
    from_done = [(cur[3] - prev[6]) * 1000 for prev, cur in zip(counted, counted[1:])]
    same = sum(1 for prev, cur in zip(counted, counted[1:]) if prev[7] == cur[7])
    for name, v in (("from_sent", from_sent), ("from_done", from_done)):
        out("fair_handover_p50", f"{mode}_{name}", rnd, f"{statistics.median(v):.3f}", "ms")
        out("fair_handover_p99", f"{mode}_{name}", rnd, f"{pct(v, 99):.3f}", "ms")
        out("fair_handover_max", f"{mode}_{name}", rnd, f"{max(v):.3f}", "ms")
    out("fair_same_session", mode, rnd, f"{100.0 * same / (len(counted) - 1):.3f}", "percent")
    # waits: acquire sent to acquire returned, and grants per session
    waits = [(x[3] - x[2]) * 1000 for x in counted]
    out("fair_wait_p50", mode, rnd, f"{statistics.median(waits):.3f}", "ms")
    out("fair_wait_p99", mode, rnd, f"{pct(waits, 99):.3f}", "ms")
    out("fair_wait_max", mode, rnd, f"{max(waits):.3f}", "ms")
    per = [sum(1 for x in counted if x[7] == i) for i in range(n)]
    out("fair_grants_per_session_min", mode, rnd, min(per), "grants")
    out("fair_grants_per_session_max", mode, rnd, max(per), "grants")
    out("fair_grants_per_s", mode, rnd, f"{total / elapsed:.1f}", "tps")
    out("fair_stale", mode, rnd, f"{sum(x[8] for x in rows) / total:.3f}", "answers")
    if mode == "advisory":
        return

    # Redis requests per grant (every grant of the window, the last ones too)
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    sent = sum(delta.get(k, 0) for k in REQUESTS)
    out("fair_requests", mode, rnd, f"{sent / total:.3f}", "requests")
    for k in REQUESTS:
        if delta.get(k, 0) > 0:
            out(f"fair_request_{mode}", k, rnd, f"{delta[k] / total:.3f}", "requests")
    inside = {k: d for k, d in delta.items()
              if k not in REQUESTS and k not in ("info", "(connections)") and d > 0}
    out("fair_inside", mode, rnd, f"{sum(inside.values()) / total:.3f}", "commands")
    for k, d in sorted(inside.items()):
        out(f"fair_inside_{mode}", k, rnd, f"{d / total:.3f}", "commands")
    out("fair_connections", mode, rnd, f"{delta['(connections)'] / total:.3f}", "connections")


if __name__ == "__main__":
    main()

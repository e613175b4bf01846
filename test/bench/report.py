#!/usr/bin/python3
"""test/bench/report.py — the table of test/bench/run.sh.

Usage: report.py META OUTDIR

Reads OUTDIR/samples.csv (one line per measurement: section, variant, round,
value, unit) and the RSS series OUTDIR/rss_*.dat, writes OUTDIR/results.txt
(the table) and OUTDIR/ratios.dat (for plot.gp).  Every figure is a median
over the interleaved rounds; each ratio is the median of the per-round ratios
of two measurements taken side by side in the same round, with their range.
"""
import csv
import statistics
import sys
from collections import defaultdict


def load(outdir):
    data = defaultdict(dict)        # (section, variant) -> {round: value}
    with open(f"{outdir}/samples.csv") as f:
        for row in csv.DictReader(f):
            data[(row["section"], row["variant"])][int(row["round"])] = float(row["value"])
    return data


def rss(path):
    rows = []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if not parts or parts[0].startswith("#") or len(parts) < 3:
                continue
            rows.append(tuple(float(p) for p in parts[:3]))
    return rows


class Report:
    def __init__(self, meta, data):
        self.meta = meta
        self.data = data
        self.lines = []
        self.ratios = []            # (label, value, lo, hi, target, sense, met)

    def out(self, s=""):
        self.lines.append(s)

    def series(self, section, variant):
        return self.data[(section, variant)]

    def med(self, section, variant):
        return statistics.median(self.series(section, variant).values())

    def rng(self, section, variant):
        v = self.series(section, variant).values()
        return min(v), max(v)

    def ratio(self, label, num, den, target=None, sense=None):
        """num and den: dicts round -> value, measured side by side.  The
        ratio is the median of the per-round ratios: pairing each round's
        two measurements cancels what changed between rounds (other load on
        the machine), which a ratio of two medians would not."""
        rounds = sorted(set(num) & set(den))
        per = [num[r] / den[r] for r in rounds]
        value = statistics.median(per)
        met = None
        if target is not None:
            met = value <= target if sense == "max" else value >= target
        self.ratios.append((label, value, min(per), max(per), target, sense, met))
        return value


def fmt(v, unit):
    if unit == "ms":
        return f"{v:9.1f} ms"
    if unit == "us":
        return f"{v:9.1f} µs"
    if unit in ("tps", "calls/s"):
        return f"{v:9.0f} /s"
    return f"{v:9.2f}"


def main():
    meta_path, outdir = sys.argv[1], sys.argv[2]
    meta = dict(line.rstrip("\n").split("=", 1) for line in open(meta_path) if "=" in line)
    rep = Report(meta, load(outdir))
    out = rep.out
    rows = int(meta["rows"])

    out(f"lease_fence benchmark — {meta['date']}, commit {meta['commit']}")
    out(f"machine: {meta['cpu']}, {meta['memory']} RAM, {meta['kernel']}")
    out(f"software: PostgreSQL {meta['postgres']}, Redis {meta['redis']}, redis-py {meta['python_redis']}")
    out(f"server: fsync=on, shared_buffers=1GB, unix sockets; lease_fence preloaded")
    out(f"load average (other work on the machine): {meta.get('load', '?')}")
    out(f"method: {meta['rounds']} interleaved rounds (order rotated each round), "
        f"median [min..max]; pgbench runs {meta['seconds']} s; whole run {int(meta['elapsed']) // 60} min {int(meta['elapsed']) % 60} s")
    out()

    # -- 1 --
    if ("update", "none") not in rep.data:
        out("1. (not run)")
        out()
    else:
        cg_rows = int(meta.get("cg_rows", "0"))
        out(f"1. UPDATE of all {rows} rows (UPDATE t SET v = v + 1, one statement, table vacuumed before);")
        out(f"   wall time, the backend's CPU time, and instructions per row (callgrind, {cg_rows} rows, executor only)")
        labels = [("none", "no trigger"),
                  ("builtin", "suppress_redundant_updates_trigger (built-in C)"),
                  ("plpgsql", "PL/pgSQL fence trigger"),
                  ("lf_new", "lease_fence, new generation (fence rewritten)"),
                  ("lf_same", "lease_fence, same generation (fence compared)"),
                  ("portable", "portable edition (PL/pgSQL), new generation")]
        have_ir = ("update_ir", "none") in rep.data
        out(f"   {'':<48} {'wall':>10}  {'':<12} {'CPU':>10}  {'':<12} {'Ir/row':>7} {'trigger':>8}")
        for v, label in labels:
            if ("update", v) not in rep.data:
                continue
            lo, hi = rep.rng("update", v)
            clo, chi = rep.rng("update_cpu", v)
            ir = trig = ""
            if have_ir and ("update_ir", v) in rep.data:
                ir = f"{rep.med('update_ir', v):7.0f}"
                if v != "none":
                    trig = f"{rep.med('update_ir', v) - rep.med('update_ir', 'none'):+8.0f}"
            out(f"   {label:<48} {fmt(rep.med('update', v), 'ms')}  [{lo:4.0f}..{hi:4.0f}] "
                f"{fmt(rep.med('update_cpu', v), 'ms')}  [{clo:4.0f}..{chi:4.0f}] {ir} {trig}")
        out("   (trigger = instructions per row above no trigger: what the trigger and its machinery add)")
        if ("reread_ir", "lf_reread") in rep.data:
            a, b = rep.med("reread_ir", "lf_reread"), rep.med("reread_ir", "lf_ext")
            out(f"   the issued check at its worst (a generation issued elsewhere in every transaction, so the")
            out(f"   sequence is read again): instructions per single-row UPDATE transaction (callgrind,")
            out(f"   {meta.get('cg_txns', '?')} transactions, executor only): {a:.0f} checked, {b:.0f} with external tokens, {a - b:+.0f}")
            rep.ratio("1  issued check re-reading every txn / external, instructions",
                      rep.series("reread_ir", "lf_reread"), rep.series("reread_ir", "lf_ext"))
        for metric, name in (("update", "wall"), ("update_cpu", "CPU"), ("update_ir", "instructions")):
            if (metric, "none") not in rep.data:
                continue
            m = lambda v: rep.series(metric, v)
            rep.ratio(f"1  lease_fence new gen / built-in C trigger, {name}", m("lf_new"), m("builtin"), 1.05, "max")
            rep.ratio(f"1  lease_fence same gen / built-in C trigger, {name}", m("lf_same"), m("builtin"), 1.05, "max")
        u = lambda v: rep.series("update", v)
        rep.ratio("1  lease_fence new gen / PL/pgSQL fence, wall", u("lf_new"), u("plpgsql"))
        rep.ratio("1  lease_fence new gen / no trigger, wall", u("lf_new"), u("none"))
        rep.ratio("1  built-in C trigger / no trigger, wall", u("builtin"), u("none"))
        if ("update", "portable") in rep.data:
            # the portable edition's trigger against the C edition's, both
            # rewriting every row's fence to a new generation
            rep.ratio("1  portable edition / C edition, new gen, wall", u("portable"), u("lf_new"), 1.5, "max")
            rep.ratio("1  portable edition / C edition, new gen, CPU",
                      rep.series("update_cpu", "portable"), rep.series("update_cpu", "lf_new"), 1.5, "max")
        out()

    # -- 2 --
    if ("rowupdate_c1", "update_none") not in rep.data:
        out("2. (not run)")
        out()
    else:
        out("2. single-row UPDATE transactions, pgbench -M prepared, random row, synchronous_commit=off (throughput)")
        for c in (1, 2):
            sec = f"rowupdate_c{c}"
            for v, label in (("update_none", "UPDATE, no trigger"),
                             ("update_lf", "UPDATE, fenced (generation set for the session)"),
                             ("txn_none", "BEGIN; UPDATE; END"),
                             ("txn_lf", "BEGIN; set_generation(g); UPDATE fenced; END"),
                             ("txn_lf_resource", "... and SELECT fence_resource(r) before the UPDATE"),
                             ("txn_lf_resource_same", "... fence_resource(r) in set_generation's SELECT")):
                lo, hi = rep.rng(sec, v)
                out(f"   {c} client{'s' if c > 1 else ' '} {label:<50} {fmt(rep.med(sec, v), 'tps')}  [{lo:.0f}..{hi:.0f}]")
            rep.ratio(f"2  fenced / unfenced UPDATE, {c} client{'s' if c > 1 else ''} (tps)",
                      rep.series(sec, "update_lf"), rep.series(sec, "update_none"))
            rep.ratio(f"2  fenced / unfenced transaction, {c} client{'s' if c > 1 else ''} (tps)",
                      rep.series(sec, "txn_lf"), rep.series(sec, "txn_none"))
            if (sec, "txn_lf_resource") in rep.data:
                cl = f"{c} client{'s' if c > 1 else ''}"
                rep.ratio(f"2  +fence_resource, own statement / without, {cl}",
                          rep.series(sec, "txn_lf_resource"), rep.series(sec, "txn_lf"))
                rep.ratio(f"2  +fence_resource, same statement / without, {cl}",
                          rep.series(sec, "txn_lf_resource_same"), rep.series(sec, "txn_lf"))
        if ("reread_c1", "txn_lf_reread") in rep.data:
            out("   the issued check at its worst: each transaction's generation was issued elsewhere (nextval),")
            out("   so the trigger reads the sequence again; versus the same on a table with tokens => 'external'")
            for v, label in (("txn_lf_reread", "nextval; BEGIN; set_generation; UPDATE fenced; END"),
                             ("txn_lf_ext", "same, external tokens (no issued check)")):
                lo, hi = rep.rng("reread_c1", v)
                out(f"   1 client  {label:<50} {fmt(rep.med('reread_c1', v), 'tps')}  [{lo:.0f}..{hi:.0f}]")
            rep.ratio("2  issued check, re-read every txn / external tokens",
                      rep.series("reread_c1", "txn_lf_reread"), rep.series("reread_c1", "txn_lf_ext"))
        out()

    # -- 3 --
    if ("cycle", "lease_fence") not in rep.data:
        out("3. (not run)")
        out()
    else:
        cy = lambda v: rep.series("cycle", v)
        floor = {r: cy("sql_floor")[r] + cy("redis_set")[r] + cy("redis_eval")[r]
                 for r in cy("sql_floor") if r in cy("redis_set") and r in cy("redis_eval")}
        rep.data[("cycle", "floor")] = floor
        out("3. one acquire + release cycle (latency per cycle, one client, no pipelining)")
        for v, label in (("lease_fence", "lease_fence: acquire() + release() through SQL ¹"),
                         ("sql_floor", "floor, SQL part: SELECT 1; SELECT 1 (pgbench) ²"),
                         ("redis_set", "floor, Redis part: SET k v NX PX 30000 (redis-benchmark)"),
                         ("redis_eval", "floor, Redis part: EVAL compare-and-delete (redis-benchmark)"),
                         ("floor", "floor = the three above, summed per round"),
                         ("redispy", "redis-py 4.3 Lock: acquire(blocking=False) + release() ³")):
            lo, hi = rep.rng("cycle", v)
            out(f"   {label:<62} {fmt(rep.med('cycle', v), 'us')}  [{lo:.0f}..{hi:.0f}]")
        for v, label in (("lease_fence_tcp", "lease_fence over loopback TCP, plain"),
                         ("lease_fence_tls", "lease_fence over loopback TCP, TLS (verify-full) ⁴")):
            if ("cycle", v) in rep.data:
                lo, hi = rep.rng("cycle", v)
                out(f"   {label:<62} {fmt(rep.med('cycle', v), 'us')}  [{lo:.0f}..{hi:.0f}]")
        for v, label in (("tcp", "Redis requests per cycle, plain TCP"), ("tls", "Redis requests per cycle, TLS")):
            if ("commands", v) in rep.data:
                out(f"   {label:<62} {rep.med('commands', v):9.3f}")
        rep.ratio("3  lease_fence cycle / its floor", cy("lease_fence"), floor, 1.25, "max")
        rep.ratio("3  lease_fence cycle / redis-py Lock cycle", cy("lease_fence"), cy("redispy"))
        if ("cycle", "lease_fence_tls") in rep.data:
            rep.ratio("3  lease_fence cycle, TCP plain / unix socket", cy("lease_fence_tcp"), cy("lease_fence"))
            rep.ratio("3  lease_fence cycle, TLS / TCP plain", cy("lease_fence_tls"), cy("lease_fence_tcp"))
        out("   ¹ pgbench, 2 round trips: SELECT identity FROM lease_fence.acquire('bench-cycle', 30000) \\gset;")
        out("     SELECT status FROM lease_fence.release('bench-cycle', :identity).  Inside: a durable generation")
        out("     (nextval + a WAL flush once per 33 values), a 128-bit random identity, one EVALSHA of the acquire script")
        out("     (EXISTS, GET, SET NX PX, SET of the generation key), the session's lease list; then one EVALSHA")
        out("     of the compare-and-delete script.")
        out("   ² The floor is what any SQL-driven lease needs at the least: two SQL round trips from the")
        out("     client and the two Redis round trips (take with an identity and a TTL; compare-and-delete),")
        out("     each measured alone, one client, no pipelining; Redis keys random (-r 1e8), so SET NX sets.")
        if ("gen_server", "nextval") in rep.data:
            per_flush = 33 * (1e6 / rep.med("gen_server", "next_generation") - 1e6 / rep.med("gen_server", "nextval"))
            out(f"     Of the cycle, the durable generation costs two WAL flushes (fdatasync) per 33 acquires: the")
            out(f"     one next_generation() makes, and the commit of the xid nextval() assigned; one flush took")
            out(f"     {per_flush:.0f} µs here (section 4, in one statement), so about {2 * per_flush / 33:.0f} µs per cycle.")
        out("   ³ Same two Redis commands (SET NX PX with a uuid1 token, EVALSHA compare-and-delete) from")
        out("     Python over the unix socket: no SQL hop, no generation, no durability.")
        out("   ⁴ The TLS handshake is paid once per backend connection, not per cycle: the requests per")
        out("     cycle (2 = the acquire and the release script) are the same with and without TLS.")
        out()

    # -- 4 --
    if ("gen_sync", "nextval") not in rep.data:
        out("4. (not run)")
        out()
    else:
        out("4. next_generation() versus nextval() (throughput)")
        for sec, label in (("gen_sync", "pgbench, 1 client, one call per transaction"),
                           ("gen_async", "pgbench, 1 client, same, synchronous_commit=off"),
                           ("gen_server", f"{meta['calls']} calls in one statement (server only)")):
            for v in ("nextval", "next_generation"):
                lo, hi = rep.rng(sec, v)
                out(f"   {label:<50} {v + '()':<18} {fmt(rep.med(sec, v), 'tps')}  [{lo:.0f}..{hi:.0f}]")
            rep.ratio(f"4  next_generation / nextval: {label.split(',')[0] if sec != 'gen_async' else 'pgbench, sync_commit=off'}"
                      if sec != "gen_server" else "4  next_generation / nextval: in one statement",
                      rep.series(sec, "next_generation"), rep.series(sec, "nextval"), 0.9, "min")
        out()

    # -- 6 --
    if ("clients_1", "lease_fence") not in rep.data and ("cycle_ir", "cycle") not in rep.data:
        out("6. (not run)")
        out()
    else:
        out("6. the cycle under concurrency (each client on its own resource), and what one cycle costs")
        for c in (1, 4, 16):
            sec = f"clients_{c}"
            if (sec, "lease_fence") not in rep.data:
                continue
            s_ = lambda v: rep.series(sec, v)
            floor = {r: 1.0 / (1.0 / s_("sql")[r] + 1.0 / s_("redis_set")[r] + 1.0 / s_("redis_eval")[r])
                     for r in s_("sql") if r in s_("redis_set") and r in s_("redis_eval")}
            rep.data[(sec, "floor")] = floor
            for v, label in (("lease_fence", "lease_fence acquire + release (pgbench)"),
                             ("sql", "floor, SQL part: SELECT 1; SELECT 1 (pgbench)"),
                             ("redis_set", "floor, Redis part: the acquire script (redis-benchmark) ⁵"),
                             ("redis_eval", "floor, Redis part: the release script (redis-benchmark)"),
                             ("floor", "floor = 1 / (1/sql + 1/acquire + 1/release): shared CPUs")):
                lo, hi = rep.rng(sec, v)
                out(f"   {c:2d} clients  {label:<58} {fmt(rep.med(sec, v), 'tps')}  [{lo:.0f}..{hi:.0f}]")
            rep.ratio(f"6  throughput, {c} client{'s' if c > 1 else ''}: lease_fence / floor", s_("lease_fence"), floor,
                      0.8 if c == 16 else None, "min" if c == 16 else None)
        if ("clients_1", "lease_fence") in rep.data:
            out("   ⁵ EVALSHA of lease_fence's own scripts, with the SHA1s it sends: a grant on a fresh lease key")
            out("     and generation key (random, -r 1e8), and a compare-and-delete that finds no key (GET only; the")
            out("     cycle's release also deletes).  Each part runs alone at the same client count on the same CPUs.")
        if ("syscalls", "cycle") in rep.data:
            per = {v: rep.med("syscall", v) for (sec, v) in rep.data if sec == "syscall"}
            top = ", ".join(f"{v} {n:.2f}" for v, n in sorted(per.items(), key=lambda x: -x[1])[:8])
            out(f"   system calls per cycle (strace -c -f on one backend)               {rep.med('syscalls', 'cycle'):9.2f}")
            out(f"     of which: {top}")
        waits = {v: rep.med("waits", v) for (sec, v) in rep.data if sec == "waits"}
        if waits:
            top = ", ".join(f"{v} {100 * n:.0f}%" for v, n in sorted(waits.items(), key=lambda x: -x[1])[:6])
            out("   where the 16 backends are (pg_stat_activity sampled during a run of its own):")
            out(f"     {top}")
            out("     (Extension: waiting for Redis' reply, or for a CPU after it came; Client: for pgbench;")
            out("     LWLock:WALWrite and IO:WALSync: a draw waiting for the WAL flush that makes its generation durable)")
        if ("cycle_ir", "cycle") in rep.data:
            out(f"   instructions per cycle (callgrind, inside the executor, {meta.get('cg_cycles', '?')} cycles)   {rep.med('cycle_ir', 'cycle'):9.0f}")
            ir = rep.med("cycle_ir", "cycle")
            rep.ratios.append(("6  instructions per acquire + release cycle", ir, ir, ir, 35000, "max", ir <= 35000))
        out()

    # -- 5 --
    if True:
        out("5. backend memory (kB; RssAnon = the backend's private memory, VmRSS also counts shared buffers it touched)")
        flat = []
        for name, label, count in (("cycles", "acquire/release cycles (pgbench, 1 backend)", meta["mem_cycles"]),
                                   ("updates", "fenced single-row UPDATEs (pgbench, 1 backend)", meta["mem_updates"]),
                                   ("bulk", f"fenced row updates, 5 UPDATEs of {rows} rows", str(5 * rows))):
            try:
                s = rss(f"{outdir}/rss_{name}.dat")
            except FileNotFoundError:
                out(f"   {label}: not run")
                continue
            if len(s) < 2:
                out(f"   {label}: too few samples")
                continue
            if name == "bulk":
                start = s[1]            # after the first statement
            else:
                t_end = s[-1][0]
                start = next(x for x in s if x[0] >= 0.1 * t_end)
            end = s[-1]
            grow = end[2] - start[2]
            ok = grow < 1024
            flat.append(ok)
            what = "after the first statement" if name == "bulk" else f"at {start[0]:.0f} s (10%)"
            out(f"   {int(count):>8} {label:<48} RssAnon {start[2]:.0f} {what} -> {end[2]:.0f} at the end "
                f"({grow:+.0f}); VmRSS {start[1]:.0f} -> {end[1]:.0f}; max RssAnon {max(x[2] for x in s):.0f}")
            rep.ratios.append((f"5  RssAnon growth, {name} (MB)", grow / 1024, grow / 1024, grow / 1024, 1.0, "max", ok))
        out("   flat = RssAnon grows by less than 1 MB from 10% of the run to its end.")
        out()

    # -- 7 --
    if not any(sec.startswith("job_c") for sec, v in rep.data):
        out("7. (not run)")
        out()
    else:
        modes = [("a", "lease_fence, 3 round trips ¹"),
                 ("job", "lease_fence, 1 round trip (transaction scope) ²"),
                 ("job_simple", "lease_fence, 1 round trip, one simple-query string"),
                 ("b", "Redis alone, careful: script, UPDATE, EVALSHA ³"),
                 ("b2", "Redis alone: SET NX PX, INCR, UPDATE, EVALSHA ⁴"),
                 ("job_nolease", "control, no lease: ² with SELECT of constants ⁵"),
                 ("b_noredis", "control, no lease: ³'s UPDATE alone ⁵")]
        out(f"7. a fenced job: lease on a resource of the client's own, one fenced single-row UPDATE, release")
        out(f"   (test/bench/job.c, one thread + connection per client, {meta.get('job_rounds', '?')} round(s) of "
            f"{meta.get('job_seconds', '?')} s each; synchronous_commit=on, fsync=on)")
        out(f"   {'':<11} {'':<52} {'':>12}  {'':<16} {'backend':>9} {'backend':>8} {'Redis':>9} {'client':>9}")
        out(f"   {'':<11} {'':<52} {'jobs/s':>12}  {'':<16} {'CPU/job':>9} {'ctx/job':>8} {'CPU/job':>9} {'CPU/job':>9}")
        for c in (1, 4, 16):
            sec = f"job_c{c}"
            if not any(s_ == sec for s_, v in rep.data):
                continue
            cl = f"{c} client{'s' if c > 1 else ''}"
            for v, label in modes:
                if (sec, v) not in rep.data:
                    continue
                lo, hi = rep.rng(sec, v)
                rcpu = rep.med(f"job_redis_cpu_c{c}", v)
                ccpu = (rep.med(f"job_client_cpu_c{c}", v)
                        if (f"job_client_cpu_c{c}", v) in rep.data else -1)
                out(f"   {cl:<11} {label:<52} {fmt(rep.med(sec, v), 'tps')}  [{lo:.0f}..{hi:.0f}]".ljust(96)
                    + f"{rep.med(f'job_cpu_c{c}', v):6.0f} µs {rep.med(f'job_ctx_c{c}', v):8.2f} "
                    + (f"{rcpu:6.0f} µs" if rcpu >= 0 else "       ?")
                    + (f" {ccpu:6.0f} µs" if ccpu >= 0 else "        ?"))
            j = lambda v: rep.series(sec, v)
            # the targets: the one-round-trip job faster than the
            # careful application-side pattern by 10% with one client, and
            # at least as fast at 16
            for v in ("job", "job_simple", "a"):
                for base in ("b", "b2"):
                    if (sec, v) not in rep.data or (sec, base) not in rep.data:
                        continue
                    target = {1: 1.1, 16: 1.0}.get(c) if (v, base) == ("job", "b") else None
                    value = rep.ratio(f"7  {v} / {base}, {cl} (jobs/s)", j(v), j(base),
                                      target, "min" if target else None)
                    lo, hi = rep.ratios[-1][2], rep.ratios[-1][3]
                    verdict = "" if target is None else (
                        f"   target >= {target}: {'target met' if value >= target else 'target missed'}")
                    out(f"   {'':<11} {v} ÷ {base} = {value:.3f} [{lo:.3f}..{hi:.3f}]{verdict}")
            # the backend's CPU per job: the job's at most 60 µs above the
            # careful pattern's (median of the per-round differences)
            if (sec, "job") in rep.data and (sec, "b") in rep.data:
                cj, cb = rep.series(f"job_cpu_c{c}", "job"), rep.series(f"job_cpu_c{c}", "b")
                rounds = sorted(set(cj) & set(cb))
                per = [cj[r] - cb[r] for r in rounds]
                value = statistics.median(per)
                met = value <= 60
                rep.ratios.append((f"7  backend CPU/job, job - b, {cl} (µs)", value, min(per), max(per),
                                   60, "max", met))
                out(f"   {'':<11} backend CPU/job, job - b = {value:+.0f} µs [{min(per):+.0f}..{max(per):+.0f}]"
                    f"   target <= +60: {'target met' if met else 'target missed'}")
        ran = {v for sec_, v in rep.data if sec_.startswith("job_c")}
        if "a" in ran:
            out("   ¹ acquire($1, 5000); \"BEGIN; SELECT set_config('lease_fence.generation', g, true); UPDATE; COMMIT\"")
            out("     (one string); release($1, identity): three client round trips, prepared where parameterised.")
        if "job" in ran:
            out("   ² BEGIN; acquire($1, 5000, scope => 'transaction'); UPDATE; COMMIT in libpq's pipeline mode (prepared,")
            out("     one sync): one round trip; the lease is the transaction's generation, checked at COMMIT and")
            out("     released by the server after it.")
        if "b" in ran:
            out("   ³ EVALSHA of SET job:<i> <random> NX PX 5000 + INCR job:<i>:token (one script); UPDATE ... SET fence =")
            out("     token WHERE id = i AND fence <= token (prepared, autocommit); EVALSHA compare-and-delete: one SQL and")
            out("     two Redis round trips.  The comparison the targets are set against.")
        if "b2" in ran:
            out("   ⁴ as ³, with SET NX PX and INCR sent as two commands: one SQL and three Redis round trips.")
        if "job_nolease" in ran or "b_noredis" in ran:
            out("   ⁵ what the PostgreSQL part of ² and of ³ costs by itself, with no lease and no Redis: ²'s pipeline")
            out("     with the acquire replaced by SELECT true, 0, $1; ³'s UPDATE under a clock reading as its token.")
        if ("job_ir", "job") in rep.data and ("job_ir", "b") in rep.data:
            ij, ib = rep.med("job_ir", "job"), rep.med("job_ir", "b")
            out(f"   instructions per job in the backend (callgrind, single-user, prepared, "
                f"{meta.get('cg_jobs', '?')} jobs): job {ij:,.0f}, b's UPDATE {ib:,.0f}, difference {ij - ib:,.0f}")
            rep.ratios.append(("7  instructions per job, job - b's UPDATE", ij - ib, ij - ib, ij - ib, None, None, None))
        if ("job_syscalls", "job") in rep.data:
            per = sorted(((v, rep.med("job_syscall", v)) for s_, v in rep.data if s_ == "job_syscall"),
                         key=lambda x: -x[1])
            out(f"   system calls per job in the job's backend (², 1 client, strace -c): "
                f"{rep.med('job_syscalls', 'job'):.2f}: " + ", ".join(f"{n} {c:.2f}" for n, c in per if c >= 0.05))
        out("   CPU/job and ctx/job: all the clients' backends (/proc/<pid>/stat and status, voluntary + involuntary")
        out("   switches) over the timed window, per job; Redis CPU/job: redis-server's, which b uses for what the")
        out("   backend does for lease_fence; client CPU/job: job.c's own (getrusage).  Each job.c run checks every")
        out("   job: lease granted, one row, released.")
        out()

    # -- 8 --
    if ("election_frozen", "excess") not in rep.data and ("election_split", "old_after") not in rep.data:
        out("8. (not run)")
        out()
    else:
        ttl = meta.get("election_ttl_ms", "?")
        out(f"8. elections (test/bench/elections.py, {meta.get('election_rounds', '?')} rounds of each; "
            f"frozen leader and split-brain window: ttl_ms {ttl})")

        def p99(vals):
            # nearest rank: of 50 rounds, the highest
            s_ = sorted(vals)
            return s_[max(0, -(-99 * len(s_) // 100) - 1)]

        if ("election_frozen", "excess") in rep.data:
            v = list(rep.series("election_frozen", "excess").values())
            med, p = statistics.median(v), p99(v)
            out(f"   failover after a frozen leader: its lease's end (before its campaign was sent + ttl_ms) to the")
            out(f"   waiting follower's campaign returning, over the TTL ¹: median {med:.1f} ms, p99 {p:.1f} ms "
                f"[{min(v):.1f}..{max(v):.1f}]")
            rep.ratios.append(("8  frozen leader: failover over the TTL, median (ms)", med, min(v), max(v), 100, "max", med <= 100))
            rep.ratios.append(("8  frozen leader: failover over the TTL, p99 (ms)", p, min(v), max(v), 250, "max", p <= 250))
        out("   the waiting follower's campaign returning (ttl_ms 10 x the above), from:")
        for how, label in (("resign", "resign() returning"),
                           ("resign_sent", "resign() being sent"),
                           ("close", "the leader's client closing its connection"),
                           ("terminate", "pg_terminate_backend() of the leader returning")):
            if ("election_handover", how) not in rep.data:
                continue
            v = list(rep.series("election_handover", how).values())
            med = statistics.median(v)
            out(f"     {label + ':':<52} median {med:6.1f} ms, "
                f"p99 {p99(v):6.1f} ms [{min(v):.1f}..{max(v):.1f}]")
            if how in ("resign", "close", "terminate"):
                rep.ratios.append((f"8  failover after {how}, median (ms)", med, min(v), max(v), 20, "max", med <= 20))
        if ("election_split", "old_after") in rep.data:
            after = rep.series("election_split", "old_after")
            total = sum(after.values())
            acc = rep.series("election_split", "old_accepted")
            late = rep.series("election_split", "old_late")
            ref = rep.series("election_split", "refused")
            out(f"   split-brain window ²: old-term rows committed after the new leader's campaign committed: "
                f"{total:.0f} in {len(after)} rounds")
            out(f"     old-term rows accepted per round: median {statistics.median(acc.values()):.0f}, of them after the")
            out(f"     old lease ran out by the old leader's clock: median {statistics.median(late.values()):.0f}; "
                f"writes refused (LF001/LF010) per round: median {statistics.median(ref.values()):.0f}")
            rep.ratios.append(("8  split brain: old-term rows after the new campaign (all rounds)", total, min(after.values()),
                               max(after.values()), 0, "max", total <= 0))
        out("   ¹ The leader never renews: its client sends nothing more, its backend stays idle and healthy (what a")
        out("     SIGSTOPped or paused client looks like to the server). The lease's end is taken on the leader's side")
        n = len(rep.series("election_frozen", "excess")) if ("election_frozen", "excess") in rep.data else 0
        out("     before its campaign was sent, so the excess is an upper bound. p99: nearest rank (of "
            f"{n} rounds, the {-(-99 * n // 100)}th lowest).")
        out("   ² The old leader writes in a loop, each write a transaction: set_generation(term, election), then a")
        out("     statement that updates a one-row commit-order counter and inserts (term, counter value). The new")
        out("     leader's campaign runs in a transaction that updates the counter too before COMMIT. The counter row's")
        out("     lock is held to COMMIT, so its values are in commit order: an old-term row above the new leader's")
        out("     value committed after it. Accepted writes after the old lease's end are legitimate until a newer")
        out("     term fences the election: the fence, not the TTL, is the guarantee.")
        out()

    # -- 9 --
    if ("fair_requests", "fair") not in rep.data and ("fair_order", "in_order") not in rep.data \
            and ("fair_ir", "fair") not in rep.data:
        out("9. (not run)")
        out()
    else:
        def mr(sec, v, f="{:.2f}"):
            """median [min..max] over the rounds"""
            vals = list(rep.series(sec, v).values())
            return f"{f.format(statistics.median(vals))} [{f.format(min(vals))}..{f.format(max(vals))}]"

        def has(sec, v):
            return (sec, v) in rep.data

        waiters = meta.get("fair_waiters", "?")
        out(f"9. fair waiting (test/bench/fair.py): {waiters} waiters and a holder on one resource, each holder holds "
            f"{meta.get('fair_hold_ms', '?')} ms, releases and acquires again")
        out(f"   (wait_ms 60000); {meta.get('fair_grants', '?')} grants a run, {meta.get('fair_rounds', '?')} "
            f"interleaved rounds of four runs (order, fair, unfair, baseline); median over the rounds [min..max]; load average during the section: "
            f"{meta.get('fair_load', '?')}")
        if has("fair_order", "in_order"):
            judged = rep.series("fair_order", "judged")
            empty = rep.series("fair_order", "queue_empty")
            inorder = rep.series("fair_order", "in_order")
            n_in = sum(inorder[r] * judged[r] / 100 for r in judged)
            out(f"   fair => true, grants in arrival order (the grant after a release went to the identity queue() showed "
                f"next before it):")
            out(f"     {mr('fair_order', 'in_order', '{:.3f}')} %; all rounds: {n_in:.0f} of {sum(judged.values()):.0f} "
                f"grants (and {sum(empty.values()):.0f} after a release that found the queue empty)")
        if has("fair_requests", "fair") and has("fair_requests", "unfair"):
            out(f"   {'':<62} {'fair => true':<22} {'unfair (today)':<22} {'baseline ⁵':<22}")

            def row(label, sec, f="{:.2f}", fv="fair", uv="unfair", bv=None):
                a = mr(sec, fv, f) if has(sec, fv) else "-"
                b = mr(sec, uv, f) if has(sec, uv) else "-"
                c = mr(sec, bv, f) if bv and has(sec, bv) else ""
                out(f"   {label:<62} {a:<22} {b:<22} {c}".rstrip())

            row("Redis requests per grant ¹", "fair_requests")
            for mode in ("fair", "unfair"):
                per = sorted(((v, rep.med(f"fair_request_{mode}", v)) for s_, v in rep.data
                              if s_ == f"fair_request_{mode}"), key=lambda x: -x[1])
                out(f"     {mode}: " + ", ".join(f"{v.upper()} {n:.2f}" for v, n in per if n >= 0.005)
                    + ("" if all(n >= 0.005 for v, n in per) else
                       "; " + ", ".join(f"{v.upper()} {n:.3f}" for v, n in per if n < 0.005)))
            row("new Redis connections per grant (the waits' subscriptions)", "fair_connections")
            row("commands run inside the scripts per grant ²", "fair_inside", "{:.1f}")
            for mode in ("fair", "unfair"):
                per = sorted(((v, rep.med(f"fair_inside_{mode}", v)) for s_, v in rep.data
                              if s_ == f"fair_inside_{mode}"), key=lambda x: -x[1])
                out(f"     {mode}: " + ", ".join(f"{v.upper()} {n:.2f}" for v, n in per))
            row("release sent -> next holder's acquire returned, median (ms) ³", "fair_handover_p50", "{:.2f}",
                "fair_from_sent", "unfair_from_sent", "advisory_from_sent")
            row("release sent -> next holder's acquire returned, p99 (ms)", "fair_handover_p99", "{:.2f}",
                "fair_from_sent", "unfair_from_sent", "advisory_from_sent")
            row("release returned -> next acquire returned, median (ms)", "fair_handover_p50", "{:.2f}",
                "fair_from_done", "unfair_from_done", "advisory_from_done")
            row("release returned -> next acquire returned, p99 (ms)", "fair_handover_p99", "{:.2f}",
                "fair_from_done", "unfair_from_done", "advisory_from_done")
            row("longest handover of a run, from release sent (ms)", "fair_handover_max", "{:.1f}",
                "fair_from_sent", "unfair_from_sent", "advisory_from_sent")
            row("grants that went to the session that had just released (%)", "fair_same_session", "{:.1f}", bv="advisory")
            row("wait: acquire sent -> returned, median (ms)", "fair_wait_p50", "{:.1f}", bv="advisory")
            row("wait: acquire sent -> returned, p99 (ms)", "fair_wait_p99", "{:.1f}", bv="advisory")
            row("longest wait of a run (ms)", "fair_wait_max", "{:.0f}", bv="advisory")
            row(f"grants per session, fewest (of {meta.get('fair_grants', '?')}, {int(waiters) + 1 if waiters.isdigit() else '?'} sessions)",
                "fair_grants_per_session_min", "{:.0f}", bv="advisory")
            row("grants per session, most", "fair_grants_per_session_max", "{:.0f}", bv="advisory")
            row("grants per second", "fair_grants_per_s", "{:.0f}", bv="advisory")
            row("waits that ended 'stale' (asked again) per grant ⁴", "fair_stale", "{:.3f}")
            rep.ratio("9  Redis requests per grant, fair / unfair",
                      rep.series("fair_requests", "fair"), rep.series("fair_requests", "unfair"))
            rep.ratio("9  handover p99 (from release sent), fair / unfair",
                      rep.series("fair_handover_p99", "fair_from_sent"),
                      rep.series("fair_handover_p99", "unfair_from_sent"))
            rep.ratio("9  handover median (from release sent), fair / unfair",
                      rep.series("fair_handover_p50", "fair_from_sent"),
                      rep.series("fair_handover_p50", "unfair_from_sent"))
            if has("fair_handover_p99", "advisory_from_sent"):
                for q, name in (("p99", "p99"), ("p50", "median")):
                    rep.ratio(f"9  handover {name}, fair / pg_advisory_lock baseline",
                              rep.series(f"fair_handover_{q}", "fair_from_sent"),
                              rep.series(f"fair_handover_{q}", "advisory_from_sent"))
        if has("fair_ir", "fair") and has("fair_ir", "unfair"):
            a, b = rep.med("fair_ir", "fair"), rep.med("fair_ir", "unfair")
            out(f"   instructions per acquire + release, no contention (callgrind, executor of a single-user backend, "
                f"{meta.get('cg_fair', '?')} cycles,")
            out(f"   wait_ms 1000): fair {a:,.0f}, unfair {b:,.0f}, fair {100 * (a / b - 1):+.1f} %")
            rep.ratio("9  instructions per acquire + release, fair / unfair",
                      rep.series("fair_ir", "fair"), rep.series("fair_ir", "unfair"))
        out("   The issue asks: 100 % in arrival order; <= 4 Redis requests per grant (fair); a handover p99 <= 2 ms;")
        out("   fair instructions <= 10 % above unfair.  The bench reports; docs/performance.md compares.")
        out("   ¹ INFO commandstats calls before and after each run, per grant (every grant of the run), of what the")
        out("     backends send: EVALSHA, EVAL, (S)SUBSCRIBE, (S)UNSUBSCRIBE, PSUBSCRIBE, PUNSUBSCRIBE, PING, AUTH, SELECT,")
        out("     ROLE, HELLO, WAIT, SCRIPT LOAD, CLIENT SETNAME (those named are those that occurred).  Each session's")
        out("     main Redis connection was made before the run; a wait's subscription connection is made per wait")
        out("     (its set-up PING counts).")
        out("   ² Redis counts the commands a script runs under their own names; the scripts' work, not requests.")
        out("   ³ On one monotonic clock (CLOCK_MONOTONIC) across the sessions' processes; consecutive grants by")
        out("     generation.  \"sent\": just before the holder's release() was sent (an upper bound); \"returned\":")
        out("     once it returned (the next holder may have been granted before: then negative).")
        out("   ⁴ acquire(wait_ms > 0) answers 'stale' after its fourth stale attempt in one wait; fair.py asks again")
        out("     (the wait measured from the first ask).")
        out("   ⁵ The same sessions, processes and clock under the same load, with pg_advisory_lock(53) and")
        out("     pg_advisory_unlock(53) for acquire and release: PostgreSQL's own lock queue, no Redis (one SQL round")
        out("     trip each way, one waiter woken): what the machine allows a handover through SQL here.")
        out()

    out("RATIOS (median of per-round ratios [their range])              value                target   met")
    for label, value, lo, hi, target, sense, met in rep.ratios:
        t = "" if target is None else (f"<= {target}" if sense == "max" else f">= {target}")
        m = "" if met is None else ("yes" if met else "NO")
        out(f"   {label:<58} {value:6.3f} [{lo:.3f}..{hi:.3f}]  {t:>8}   {m}")

    with open(f"{outdir}/results.txt", "w") as f:
        f.write("\n".join(rep.lines) + "\n")
    with open(f"{outdir}/ratios.dat", "w") as f:
        f.write("# i label value lo hi target\n")
        for i, (label, value, lo, hi, target, sense, met) in enumerate(
                r for r in rep.ratios if not r[0].startswith(("5 ", "8 ", "9 ")) and "instructions" not in r[0] and "µs" not in r[0]):
            f.write(f'{i} "{label[3:]}" {value:.4f} {lo:.4f} {hi:.4f} {target if target is not None else "NaN"}\n')


if __name__ == "__main__":
    main()

"""test/unit/answers.py: checks the extension's decoder against the answer
table, row by row, through the test binary test/unit/lf_unit.c.

    /usr/bin/python3 test/unit/answers.py LF_UNIT ANSWERS.json

Standard library only.  Each row's reply is written as RESP bytes, read by
hiredis's reader inside the binary (whole, in two pieces at every cut, and
byte by byte) and decoded by src/redis/redis_reply.c; the answer must be the
row's: its outcome, and the fields the row names (generation, stored,
pttl_ms, value).  Error rows are checked for every script.  Prints TAP
lines "ok - ..." / "not ok - ..." (test/unit/c.sh numbers them).
"""
import json
import subprocess
import sys


def resp(r):
    """RESP2 bytes of a reply as answers.json writes it."""
    if not isinstance(r, dict) or len(r) != 1:
        raise ValueError("not one reply: %r" % (r,))
    (kind, v), = r.items()
    if kind == "integer":
        if not isinstance(v, int) or isinstance(v, bool):
            raise ValueError("integer %r" % (v,))
        return b":%d\r\n" % v
    if kind == "bulk":
        b = v.encode()
        return b"$%d\r\n%s\r\n" % (len(b), b)
    if kind == "nil":
        return b"$-1\r\n"
    if kind == "status":
        return b"+%s\r\n" % v.encode()
    if kind == "error":
        return b"-%s\r\n" % v.encode()
    if kind == "array":
        return b"*%d\r\n" % len(v) + b"".join(resp(e) for e in v)
    raise ValueError("unknown reply type %r" % kind)


class Binary:
    def __init__(self, path):
        self.p = subprocess.Popen([path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  universal_newlines=True)

    def ask(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        out = self.p.stdout.readline()
        if not out:
            raise RuntimeError("the test binary ended")
        return out.rstrip("\n")

    def close(self):
        self.p.stdin.close()
        return self.p.wait()


def parse(line):
    if line.startswith("error="):
        return None, line[len("error="):]
    d = dict(f.split("=", 1) for f in line.split(" "))
    return d, None


def expect_fields(row, got):
    """The row's outcome and the fields it names, against the answer."""
    why = []
    if got["outcome"] != row["outcome"]:
        why.append("outcome %s, the table says %s" % (got["outcome"], row["outcome"]))
    for f in ("generation", "stored"):
        if f in row and got[f] != row[f]:
            why.append("%s %s, the table says %s" % (f, got[f], row[f]))
    if "pttl_ms" in row:
        want = "null" if row["pttl_ms"] is None else str(row["pttl_ms"])
        if got["pttl"] != want:
            why.append("pttl_ms %s, the table says %s" % (got["pttl"], want))
    if "value" in row:
        want = "null" if row["value"] is None else row["value"].encode().hex()
        if got["value"] != want:
            why.append("value %s, the table says %s" % (got["value"], want))
    if "election_value" in row:
        ev = row["election_value"]
        want = "null" if ev is None else ev.encode().hex()
        if got.get("election_value") != want:
            why.append("election_value %s, the table says %s" % (got.get("election_value"), want))
    if "position" in row and got.get("position") != str(row["position"]):
        why.append("position %s, the table says %s" % (got.get("position"), row["position"]))
    if "waiters" in row:
        want = ",".join("%s:%d" % (i.encode().hex(), t) for i, t in row["waiters"])
        if got.get("waiters") != want:
            why.append("waiters %s, the table says %s" % (got.get("waiters"), want))
    return why


def main():
    binary, path = sys.argv[1], sys.argv[2]
    failed = 0

    def point(ok, text, why=()):
        nonlocal failed
        print("%s - %s" % ("ok" if ok else "not ok", text))
        for w in why:
            print("#   %s" % w)
        if not ok:
            failed += 1

    try:
        with open(path) as f:
            table = json.load(f)
    except (OSError, ValueError) as e:
        point(False, "read the answer table %s" % path, [str(e)])
        return 1
    b = Binary(binary)
    scripts = b.ask("scripts").split()
    outcomes = set(b.ask("outcomes").split())

    want = set(table.get("outcomes", {}))
    point(want == outcomes, "the decoder's outcomes are the table's",
          ["only in the table: %s" % sorted(want - outcomes),
           "only in the decoder: %s" % sorted(outcomes - want)] if want != outcomes else [])
    # the client libraries' scripts' rows, and the extension's own (holder)
    extension_rows = [r for r in table.get("extension_replies", []) if "script" in r]
    named = {r.get("script") for r in table.get("replies", []) + extension_rows}
    point(named == set(scripts), "the table has rows for every script, and no other",
          ["table: %s, decoder: %s" % (sorted(map(str, named)), scripts)] if named != set(scripts) else [])

    # the statuses a library must handle are the ones the extension answers
    ours = set(b.ask("statuses").split())
    listed = {"%s:%s" % (r.get("operation"), r.get("status")) for r in table.get("statuses", [])}
    point(ours == listed, "the table's statuses are those acquire, renew and release answer (src/base/stats.h)",
          ["only in the table: %s" % sorted(listed - ours),
           "only in the extension: %s" % sorted(ours - listed)] if ours != listed else [])

    def check_reply(script, row, text):
        """One row's reply, read and decoded as script's, against the row."""
        try:
            line = b.ask("reply %s %s" % (script, resp(row["reply"]).hex()))
        except (KeyError, ValueError) as e:
            point(False, text, ["cannot encode: %s" % e])
            return
        got, err = parse(line)
        if err is not None:
            point(False, text, [err])
            return
        why = expect_fields(row, got)
        point(not why, text, why)

    for i, row in enumerate(table.get("replies", [])):
        check_reply(row.get("script"), row, "replies[%d]: %s %s -> %s" % (
            i, row.get("script"), json.dumps(row.get("reply")), row.get("outcome")))

    for i, row in enumerate(extension_rows):
        check_reply(row.get("script"), row, "extension_replies[%d]: %s %s -> %s" % (
            i, row.get("script"), json.dumps(row.get("reply")), row.get("outcome")))

    for i, row in enumerate(table.get("errors", [])):
        for script in scripts:
            check_reply(script, row, "errors[%d] to %s: %s -> %s" % (
                i, script, json.dumps(row.get("reply")), row.get("outcome")))

    for i, row in enumerate(table.get("transport", [])):
        text = "transport[%d]: %s -> %s" % (i, row.get("request"), row.get("outcome"))
        got, err = parse(b.ask("transport %s" % row.get("request")))
        if err is not None:
            point(False, text, [err])
            continue
        why = expect_fields(row, got)
        point(not why, text, why)

    # a stray reply after the one asked for is never read as this one's
    got, err = parse(b.ask("reply renew %s" % (resp({"integer": 1}) + resp({"integer": 0})).hex()))
    stray = err is not None and "left over" in err
    point(stray, "RESP reader: bytes after a reply are noticed, not taken as part of it",
          [] if stray else [err or str(got)])
    b.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

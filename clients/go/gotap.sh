#!/usr/bin/env bash
# clients/go/gotap.sh — `go test -v` output (stdin) to one TAP line per test
# case: a test's "--- PASS/FAIL/SKIP" line, subtests instead of their parent.
# A failed case's log lines follow it as "# " comments. Prints the counts on
# the last line as "# counts: PASSED FAILED SKIPPED"; exits 1 when one failed
# or none ran.
set -uo pipefail
awk '
/^ *--- (PASS|FAIL|SKIP): / {
	line = $0; sub(/^ */, "", line)
	split(line, f, " ")
	res = f[2]; sub(/:$/, "", res); name = f[3]
	n++; names[n] = name; result[name] = res
	next
}
/^ +[a-z_A-Z0-9]+\.go:[0-9]+: / || /^    / { msg[curr] = msg[curr] "# " $0 "\n" ; next }
/^=== (RUN|CONT|PAUSE) / { curr = $3; next }
END {
	k = 0; pass = 0; fail = 0; skip = 0
	for (i = 1; i <= n; i++) {
		name = names[i]; parent = 0
		for (j = 1; j <= n; j++)
			if (index(names[j], name "/") == 1) { parent = 1; break }
		if (parent) {
			if (result[name] == "FAIL") failedparent[name] = 1
			continue
		}
		k++
		if (result[name] == "PASS") { print "ok " k " - go: " name; pass++ }
		else if (result[name] == "SKIP") { print "ok " k " - go: " name " # SKIP"; skip++ }
		else { print "not ok " k " - go: " name; printf "%s", msg[name]; fail++ }
	}
	print "# counts: " pass " " fail " " skip
	exit (fail > 0 || k == 0) ? 1 : 0
}'

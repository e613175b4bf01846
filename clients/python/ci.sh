#!/usr/bin/env bash
# clients/python/ci.sh — build the lease-fence package the way Debian's
# tools do (no network), install the wheel into a fresh venv, run the test
# command (python3 -m pytest) against the harness's servers
# (test/clients/run.sh), mypy and the example programs (examples/python,
# examples/celery), and end with
# "python: N passed, N failed" (test cases, mypy, the examples and the check
# that a build without the repository's scripts/ fails; skipped tests are
# reported on the line before, not counted).
#
# Run with cwd = clients/python (a copy); writes only into $LF_CLIENT_WORK.
set -uo pipefail

PY=/usr/bin/python3
here=$(pwd)
work=${LF_CLIENT_WORK:?LF_CLIENT_WORK: a writable empty directory}
src_top=${LF_SRC:-$(cd "$here/../.." && pwd)}
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INDEX=1 PIP_NO_INPUT=1

finish() {	# passed failed
	echo "python: $1 passed, $2 failed"
	[ "$2" -eq 0 ]
	exit $?
}

echo "== python: $($PY --version 2>&1) at $PY"

# 1. build sdist + wheel from a copy of the sources (nothing written into the tree)
#    The copy keeps the repository's layout, clients/python beside scripts/:
#    setup.py copies ../../scripts/*.lua (the Lua scripts of the client-side
#    mode) into the wheel and the sdist.
rm -rf "$work/build" "$work/dist"
mkdir -p "$work/build/clients/python" "$work/build/scripts" "$work/dist"
cp -r "$here/." "$work/build/clients/python/" || finish 0 1
cp "$src_top"/scripts/*.lua "$work/build/scripts/" || finish 0 1
bdir=$work/build/clients/python
rm -rf "$bdir/build" "$bdir/dist" "$bdir/src/"*.egg-info "$bdir/src/lease_fence/scripts"
if "$PY" -c 'import build' 2>/dev/null; then
	echo "== python: building sdist and wheel (python3 -m build --no-isolation)"
	(cd "$bdir" && "$PY" -m build --no-isolation --outdir "$work/dist" .) \
		>"$work/build.log" 2>&1
else
	echo "== python: building the wheel (pip wheel --no-build-isolation; no python3-build)"
	(cd "$bdir" && "$PY" -m pip wheel --no-index --no-build-isolation --no-deps \
		--wheel-dir "$work/dist" .) >"$work/build.log" 2>&1
fi
rc=$?
wheel=$(ls "$work"/dist/lease_fence-1.5.0-*.whl 2>/dev/null | head -n 1)
if [ "$rc" -ne 0 ] || [ -z "$wheel" ]; then
	cat "$work/build.log"
	echo "== python: build failed (exit $rc)"
	finish 0 1
fi
ls -l "$work/dist"

# 2. a fresh venv that sees Debian's psycopg, SQLAlchemy, Django, pytest;
#    the package comes from the wheel only
rm -rf "$work/venv"
"$PY" -m venv --system-site-packages "$work/venv" || { echo "== python: venv failed"; finish 0 1; }
VPY=$work/venv/bin/python
"$VPY" -m pip install --no-index --no-deps "$wheel" >"$work/install.log" 2>&1 ||
	{ cat "$work/install.log"; echo "== python: pip install failed"; finish 0 1; }
"$VPY" -c 'import lease_fence, sys; print("== python: lease_fence", lease_fence.__version__, "from", lease_fence.__file__)'

# 3. the test command, python3 -m pytest with pyproject.toml's configuration,
#    in a copy of tests/ and pyproject.toml without src/ (src/ is never on
#    sys.path: the installed wheel is tested)
rm -rf "$work/run"
mkdir -p "$work/run" && cp -r "$here/tests" "$here/pyproject.toml" "$work/run/" || finish 0 1
junit=$work/junit.xml
rm -f "$junit"
(cd "$work/run" && LF_EXPECT_INSTALLED=1 "$VPY" -m pytest -p no:cacheprovider -v \
	--junitxml="$junit")
prc=$?
echo "== python: pytest exit $prc"

counts=$("$VPY" - "$junit" <<'PYEOF'
import sys
import xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except Exception as e:
    print("0 0 0 0")           # no report: pytest crashed
    sys.exit(0)
passed = failed = skipped = 0
for case in root.iter("testcase"):
    tags = {child.tag for child in case}
    if tags & {"failure", "error"}:
        failed += 1
    elif "skipped" in tags:
        skipped += 1
    else:
        passed += 1
print(passed, failed, skipped, 1)
PYEOF
)
read -r passed failed skipped reported <<<"$counts"
if [ "${reported:-0}" != 1 ]; then
	echo "== python: pytest wrote no report (crashed)"
	failed=$((failed + 1))
elif [ "$prc" -ne 0 ] && [ "$failed" -eq 0 ]; then
	# pytest failed without a failed case (e.g. an internal error): count it
	if [ "$prc" -ne 5 ] || [ "$passed" -eq 0 ]; then
		failed=$((failed + 1))
	fi
fi
if [ "$passed" -eq 0 ] && [ "$failed" -eq 0 ]; then
	echo "== python: no test ran"
	failed=1
fi

# 4. python3 -m mypy: pyproject.toml's [tool.mypy] on the package, in the
#    build's copy (its cache in $work); one case
echo "== python: mypy ($("$PY" -m mypy --version 2>&1))"
if (cd "$bdir" && "$PY" -m mypy --cache-dir "$work/mypy-cache"); then
	passed=$((passed + 1))
	echo "== python: mypy passed"
else
	failed=$((failed + 1))
	echo "== python: mypy failed"
fi

# 5. the example programs, with the installed package (client_side.py: on
#    the portable edition's database, LF_PORTABLE_PGPORT / LF_PORTABLE_DB;
#    job.py: the fenced job)
for name in two_holders.py client_side.py job.py; do
	example=$src_top/examples/python/$name
	echo "== python: example $example"
	if [ -f "$example" ] && (cd "$work" && timeout -k 5 60 "$VPY" "$example"); then
		passed=$((passed + 1))
		echo "== python: example passed"
	else
		failed=$((failed + 1))
		echo "== python: example failed"
	fi
done

# 5b. examples/celery as a user runs it: run.py starts `celery -A tasks
#    worker` (the venv's python) and sends tasks; the broker and the results
#    in databases 2 and 3 of the test Redis (lease_fence's keys are in 0)
example=$src_top/examples/celery/run.py
echo "== python: example $example"
if [ -f "$example" ] && (cd "$work" &&
	CELERY_BROKER_URL="redis+socket://${LF_REDIS_SOCK:?}?virtual_host=2" \
	CELERY_RESULT_BACKEND="redis+socket://$LF_REDIS_SOCK?virtual_host=3" \
	timeout -k 5 120 "$VPY" "$example"); then
	passed=$((passed + 1))
	echo "== python: example passed"
else
	failed=$((failed + 1))
	echo "== python: example failed"
fi

# 6. a build without the repository's scripts/ fails, and says why
#    (two levels down: its ../../scripts is $work/noscripts/scripts, absent)
rm -rf "$work/noscripts"
nsdir=$work/noscripts/clients/python
mkdir -p "$nsdir" && cp -r "$here/." "$nsdir/" || finish 0 1
rm -rf "$nsdir/build" "$nsdir/dist" "$nsdir/src/"*.egg-info "$nsdir/src/lease_fence/scripts"
if (cd "$nsdir" && "$PY" -m pip wheel --no-index --no-build-isolation --no-deps \
	--wheel-dir "$work/noscripts/dist" .) >"$work/noscripts.log" 2>&1; then
	failed=$((failed + 1))
	echo "== python: a build without scripts/ succeeded (it must fail)"
elif grep -q "the Lua scripts .* are missing" "$work/noscripts.log"; then
	passed=$((passed + 1))
	echo "== python: a build without scripts/ fails, as it must"
else
	cat "$work/noscripts.log"
	failed=$((failed + 1))
	echo "== python: a build without scripts/ failed for another reason"
fi

echo "== python: $skipped skipped (not counted)"
finish "$passed" "$failed"

#!/usr/bin/env bash
# test/clients/run.sh — lease_fence's client libraries, built, installed and
# used as an application would: Python (clients/python: psycopg 3 sync and
# async, SQLAlchemy, Django, and behind PgBouncer), Node.js (clients/node:
# node-postgres, Knex), Java (clients/java: JDBC), Go (clients/go: pgx v4)
# and Ruby (clients/ruby: pg, ActiveRecord, Sidekiq).
#
# From a fresh Debian 12 machine, as root: installs the Debian packages it
# needs, builds and installs the extension as the postgres user in a private
# copy of the tree, starts a throwaway Redis and PostgreSQL (unix sockets in
# a temp dir, and 127.0.0.1 on a free port for JDBC; lease_fence in
# shared_preload_libraries, for the keep-alive worker), sets up a database
# "appdb" with a role "app" that takes leases but owns none of the fenced
# tables, starts PgBouncer (transaction pooling, unix socket in the temp
# dir), then runs, as the postgres user, each library's clients/<lang>/ci.sh:
#   - python   builds the sdist and wheel, pip-installs the wheel (--no-index)
#              into a fresh venv that sees Debian's psycopg, SQLAlchemy and
#              Django, Celery and RQ, runs its pytest suite, examples/python
#              and examples/celery
#   - node     npm ci, tsc, npm pack; installs the tarball into an empty app,
#              runs its node --test suite there and examples/node
#   - java     clients/java/build.sh (javac, build/lease-fence.jar, JUnit 5),
#              mvn test and mvn package offline, then examples/java
#              compiled and run against the jar
#   - go       go test ./... offline, Debian's Go sources (/usr/share/gocode)
#              as vendor/ (clients/go/vendor.sh), and examples/go
#   - ruby     gem build, gem install --local into a fresh GEM_HOME, rake test
#              (minitest: pg, ActiveRecord 6.1, Sidekiq 6.4) and
#              examples/ruby run with the installed gem
# stops everything, and prints "N passed, N failed" (one per test case).
#   LF_CLIENTS="python node java go ruby"   which libraries
#   LF_KEEP=1                       keeps the temp dir
#   LF_REDIS=valkey                 Valkey instead of Redis (test/lib.sh); the
#                                   tests get its valkey-cli as LF_REDIS_CLI
set -uo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
. "$top/test/lib.sh"

# Debian's interpreter: the python3 first on PATH may be another one that
# cannot see python3-psycopg & co.
PYTHON=/usr/bin/python3
LF_PGB_PORT=6432

# which libraries (clients/<lang>/ci.sh) this run tests
LF_CLIENTS=${LF_CLIENTS:-python node java go ruby}

# Java: Debian 12's JDK is 17; Debian 13 has none of that name (21), and the
# library is compiled for 17 (--release 17) either way
case $(. /etc/os-release && echo "$VERSION_ID") in
12) jdk=openjdk-17-jdk-headless ;;
*) jdk=default-jdk-headless ;;
esac
lf_need_packages python3-psycopg python3-psycopg2 python3-sqlalchemy python3-django \
	python3-pytest python3-pytest-asyncio python3-mypy python3-venv python3-pip python3-setuptools \
	python3-wheel python3-build python3-asyncpg python3-redis python3-celery python3-rq \
	"$jdk" libpostgresql-jdbc-java junit5 libgoogle-gson-java libquartz2-java \
	maven libmaven-compiler-plugin-java libmaven-resources-plugin-java \
	libmaven-jar-plugin-java libsurefire-java libmaven-install-plugin-java \
	pgbouncer || exit 1
# Go and Ruby: Debian's toolchains and packaged libraries, only when that
# library is tested
case " $LF_CLIENTS " in
*" go "*) lf_need_packages golang-go golang-github-jackc-pgx-v4-dev golang-github-gomodule-redigo-dev || exit 1 ;;
esac
case " $LF_CLIENTS " in
*" ruby "*) lf_need_packages ruby rake ruby-pg ruby-activerecord ruby-redis ruby-sidekiq ruby-minitest || exit 1 ;;
esac
# Node: whatever node and npm are on PATH (NodeSource's nodejs bundles npm);
# Debian's nodejs and npm when missing.
if ! command -v node >/dev/null 2>&1; then
	lf_need_packages nodejs npm || exit 1
elif ! command -v npm >/dev/null 2>&1; then
	lf_need_packages npm || exit 1
fi

# PgBouncer: config, auth file, socket, pid and log all in $LF_WORK/pgbouncer.
lf_start_pgbouncer() {
	LF_PGB_DIR=$LF_WORK/pgbouncer
	lf_as_user mkdir -p "$LF_PGB_DIR" || return 1
	lf_as_user tee "$LF_PGB_DIR/pgbouncer.ini" >/dev/null <<-EOF
	[databases]
	appdb = host=$LF_WORK port=$PGPORT dbname=appdb

	[pgbouncer]
	; unix socket only, in the temp dir
	listen_addr =
	listen_port = $LF_PGB_PORT
	unix_socket_dir = $LF_PGB_DIR
	unix_socket_mode = 0700
	auth_type = trust
	auth_file = $LF_PGB_DIR/userlist.txt
	pool_mode = transaction
	; one server connection per (database, user): clients that take turns
	; share it, which is what the tests show
	default_pool_size = 1
	max_client_conn = 50
	logfile = $LF_PGB_DIR/pgbouncer.log
	pidfile = $LF_PGB_DIR/pgbouncer.pid
	EOF
	printf '"app" ""\n' | lf_as_user tee "$LF_PGB_DIR/userlist.txt" >/dev/null
	lf_as_user pgbouncer -d -q "$LF_PGB_DIR/pgbouncer.ini" || { cat "$LF_PGB_DIR/pgbouncer.log"; return 1; }
	local i
	for i in $(seq 1 50); do
		[ -S "$LF_PGB_DIR/.s.PGSQL.$LF_PGB_PORT" ] && return 0
		sleep 0.1
	done
	cat "$LF_PGB_DIR/pgbouncer.log"; return 1
}

lf_stop_pgbouncer() {
	local pid i
	[ -n "${LF_PGB_DIR:-}" ] && [ -f "$LF_PGB_DIR/pgbouncer.pid" ] || return 0
	pid=$(cat "$LF_PGB_DIR/pgbouncer.pid")
	kill -TERM "$pid" 2>/dev/null || return 0
	for i in $(seq 1 50); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
}

cleanup() {
	lf_stop_pgbouncer
	if [ -n "${LF_PORTABLE_PGDATA:-}" ] && [ -f "$LF_PORTABLE_PGDATA/postmaster.pid" ]; then
		lf_as_user "$PG_BIN/pg_ctl" -D "$LF_PORTABLE_PGDATA" -m immediate -w stop >/dev/null 2>&1 || true
	fi
	lf_cleanup
}
trap cleanup EXIT
trap 'exit 130' INT TERM

lf_make_workdir "$top" || exit 1
lf_build_install || exit 1
lf_start_redis || exit 1
# JDBC has no unix sockets: the server also listens on 127.0.0.1, on a free
# port, where only role app may log in, with a password made for this run
LF_PG_PORT=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
LF_PG_LISTEN=127.0.0.1
LF_APP_PASSWORD=$(head -c 18 /dev/urandom | base64 | tr '+/' '-_')
# preloaded: acquire(..., keepalive => true) needs the keep-alive worker
lf_start_pg "lease_fence.redis_socket = '$LF_REDIS_SOCK'" \
	"shared_preload_libraries = 'lease_fence'" || exit 1
printf 'local all all trust\nhost appdb app 127.0.0.1/32 scram-sha-256\n' |
	lf_as_user tee "$LF_PGDATA/pg_hba.conf" >/dev/null
lf_as_user "$PG_BIN/pg_ctl" -D "$LF_PGDATA" reload >/dev/null || exit 1
(umask 077 && printf '%s' "$LF_APP_PASSWORD" | lf_as_user tee "$LF_WORK/app.password" >/dev/null)

lf_log "setting up database appdb, roles app and app_noredis"
lf_as_user "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -d postgres >"$LF_WORK/setup.log" 2>&1 <<SQL || { cat "$LF_WORK/setup.log"; exit 1; }
CREATE ROLE app LOGIN PASSWORD '$LF_APP_PASSWORD';
-- same rights, but its Redis is a socket that does not exist (a superuser's
-- per-role setting): how the tests see "unavailable"
CREATE ROLE app_noredis LOGIN IN ROLE app;
ALTER ROLE app_noredis SET lease_fence.redis_socket = '$LF_WORK/no-redis.sock';
CREATE DATABASE appdb;
\c appdb
CREATE EXTENSION lease_fence;
-- owned by postgres, not by the app role: app cannot switch the fence off
CREATE TABLE account (
	id int GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
	owner text NOT NULL DEFAULT '',
	balance int NOT NULL DEFAULT 0
);
SELECT lease_fence.protect('account');
CREATE TABLE ledger (
	id int GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
	note text NOT NULL
);
SELECT lease_fence.protect('ledger', strict => true);
-- what the ORM tests save whole rows of: Django (django_item), SQLAlchemy
-- (sa_item), Knex (knex_item); protect() adds the fence column
CREATE TABLE django_item (
	id int GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
	name text NOT NULL DEFAULT '',
	qty int NOT NULL DEFAULT 0
);
CREATE TABLE sa_item (
	id int GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
	name text NOT NULL DEFAULT '',
	qty int NOT NULL DEFAULT 0
);
CREATE TABLE knex_item (
	id int GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
	name text NOT NULL DEFAULT '',
	qty int NOT NULL DEFAULT 0
);
SELECT lease_fence.protect('django_item'), lease_fence.protect('sa_item'),
       lease_fence.protect('knex_item');
GRANT SELECT, INSERT, UPDATE, DELETE ON account, ledger, django_item, sa_item, knex_item TO app;
GRANT EXECUTE ON FUNCTION lease_fence.acquire(text, bigint, bigint, text, bigint, boolean, boolean),
                          lease_fence.renew(text, text, bigint, bigint),
                          lease_fence.release(text, text),
                          lease_fence.fence_resource(text) TO app;
-- leader election (1.5); take_over is an operator's, granted to app here so
-- that the libraries' tests can play the operator with the same role
GRANT EXECUTE ON FUNCTION lease_fence.campaign(text, bigint, bigint, text, text, boolean),
                          lease_fence.leader(text),
                          lease_fence.resign(text, text),
                          lease_fence.take_over(text, bigint, bigint, text) TO app;
-- fair waiting (1.5): the tests watch a resource's queue as app
GRANT EXECUTE ON FUNCTION lease_fence.queue(text) TO app;
-- jobs (1.5): a job's checkpoints
GRANT EXECUTE ON FUNCTION lease_fence.checkpoint(text, jsonb),
                          lease_fence.last_checkpoint(text) TO app;
SQL

# The portable edition (portable/lease_fence_portable.sql): a second server
# of the same installation that never loads the C library (no
# shared_preload_libraries, no CREATE EXTENSION), a database portabledb
# owned by a role that is not a superuser, the edition installed by that
# role with psql -f, as on a managed service; the client-side mode of the
# libraries takes its leases in the same Redis.
LF_PORTABLE_PGPORT=5433
LF_PORTABLE_PGDATA=$LF_WORK/pgdata-portable
lf_log "starting the portable edition's server (port $LF_PORTABLE_PGPORT, without the C library)"
lf_as_user "$PG_BIN/initdb" -D "$LF_PORTABLE_PGDATA" -U postgres -A trust --no-sync \
	--locale=C.UTF-8 -E UTF8 >"$LF_WORK/initdb-portable.log" 2>&1 || { cat "$LF_WORK/initdb-portable.log"; exit 1; }
printf "listen_addresses = ''\nunix_socket_directories = '%s'\nport = %s\nfsync = off\n" \
	"$LF_WORK" "$LF_PORTABLE_PGPORT" | lf_as_user tee -a "$LF_PORTABLE_PGDATA/postgresql.conf" >/dev/null
lf_as_user "$PG_BIN/pg_ctl" -D "$LF_PORTABLE_PGDATA" -l "$LF_WORK/postgres-portable.log" -w -t 60 start >/dev/null ||
	{ cat "$LF_WORK/postgres-portable.log"; exit 1; }
portable_psql() { lf_as_user "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$LF_WORK" -p "$LF_PORTABLE_PGPORT" "$@"; }
{
	portable_psql -d postgres -c "CREATE ROLE portable_owner LOGIN" -c "CREATE ROLE app LOGIN" \
		-c "CREATE DATABASE portabledb OWNER portable_owner" &&
	portable_psql -U portable_owner -d portabledb -f "$LF_SRC/portable/lease_fence_portable.sql" &&
	portable_psql -U portable_owner -d portabledb <<-'SQL'
	CREATE TABLE account (
		id int GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
		owner text NOT NULL DEFAULT '',
		balance int NOT NULL DEFAULT 0
	);
	SELECT lease_fence.protect('account');
	GRANT SELECT, INSERT, UPDATE, DELETE ON account TO app;
	GRANT EXECUTE ON FUNCTION lease_fence.next_generation(bigint),
	                          lease_fence.fence_resource(text),
	                          lease_fence.checkpoint(text, jsonb),
	                          lease_fence.last_checkpoint(text) TO app;
	SQL
} >"$LF_WORK/setup-portable.log" 2>&1 || { cat "$LF_WORK/setup-portable.log"; exit 1; }
# the library was not loaded there
if grep -qE "^[[:space:]]*(shared|session|local)_preload_libraries.*lease_fence" "$LF_PORTABLE_PGDATA/postgresql.conf" ||
	[ "$(portable_psql -At -d portabledb -c "SELECT count(*) FROM pg_extension WHERE extname = 'lease_fence'")" != 0 ]; then
	echo "the portable edition's server has the C library" >&2; exit 1
fi

lf_log "starting pgbouncer (transaction pooling)"
lf_start_pgbouncer || exit 1

# What the tests are told; HOME and npm's cache live in the temp dir.
lf_as_user mkdir -p "$LF_WORK/home"
test_env=(
	HOME="$LF_WORK/home" npm_config_cache="$LF_WORK/npm-cache"
	npm_config_update_notifier=false PYTHONDONTWRITEBYTECODE=1
	PGHOST="$LF_WORK" PGPORT="$PGPORT" PGDATABASE=appdb PGUSER=app
	LF_NOREDIS_USER=app_noredis
	LF_REDIS_SOCK="$LF_REDIS_SOCK" LF_REDIS_CLI="${LF_REDIS_CLI:-redis-cli}"
	LF_PORTABLE_PGPORT="$LF_PORTABLE_PGPORT" LF_PORTABLE_DB=portabledb
	LF_BOUNCER_HOST="$LF_PGB_DIR" LF_BOUNCER_PORT="$LF_PGB_PORT"
	LF_JDBC_URL="jdbc:postgresql://127.0.0.1:$PGPORT/appdb"
	LF_JDBC_USER=app LF_JDBC_PASSWORD_FILE="$LF_WORK/app.password"
)

passed=0
failed=0

# One library: clients/<lang>/ci.sh builds it, installs it the way a user
# would into $LF_CLIENT_WORK, runs its tests against this run's servers and
# ends with "<lang>: N passed, N failed".
# Go's build cache beside the harness's other caches (compiling pgx takes a
# minute), owned by the user the clients run as; a temp one without
go_cache=${LF_PG_CACHE:-/var/cache/lease_fence}/gocache-$LF_USER
if [[ " $LF_CLIENTS " == *" go "* ]] && { [ "$(id -u)" -ne 0 ] ||
	{ mkdir -p "$go_cache" && chown "$LF_USER" "$go_cache"; } 2>/dev/null; } &&
	lf_as_user test -w "$go_cache" 2>/dev/null; then
	test_env+=(LF_GOCACHE="$go_cache")
fi

run_client() {	# lang
	local lang=$1 out=$LF_WORK/client-$1.out rc ok bad
	lf_log "$lang: clients/$lang/ci.sh"
	lf_as_user mkdir -p "$LF_WORK/client-$lang"
	(cd "$LF_SRC/clients/$lang" && lf_as_user env -u PYTHONPATH -u PYTHONHOME "${test_env[@]}" \
		LF_CLIENT_WORK="$LF_WORK/client-$lang" LF_SRC="$LF_SRC" \
		timeout -k 5 900 bash ./ci.sh) >"$out" 2>&1
	rc=$?
	sed -E "s/^($lang: [0-9]+ passed, [0-9]+ failed)\$/== \1/" "$out"
	ok=$(sed -nE "s/^$lang: ([0-9]+) passed, [0-9]+ failed\$/\1/p" "$out" | tail -n 1)
	bad=$(sed -nE "s/^$lang: [0-9]+ passed, ([0-9]+) failed\$/\1/p" "$out" | tail -n 1)
	if [ -z "$ok" ]; then
		lf_log "$lang: did not finish (exit $rc)"
		failed=$((failed + 1)); return
	fi
	[ "$rc" -ne 0 ] && [ "$bad" -eq 0 ] && bad=1
	passed=$((passed + ok)); failed=$((failed + bad))
}

for lang in $LF_CLIENTS; do
	case $lang in
	python|node|java|go|ruby) run_client "$lang" ;;
	*) lf_log "LF_CLIENTS: unknown library $lang"; failed=$((failed + 1)) ;;
	esac
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]

# keepalive_worker.pl — acquire(..., keepalive => true): the keep-alive worker
# renews a session- or transaction-scoped lease while its session is active,
# and the owner is told when the lease is lost (docs/guides/keepalive-and-waiting.md, "Keep-alive").
#
#  - without shared_preload_libraries, or with session Redis settings other
#    than the worker's: a clear ERROR, nothing sent;
#  - an active session (a statement running) outlives its TTL several times;
#    so does a transaction-scoped lease, and its COMMIT succeeds;
#  - an idle session's lease lapses by its TTL: the key goes, the view says
#    lost, and the session's next fenced write fails with LF010;
#  - the key overwritten by another identity: the worker finds it lost; the
#    owner's next fenced write fails with LF010 and its transaction commits
#    nothing, and a COMMIT after an earlier write fails with LF010 too;
#  - keepalive_max_ms reached: the worker releases the lease (a waiter is
#    woken by the release's message) and the owner's write fails with LF010;
#  - the owner's exit releases its kept-alive lease.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use LeaseFenceRedis;
use LeaseFenceTest;
use LeaseFenceTopology;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $redis = LeaseFenceRedis->new;
my $node = $redis->node('keepalive', "shared_preload_libraries = 'lease_fence'");
$node->safe_psql('postgres',
	'CREATE TABLE work (id serial PRIMARY KEY, what text); SELECT lease_fence.protect(\'work\'); '
	  . 'GRANT ALL ON work, work_id_seq TO PUBLIC');

sub counter
{
	my ($operation, $outcome) = @_;
	return sql_ok($node,
		"SELECT count FROM lease_fence.stats WHERE operation = '$operation' AND outcome = '$outcome'");
}

sub kstate
{
	return sql_ok($node, "SELECT coalesce(lease_fence.keepalive_state(" . lit($_[0]) . "), '(null)')");
}

sub kacquire
{
	my ($who, $res, $ttl, $scope) = @_;
	return call($who,
		"lease_fence.acquire(" . lit($res) . ", $ttl, scope => " . lit($scope // 'session') . ', keepalive => true)');
}

# a fenced INSERT under generation $g in session $s: (sqlstate or '', error)
sub fenced_insert
{
	my ($s, $g, $what) = @_;
	my (undef, $err) = run_sql($s,
		"BEGIN; SET LOCAL lease_fence.generation = $g; INSERT INTO work (what) VALUES (" . lit($what) . '); COMMIT;');
	run_sql($s, 'ROLLBACK') if $err =~ /ERROR/;
	return (sqlstate($err), $err);
}

sub rows { return sql_ok($node, "SELECT count(*) FROM work WHERE what = " . lit($_[0])); }

#
# Refused before anything is sent
#
{
	my $plain = $redis->node('keepalive_plain');
	my (undef, $err) = run_sql($plain,
		"SELECT * FROM lease_fence.acquire('k-plain', 1000, scope => 'session', keepalive => true)");
	is(sqlstate($err), '55000', 'not preloaded: ERROR 55000');
	like($err, qr/keepalive needs lease_fence in shared_preload_libraries/, 'not preloaded: says why');
	is($redis->cli('EXISTS', lkey('k-plain')), '0', 'not preloaded: no lease key was written');
	is(sql_ok($plain, "SELECT coalesce(lease_fence.keepalive_state('" . ('0' x 32) . "'), '(null)')"),
		'(null)', 'not preloaded: keepalive_state() is NULL');
	(undef, $err) = run_sql($plain, "SELECT lease_fence.keepalive_state('nope')");
	is(sqlstate($err), '22023', 'keepalive_state() of a malformed identity: ERROR 22023');
	$plain->stop;

	(undef, $err) = run_sql($node,
		"SET lease_fence.key_prefix = 'elsewhere:'; "
		  . "SELECT * FROM lease_fence.acquire('k-prefix', 1000, scope => 'session', keepalive => true)");
	is(sqlstate($err), '55000', "session settings other than the worker's: ERROR 55000");
	like($err, qr/keepalive needs the server's Redis settings/, "other settings: says why");
	is($redis->cli('EXISTS', 'elsewhere:{k-prefix}'), '0', 'other settings: no lease key was written');

	(undef, $err) = run_sql($node,
		"SET track_activities = off; "
		  . "SELECT * FROM lease_fence.acquire('k-untracked', 1000, scope => 'session', keepalive => true)");
	is(sqlstate($err), '55000', 'track_activities off: ERROR 55000');
	like($err, qr/keepalive needs track_activities/, 'track_activities off: says why');
	is($redis->cli('EXISTS', lkey('k-untracked')), '0', 'track_activities off: no lease key was written');
}

#
# An active session outlives its TTL several times
#
{
	my $s = session($node);
	my $renewed = counter('keepalive', 'renewed');
	my $r = kacquire($s, 'k-active', 1000);
	is($r->{status}, 'acquired', 'active: acquired with keepalive');
	sql_ok($s, 'SELECT pg_sleep(4)');
	is($redis->cli('GET', lkey('k-active')), $r->{identity}, 'active: after 4 TTLs of a running statement the key still holds the identity');
	my $pttl = $redis->cli('PTTL', lkey('k-active'));
	ok($pttl > 0 && $pttl <= 1000, "active: and it has a TTL no longer than ttl_ms (PTTL $pttl)");
	my $n = counter('keepalive', 'renewed') - $renewed;
	ok($n >= 4, "active: the worker renewed it ($n renewals)");
	my ($state) = fenced_insert($s, $r->{generation}, 'k-active');
	is($state, '', 'active: a fenced write under its generation succeeds');
	is(lease_view($s, $r->{identity})->{state}, 'held', 'active: the view says held');
	is(kstate($r->{identity}), 'active', 'active: keepalive_state() from another session says active');
	release($s, 'k-active', $r->{identity});
	is(kstate($r->{identity}), '(null)', 'active: after the release keepalive_state() is NULL');
	is($redis->cli('EXISTS', lkey('k-active')), '0', 'active: release deletes the key');
	my $after = counter('keepalive', 'renewed');
	usleep(1_000_000);
	is(counter('keepalive', 'renewed'), $after, 'active: after the release no more renewals');

	# transaction scope: the lease outlives its TTL and the COMMIT succeeds
	my ($out, $err) = run_sql($s,
		"BEGIN; SELECT status FROM lease_fence.acquire('k-tx', 1000, scope => 'transaction', keepalive => true); "
		  . "SELECT pg_sleep(3); INSERT INTO work (what) VALUES ('k-tx'); COMMIT;");
	is($err =~ /ERROR/ ? $err : '', '', 'transaction scope: sleep 3 TTLs, write, COMMIT: no error');
	is(rows('k-tx'), '1', 'transaction scope: the write is committed');
	is($redis->cli('EXISTS', lkey('k-tx')), '0', 'transaction scope: the lease is released at the end');
	$s->quit;
}

#
# An idle session's lease lapses
#
{
	my $s = session($node);
	my $idle = counter('keepalive', 'idle_expired');
	my $r = kacquire($s, 'k-idle', 1000);
	is($r->{status}, 'acquired', 'idle: acquired with keepalive');
	LeaseFenceTopology::wait_for('the idle lease to lapse',
		sub { $redis->cli('EXISTS', lkey('k-idle')) eq '0' });
	pass('idle: the key of an idle session expires by its TTL');
	LeaseFenceTopology::wait_for('the worker to mark it', sub { counter('keepalive', 'idle_expired') > $idle });
	is(lease_view($s, $r->{identity})->{state}, 'lost', 'idle: the view says lost');
	is(kstate($r->{identity}), 'lost', 'idle: keepalive_state() from another session says lost');
	my ($state, $err) = fenced_insert($s, $r->{generation}, 'k-idle');
	is($state, 'LF010', "idle: the session's next fenced write fails with LF010");
	like($err, qr/idle longer than the lease's TTL/, 'idle: the DETAIL says why');
	is(rows('k-idle'), '0', 'idle: nothing was written');
	is(release($s, 'k-idle', $r->{identity})->{status}, 'not_held', 'idle: release acknowledges: not_held');
	($state) = fenced_insert($s, $r->{generation}, 'k-idle');
	is($state, '', 'idle: after the release the generation is an ordinary one again');
	$s->quit;
}

#
# The key overwritten by another identity
#
{
	my $s = session($node);
	my $lost = counter('keepalive', 'lost');
	my $r = kacquire($s, 'k-steal', 3000);
	is($r->{status}, 'acquired', 'overwritten: acquired with keepalive');
	my $g = $r->{generation};
	sql_ok($s, "BEGIN; SET LOCAL lease_fence.generation = $g; INSERT INTO work (what) VALUES ('k-steal')");
	$redis->cli('SET', lkey('k-steal'), 'f' x 32, 'PX', 60000);
	LeaseFenceTopology::wait_for('the worker to find it lost', sub { counter('keepalive', 'lost') > $lost });
	my (undef, $err) = run_sql($s, "INSERT INTO work (what) VALUES ('k-steal')");
	is(sqlstate($err), 'LF010', "overwritten: the owner's next fenced write fails with LF010");
	like($err, qr/no longer holds this lease's identity/, 'overwritten: the DETAIL says why');
	like($err, qr/^SCHEMA NAME:  public\nTABLE NAME:  work\nCOLUMN NAME:  fence$/m,
		'overwritten: LF010 names the schema, table and fence column');
	run_sql($s, 'COMMIT');
	is(rows('k-steal'), '0', 'overwritten: the transaction committed nothing');
	# a resource fence under the lost lease's generation: LF010, naming it
	(undef, $err) = run_sql($s, "BEGIN; SELECT lease_fence.set_generation($g, 'k-steal-res')");
	is(sqlstate($err), 'LF010', "overwritten: the owner's resource fence fails with LF010");
	like($err, qr/^CONSTRAINT NAME:  k-steal-res$/m, 'overwritten: LF010 names the resource as CONSTRAINT NAME');
	run_sql($s, 'ROLLBACK');
	is($redis->cli('GET', lkey('k-steal')), 'f' x 32, "overwritten: the other identity's key is untouched");
	$redis->cli('DEL', lkey('k-steal'));

	# lost after the write, before COMMIT: the COMMIT fails
	$r = kacquire($s, 'k-steal2', 3000);
	$g = $r->{generation};
	$lost = counter('keepalive', 'lost');
	sql_ok($s, "BEGIN; SET LOCAL lease_fence.generation = $g; INSERT INTO work (what) VALUES ('k-steal2')");
	$redis->cli('SET', lkey('k-steal2'), 'e' x 32, 'PX', 60000);
	LeaseFenceTopology::wait_for('the worker to find it lost', sub { counter('keepalive', 'lost') > $lost });
	(undef, $err) = run_sql($s, 'COMMIT');
	is(sqlstate($err), 'LF010', 'overwritten after the write: COMMIT fails with LF010');
	is(rows('k-steal2'), '0', 'overwritten after the write: nothing was committed');
	$redis->cli('DEL', lkey('k-steal2'));
	$s->quit;
}

#
# keepalive_max_ms reached: released
#
{
	my $s = session($node);
	my $waiter = session($node);
	my $max = counter('keepalive', 'max_reached');
	my $woken = counter('wait', 'woken');
	sql_ok($s, 'SET lease_fence.keepalive_max_ms = 2500');
	my $r = kacquire($s, 'k-max', 1000);
	is($r->{status}, 'acquired', 'keepalive_max_ms: acquired with keepalive');
	$waiter->query_until(qr/lf-started/,
		"\\echo lf-started\nSELECT status FROM lease_fence.acquire('k-max', 60000, wait_ms => 30000);\n");
	my $t0 = time();
	sql_ok($s, 'SELECT pg_sleep(4)');
	my $out = sql_ok($waiter, "SELECT 'lf-after'");
	like($out, qr/^acquired$/m, 'keepalive_max_ms: the waiter acquires after it');
	is(counter('wait', 'woken'), $woken + 1, "keepalive_max_ms: the waiter was woken by the release's message");
	is(counter('keepalive', 'max_reached'), $max + 1, 'keepalive_max_ms: counted');
	my ($state, $err) = fenced_insert($s, $r->{generation}, 'k-max');
	is($state, 'LF010', "keepalive_max_ms: the owner's next fenced write fails with LF010");
	like($err, qr/keepalive_max_ms was reached/, 'keepalive_max_ms: the DETAIL says why');
	$s->quit;
	$waiter->quit;
}

#
# The owner's exit releases its kept-alive lease
#
{
	my $s = session($node);
	my $r = kacquire($s, 'k-exit', 30000);
	is($r->{status}, 'acquired', 'exit: acquired with keepalive');
	$s->quit;
	LeaseFenceTopology::wait_for('the exit to release it', sub { $redis->cli('EXISTS', lkey('k-exit')) eq '0' });
	pass("exit: the session's end released the lease");
}

#
# At most 1024 kept-alive leases: the next is released again, 53400
#
{
	my $s = session($node);
	# its exit releases 1024 leases, one round trip each: a budget that a
	# loaded machine does not run out of (the node's is 300 ms), so that
	# the last of them is released too
	sql_ok($s, 'SET lease_fence.cleanup_timeout_ms = 60000');
	sql_ok($s, 'SET lease_fence.exit_timeout_ms = 60000');
	is(sql_ok($s, "SELECT count(*) FROM generate_series(1, 1024) i, "
		  . "LATERAL lease_fence.acquire('k-full-' || i, 600000, scope => 'session', keepalive => true) a "
		  . "WHERE a.status = 'acquired'"), '1024', 'table: 1024 kept-alive leases');
	my (undef, $err) = run_sql($s,
		"SELECT * FROM lease_fence.acquire('k-full-1025', 600000, scope => 'session', keepalive => true)");
	is(sqlstate($err), '53400', 'table full: the 1025th fails with 53400');
	is($redis->cli('EXISTS', lkey('k-full-1025')), '0', 'table full: its lease was released again');
	$s->quit;
	LeaseFenceTopology::wait_for('the exit to release them',
		sub { $redis->cli('EXISTS', lkey('k-full-1024')) eq '0' });
	my $r = kacquire($node, 'k-full-after', 600000);
	is($r->{status}, 'acquired', "table: the exit freed the session's slots");
}

ok($node->log_contains('lease_fence keep-alive worker started'), 'the worker logged its start');

$node->stop;
$redis->stop;
done_testing();

# lease_idle_expiry.pl — a holder frozen inside a transaction does not hold
# the resource past its lease (docs/operations.md, "A holder frozen inside
# a transaction").
#
# With idle_in_transaction_session_timeout at 0, a client that is stopped
# (a real SIGSTOP of the psql process, not of the backend) while its
# transaction holds a lease keeps the resource fence's row locked; the
# next holder's fence would wait on that lock for ever.  lease_fence ends
# such a session once the lease has run out by the backend's own estimate:
#
#  - a transaction-scoped lease, frozen: the next holder's waiting
#    transaction-scoped acquire gets the resource (lock_timeout 60 s is
#    only a safety net against a hang, not a speed assertion), the frozen
#    backend is gone, the LOG line names the resource and the pid (not the
#    identity), idle_expiry / session_ended counts it, and the
#    client, continued, reads FATAL 25P03; its write did not commit;
#  - a session-scoped lease whose resource the transaction fenced
#    (set_generation(g, resource)), frozen after an error in a savepoint:
#    the next holder's fence_resource() gets the resource, the same way;
#  - a leader that won inside a transaction (campaign), frozen: the next
#    campaign wins;
#  - not ended: a transaction whose lease was renewed past its first
#    expiry, by its own session or by another one; a transaction that
#    fenced nothing while its session holds a lease; a statement that runs
#    past the lease's expiry (ended once it goes idle, not in the
#    statement).

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

my $redis = LeaseFenceRedis->new;
my $node = $redis->node('idle_expiry', "shared_preload_libraries = 'lease_fence'",
	'idle_in_transaction_session_timeout = 0');
$node->safe_psql('postgres',
	'CREATE TABLE work (id serial PRIMARY KEY, what text); SELECT lease_fence.protect(\'work\'); '
	  . 'CREATE TABLE plain (what text)');

# stopped clients must not outlive a failed test
my @stopped;
END { kill 'CONT', $_ for @stopped; }

sub counter
{
	return sql_ok($node,
		"SELECT count FROM lease_fence.stats WHERE operation = 'idle_expiry' AND outcome = 'session_ended'");
}

sub rows { return sql_ok($node, 'SELECT count(*) FROM work WHERE what = ' . lit($_[0])); }

sub alive
{
	my ($pid) = @_;
	return sql_ok($node, "SELECT state FROM pg_stat_activity WHERE pid = $pid");
}

# the pid of the psql process behind a background session
sub client_pid { return $_[0]->{run}{KIDS}[0]{PID}; }

# Continue a stopped client, send it a statement, and return what it wrote
# to stderr once it has reported the lost connection.
sub continue_client
{
	my ($s) = @_;
	my $pid = client_pid($s);
	kill('CONT', $pid) or die "harness: could not continue psql $pid: $!";
	@stopped = grep { $_ != $pid } @stopped;
	$s->{stdin} .= "SELECT 'after';\n";
	pump_until($s->{run}, IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default),
		\$s->{stderr}, qr/connection to (the )?server was lost/);
	my $err = $s->{stderr};
	$s->{run}->kill_kill;
	return $err;
}

# a lease that runs out after $ms: waiting on its expiry in Redis is a
# condition, not a sleep
sub clock_lease
{
	my ($res, $ms) = @_;
	my $c = session($node);
	need(acquire($c, $res, $ms)->{status}, 'acquired', "the clock lease $res");
	$c->quit;
	return;
}

sub wait_expired
{
	my ($res) = @_;
	LeaseFenceTopology::wait_for("lease $res to expire", sub { $redis->cli('EXISTS', lkey($res)) eq '0' });
	return;
}

my $log_offset = -s $node->logfile;

#
# 1. A transaction-scoped lease; the client freezes after a write.
#
{
	my $a = session($node);
	my $pid = sql_ok($a, 'SELECT pg_backend_pid()');
	sql_ok($a, 'BEGIN');
	my $l = call($a, "lease_fence.acquire('job-1', 2000, scope => 'transaction')");
	is($l->{status}, 'acquired', 'A: transaction-scoped lease (ttl 2000 ms)');
	sql_ok($a, "INSERT INTO work (what) VALUES ('A-1')");
	kill('STOP', client_pid($a)) or die "harness: could not stop psql: $!";
	push @stopped, client_pid($a);

	my $b = session($node);
	sql_ok($b, "SET lock_timeout = '60s'");
	sql_ok($b, 'BEGIN');
	my ($out, $err) = run_sql($b,
		"SELECT status FROM lease_fence.acquire('job-1', 5000, scope => 'transaction', wait_ms => 60000)");
	is($out, 'acquired', "B's waiting transaction-scoped acquire gets the resource while A's client is stopped");
	is(sqlstate($err), '', 'B: no error (no lock timeout)');
	sql_ok($b, "INSERT INTO work (what) VALUES ('B-1')");
	sql_ok($b, 'COMMIT');

	wait_backend_gone($pid);
	ok(!kill(0, $pid), "A's backend is gone");
	my $log = substr(slurp_file($node->logfile), $log_offset);
	like($log, qr/LOG:  terminated session of process $pid idle in transaction: its lease on resource "job-1" ran out/,
		'the LOG line names the pid and the resource');
	unlike($log, qr/$l->{identity}/, 'the server log does not show the identity');
	is(counter(), '1', 'idle_expiry / session_ended counted it');

	$err = continue_client($a);
	like($err, qr/FATAL:  25P03: terminating connection due to idle-in-transaction timeout/,
		'A, continued, reads FATAL 25P03');
	is(rows('A-1'), '0', "A's write did not commit");
	is(rows('B-1'), '1', "B's write stands");
	$b->quit;
}

#
# 2. A session-scoped lease whose resource the transaction fenced; the next
#    holder fences the resource with fence_resource().
#
{
	my $a = session($node);
	my $pid = sql_ok($a, 'SELECT pg_backend_pid()');
	my $l = acquire($a, 'job-2', 2000, 0, 'session');
	is($l->{status}, 'acquired', 'A: session-scoped lease (ttl 2000 ms)');
	sql_ok($a, 'BEGIN');
	sql_ok($a, "SELECT lease_fence.set_generation($l->{generation}, 'job-2')");
	sql_ok($a, "INSERT INTO work (what) VALUES ('A-2')");
	# an error in a savepoint (the server's error recovery stops every timer)
	sql_ok($a, 'SAVEPOINT s');
	my (undef, $e0) = run_sql($a, 'SELECT 1/0');
	need(sqlstate($e0), '22012', 'the error in the savepoint');
	sql_ok($a, 'ROLLBACK TO SAVEPOINT s');
	kill('STOP', client_pid($a)) or die "harness: could not stop psql: $!";
	push @stopped, client_pid($a);

	my $b = session($node);
	sql_ok($b, "SET lock_timeout = '60s'");
	my $lb = call($b, "lease_fence.acquire('job-2', 5000, scope => 'session', wait_ms => 60000)");
	is($lb->{status}, 'acquired', 'B: session-scoped lease, once A lets it go');
	sql_ok($b, 'BEGIN');
	sql_ok($b, "SELECT lease_fence.set_generation($lb->{generation})");
	my ($out, $err) = run_sql($b, "SELECT lease_fence.fence_resource('job-2') = $lb->{generation}");
	is($out, 't', "B's fence_resource() gets the resource while A's client is stopped");
	is(sqlstate($err), '', 'B: no error (no lock timeout)');
	sql_ok($b, 'COMMIT');

	wait_backend_gone($pid);
	ok(!kill(0, $pid), "A's backend is gone");
	like(substr(slurp_file($node->logfile), $log_offset),
		qr/terminated session of process $pid idle in transaction: its lease on resource "job-2" ran out/,
		'the LOG line names the pid and the resource');
	is(counter(), '2', 'counted');
	like(continue_client($a), qr/FATAL:  25P03/, 'A, continued, reads FATAL 25P03');
	is(rows('A-2'), '0', "A's write did not commit");
	$b->quit;
}

#
# 3. Not ended: a lease renewed past its first expiry.
#
{
	my $a = session($node);
	my $pid = sql_ok($a, 'SELECT pg_backend_pid()');
	sql_ok($a, 'BEGIN');
	my $l = call($a, "lease_fence.acquire('job-3', 1500, scope => 'transaction')");
	is($l->{status}, 'acquired', 'A: transaction-scoped lease (ttl 1500 ms)');
	sql_ok($a, "INSERT INTO work (what) VALUES ('A-3')");
	is(renew($a, 'job-3', $l->{identity}, 60000)->{status}, 'renewed', 'A renews it for 60 s');
	# a lease taken after A's first grant, with a longer TTL, runs out after it
	clock_lease('clock-3', 2000);
	wait_expired('clock-3');
	is(alive($pid), 'idle in transaction', 'A is still idle in transaction past its first expiry');
	sql_ok($a, 'COMMIT');
	is(rows('A-3'), '1', "A's transaction commits");
	is(counter(), '2', 'nothing counted');
	$a->quit;
}

#
# 4. Not ended: a transaction that fenced nothing, in a session that holds a
#    lease (which runs out meanwhile).
#
{
	my $a = session($node);
	my $pid = sql_ok($a, 'SELECT pg_backend_pid()');
	is(acquire($a, 'job-4', 1000, 0, 'session')->{status}, 'acquired', 'A: session-scoped lease (ttl 1000 ms)');
	sql_ok($a, 'BEGIN');
	sql_ok($a, "INSERT INTO plain VALUES ('A-4')");
	clock_lease('clock-4', 1500);
	wait_expired('clock-4');
	is(alive($pid), 'idle in transaction', "A, which fenced nothing, is still idle in transaction past its lease's expiry");
	sql_ok($a, 'COMMIT');
	is(sql_ok($node, "SELECT count(*) FROM plain WHERE what = 'A-4'"), '1', "A's transaction commits");
	is(counter(), '2', 'nothing counted');
	$a->quit;
}

#
# 5. Not ended: a lease that another session renews (a client that
#    heartbeats from a second connection).
#
{
	my $a = session($node);
	my $pid = sql_ok($a, 'SELECT pg_backend_pid()');
	sql_ok($a, 'BEGIN');
	my $l = call($a, "lease_fence.acquire('job-5', 1500, scope => 'transaction')");
	is($l->{status}, 'acquired', 'A: transaction-scoped lease (ttl 1500 ms)');
	sql_ok($a, "INSERT INTO work (what) VALUES ('A-5')");
	my $h = session($node);
	is(renew($h, 'job-5', $l->{identity}, 60000)->{status}, 'renewed', "another session renews A's lease for 60 s");
	clock_lease('clock-5', 2000);
	wait_expired('clock-5');
	is(alive($pid), 'idle in transaction', 'A is still idle in transaction past its first expiry');
	sql_ok($a, 'COMMIT');
	is(rows('A-5'), '1', "A's transaction commits");
	is(counter(), '2', 'nothing counted');
	$h->quit;
	$a->quit;
}

#
# 6. A statement that runs past the expiry is not ended; the session is,
#    once it goes idle.
#
{
	my $c = session($node);
	need(acquire($c, 'clock-6', 60000, 0, 'session')->{status}, 'acquired', 'a lease A will wait for');
	my $a = session($node);
	my $pid = sql_ok($a, 'SELECT pg_backend_pid()');
	sql_ok($a, 'BEGIN');
	is(call($a, "lease_fence.acquire('job-6', 1500, scope => 'transaction')")->{status},
		'acquired', 'A: transaction-scoped lease (ttl 1500 ms)');
	sql_ok($a, "INSERT INTO work (what) VALUES ('A-6')");
	# A's statement waits until C lets go of clock-6, after A's lease ran out
	$a->{stdin} .= "SELECT status FROM lease_fence.acquire('clock-6', 1000, scope => 'session', wait_ms => 60000);\n";
	$a->{run}->pump_nb;
	LeaseFenceTopology::wait_for('A to be waiting', sub { alive($pid) eq 'active' });
	wait_expired('job-6');
	is(alive($pid), 'active', "A's statement still runs after A's lease ran out");
	need(release($c, 'clock-6', sql_ok($c, "SELECT identity FROM lease_fence.leases WHERE resource = 'clock-6'"))->{status},
		'released', 'C releases clock-6');
	pump_until($a->{run}, IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default),
		\$a->{stdout}, qr/acquired|unavailable|busy/);
	like($a->{stdout}, qr/acquired/, "A's statement completed");
	wait_backend_gone($pid);
	ok(!kill(0, $pid), 'then, idle in transaction, A is ended');
	is(counter(), '3', 'counted');
	is(rows('A-6'), '0', "A's write did not commit");
	$a->{run}->kill_kill;
	$c->quit;
}

#
# 7. A leader that won inside a transaction and froze: the next campaign
#    wins (the win raises the election's fence, which waits for the frozen
#    transaction's lock).
#
{
	my $a = session($node);
	my $pid = sql_ok($a, 'SELECT pg_backend_pid()');
	sql_ok($a, 'BEGIN');
	my $w = call($a, "lease_fence.campaign('el-7', 2000, 0)");
	is($w->{status}, 'acquired', 'A wins the election inside a transaction (ttl 2000 ms)');
	sql_ok($a, "SELECT lease_fence.set_generation($w->{term})");
	sql_ok($a, "INSERT INTO work (what) VALUES ('A-7')");
	kill('STOP', client_pid($a)) or die "harness: could not stop psql: $!";
	push @stopped, client_pid($a);

	my $b = session($node);
	sql_ok($b, "SET lock_timeout = '60s'");
	my ($out, $err) = run_sql($b, "SELECT status FROM lease_fence.campaign('el-7', 5000, 60000)");
	is($out, 'acquired', "B's campaign wins while A's client is stopped");
	is(sqlstate($err), '', 'B: no error (no lock timeout)');
	wait_backend_gone($pid);
	ok(!kill(0, $pid), "A's backend is gone");
	like(substr(slurp_file($node->logfile), $log_offset),
		qr/terminated session of process $pid idle in transaction: its lease on resource "el-7" ran out/,
		'the LOG line names the pid and the election');
	is(counter(), '4', 'counted');
	like(continue_client($a), qr/FATAL:  25P03/, 'A, continued, reads FATAL 25P03');
	is(rows('A-7'), '0', "A's write did not commit");
	$b->quit;
}

$node->stop;
$redis->stop;
done_testing();

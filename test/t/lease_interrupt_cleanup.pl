# lease_interrupt_cleanup.pl — a termination ends the cleanups a session is
# waiting in, and a cancel ends the reading of an earlier release's answer
# (docs/guides/leases.md, "Cancel and terminate during cleanup";
# lease_fence.stats: cleanup/skipped).
#
# Redis is frozen (SIGSTOP of the test's own redis-server, resumed after
# each case), and the session has set every timeout of its own to the
# maximum (60 s):
#  - pg_terminate_backend during a ROLLBACK that releases 3
#    transaction-scoped leases: the release under way ends by the exit's
#    budget (exit_timeout_ms = 300, set by the superuser), not by the
#    session's cleanup_timeout_ms; the other 2 are not tried during the
#    ROLLBACK nor again at exit, and each lease counts once (cleanup/skipped
#    2, not 5: a lease left untried twice is one lease not released); the
#    backend is gone while Redis is still frozen.  (Before, the ROLLBACK waited out the 60 s, then
#    the exit tried the first one once more.)
#  - pg_cancel_backend while the next acquire waits for the answer to the
#    release sent after COMMIT: the wait ends there (its WARNING says
#    "interrupted", not "timed out"), the statement is cancelled, its
#    acquire never sent (no key), the release unconfirmed.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use LeaseFenceRedis;
use LeaseFenceTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $redis = LeaseFenceRedis->new;
my $node = $redis->node('interrupt_cleanup', "shared_preload_libraries = 'lease_fence'",
	'lease_fence.exit_timeout_ms = 300');

# the cleanup counters moved since $before (undef: now), as one string
sub cleanups
{
	my ($before) = @_;
	my %c = map { split /\|/ } split /\n/, sql_ok($node,
		"SELECT outcome, count FROM lease_fence.stats WHERE operation = 'cleanup'");
	return { map { $_ => $c{$_} // 0 } qw(confirmed unconfirmed skipped) } unless $before;
	return join(', ', map { ($c{$_} // 0) - $before->{$_} . " $_" } qw(confirmed unconfirmed skipped));
}

sub freeze { kill('STOP', $redis->pid) or die "SIGSTOP redis: $!"; return; }
sub thaw { kill('CONT', $redis->pid) or die "SIGCONT redis: $!"; return; }

# wait until backend $pid waits in lease_fence, running a statement like $like
sub waits_in_lease_fence
{
	my ($pid, $like) = @_;
	$node->poll_query_until('postgres',
		"SELECT wait_event_type = 'Extension' AND query LIKE '$like' FROM pg_stat_activity WHERE pid = $pid")
	  or die "backend $pid does not wait in lease_fence";
	return;
}

my @max = map { "SET lease_fence.$_ = 60000" } qw(cleanup_timeout_ms connect_timeout_ms command_timeout_ms);

#
# pg_terminate_backend during ROLLBACK's releases
#
{
	my $s = session($node);
	my $pid = sql_ok($s, 'SELECT pg_backend_pid()');
	sql_ok($s, $_) for @max, 'BEGIN';
	need(sql_ok($s, "SELECT count(*) FROM generate_series(1, 3) i, LATERAL lease_fence.acquire("
		  . "'rb-' || i, 60000, scope => 'transaction') a WHERE a.status = 'acquired'"), 3, '3 leases');
	my $before = cleanups();
	my $offset = -s $node->logfile;
	freeze();
	$s->query_until(qr/lf-sent/, "\\echo lf-sent\nROLLBACK;\n");
	waits_in_lease_fence($pid, 'ROLLBACK%');
	need(sql_ok($node, "SELECT pg_terminate_backend($pid)"), 't', 'pg_terminate_backend');
	# (Redis is thawed only once the backend is gone)
	wait_backend_gone($pid);
	is(cleanups($before), '0 confirmed, 1 unconfirmed, 2 skipped',
		'terminate: 1 release tried, within the exit budget; 2 not tried at ROLLBACK, and none of the 3 counted again when the exit does not retry it');
	my $log = slurp_file($node->logfile, $offset);
	like($log, qr/2 lease releases not tried: the exit's cleanup budget \(300 ms\) had passed/,
		"terminate: the ROLLBACK's WARNING names the exit's budget");
	unlike($log, qr/cleanup_timeout_ms \(60000 ms\)/, "terminate: the session's cleanup_timeout_ms was not waited out");
	thaw();
	is($redis->cli('EXISTS', lkey('rb-2'), lkey('rb-3')), '2', 'terminate: the 2 keys not tried are left to their TTL');
	eval { $s->quit; };
}

#
# pg_cancel_backend while the answer to the release after COMMIT is read
#
{
	my $s = session($node);
	my $pid = sql_ok($s, 'SELECT pg_backend_pid()');
	sql_ok($s, $_) for @max;
	my $w = acquire($s, 'warm', 60000);
	release($s, 'warm', $w->{identity});
	sql_ok($s, 'BEGIN');
	need(acquire($s, 'c-1', 60000, 0, 'transaction')->{status}, 'acquired', 'the transaction-scoped lease');
	freeze();
	my (undef, $err) = run_sql($s, 'COMMIT');
	need($err, '', 'COMMIT, its release sent without waiting');
	my $before = cleanups();
	$s->query_until(qr/lf-sent/, "\\echo lf-sent\nSELECT status FROM lease_fence.acquire('c-next', 60000);\n");
	waits_in_lease_fence($pid, 'SELECT status%');
	need(sql_ok($node, "SELECT pg_cancel_backend($pid)"), 't', 'pg_cancel_backend');
	(undef, $err) = run_sql($s, "SELECT 'lf-after'");
	is(sqlstate($err), '57014', 'cancel: the statement reading the earlier answer is cancelled');
	like($err, qr/could not confirm a lease release sent after an earlier COMMIT/,
		'cancel: a WARNING says the release is unconfirmed');
	like($err, qr/DETAIL:  interrupted while waiting for Redis/,
		'cancel: the wait ended because of the cancel, not at command_timeout_ms');
	is(cleanups($before), '0 confirmed, 1 unconfirmed, 0 skipped', 'cancel: the release counts as unconfirmed');
	thaw();
	is($redis->cli('EXISTS', lkey('c-next')), '0', 'cancel: the acquire was never sent');
	is(acquire($s, 'c-next', 60000)->{status}, 'acquired', 'cancel: the session goes on');
	$s->quit;
}

$node->stop;
$redis->stop;
done_testing();

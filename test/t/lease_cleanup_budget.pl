# lease_cleanup_budget.pl — the conditional releases at transaction end and at
# backend exit share one deadline, and a frozen Redis cannot stretch it
# (docs/guides/leases.md, "Scopes" and "Settings"; lease_fence.stats: cleanup/skipped).
#
# Redis is frozen with CLIENT PAUSE 2500 ALL (a new connection's PING waits
# too), longer than the budgets below (at most 600 ms: a commit check and a
# release of 300 each) with about 2 s to spare for a slow scheduler, so a
# release that waited for the session's own large timeouts would see the
# pause end and be confirmed:
#  - a disconnect, and pg_terminate_backend, of a session holding 20
#    session-scoped leases with cleanup_timeout_ms = connect_timeout_ms =
#    60000 of its own: the exit's budget is exit_timeout_ms (300, superuser):
#    1 release tried and unconfirmed, 19 not tried (one WARNING), none
#    confirmed, all 20 keys left to their TTL;
#  - ROLLBACK of 20 transaction-scoped leases: one cleanup_timeout_ms (300)
#    for all of them, a new connection's connect included: the same counts;
#  - COMMIT whose check times out (LF010): the release after it is bounded by
#    cleanup_timeout_ms, connect included, not by connect_timeout_ms (60000):
#    unconfirmed, the key still there;
#  - pg_ctl stop -m fast: a backend terminated by the shutdown tries no
#    release and logs how many leases it leaves to their TTL.
# And exit_timeout_ms set in postgresql.conf applies from the server's start.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use LeaseFenceRedis;
use LeaseFenceTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# each step waits this pause out (keys_left); see the header for its margin
my $pause_ms = 2500;

my $redis = LeaseFenceRedis->new;
my $node = $redis->node('cleanup_budget', "shared_preload_libraries = 'lease_fence'",
	'lease_fence.exit_timeout_ms = 300');

# A server setting: postgresql.conf's value applies from the start (a
# setting defined after the lease_fence prefix was reserved would lose it).
is((run_sql($node, 'SHOW lease_fence.exit_timeout_ms'))[0], '300ms',
	'exit_timeout_ms = 300 in postgresql.conf applies from the start');

# the cleanup counters moved since $before (undef: now), as one string
sub cleanups
{
	my ($before) = @_;
	my %c = map { split /\|/ } split /\n/, sql_ok($node,
		"SELECT outcome, count FROM lease_fence.stats WHERE operation = 'cleanup'");
	return { map { $_ => $c{$_} // 0 } qw(confirmed unconfirmed skipped) } unless $before;
	return join(', ', map { ($c{$_} // 0) - $before->{$_} . " $_" } qw(confirmed unconfirmed skipped));
}

# a background session that ran @sql, then took $n leases "$prefix-<i>" of
# $scope (TTL 60 s): (session, backend pid)
sub holder
{
	my ($prefix, $n, $scope, @sql) = @_;
	my $s = session($node);
	sql_ok($s, $_) for @sql;
	need(sql_ok($s, "SELECT count(*) FROM generate_series(1, $n) i, LATERAL lease_fence.acquire("
		  . "'$prefix-' || i, 60000, scope => '$scope') a WHERE a.status = 'acquired'"), $n, "$n leases");
	return ($s, sql_ok($s, 'SELECT pg_backend_pid()'));
}

# how many of the keys of holder($prefix, $n) exist, once the pause is over
sub keys_left
{
	my ($prefix, $n) = @_;
	wait_pause_over($redis);
	return $redis->cli('EXISTS', map { lkey("$prefix-$_") } 1 .. $n);
}

my @large = ('SET lease_fence.cleanup_timeout_ms = 60000', 'SET lease_fence.connect_timeout_ms = 60000');

#
# backend exit: one budget, exit_timeout_ms, whatever the session set
#
for my $how ('disconnect', 'pg_terminate_backend')
{
	my $before = cleanups();
	my ($s, $pid) = holder("exit-$how", 20, 'session', @large);
	my $offset = -s $node->logfile;
	pause_redis($redis, $pause_ms);
	if ($how eq 'disconnect') { $s->quit; }
	else { need(sql_ok($node, "SELECT pg_terminate_backend($pid)"), 't', 'pg_terminate_backend'); }
	wait_backend_gone($pid);
	is(cleanups($before), '0 confirmed, 1 unconfirmed, 19 skipped',
		"$how: 20 leases, cleanup_timeout_ms 60000: 1 release tried within exit_timeout_ms, 19 not tried");
	like(slurp_file($node->logfile, $offset),
		qr/19 lease releases not tried: the exit's cleanup budget \(300 ms\) had passed/,
		"$how: one WARNING says so for the batch");
	is(keys_left("exit-$how", 20), '20', "$how: all 20 keys are left to their TTL");
	$s->quit if $how ne 'disconnect';
}

#
# ROLLBACK: one cleanup_timeout_ms for all, a new connection's connect included
#
{
	my $before = cleanups();
	my ($s) = holder('rb', 20, 'transaction', 'SET lease_fence.cleanup_timeout_ms = 300',
		'SET lease_fence.connect_timeout_ms = 60000', 'BEGIN');
	pause_redis($redis, $pause_ms);
	my (undef, $err) = run_sql($s, 'ROLLBACK');
	like($err, qr/19 lease releases not tried: lease_fence.cleanup_timeout_ms \(300 ms\) had passed/,
		'ROLLBACK of 20 transaction-scoped leases: a WARNING says 19 releases were not tried');
	is(cleanups($before), '0 confirmed, 1 unconfirmed, 19 skipped',
		'ROLLBACK: 1 release tried within cleanup_timeout_ms, 19 not tried');
	is(keys_left('rb', 20), '20', 'ROLLBACK: all 20 keys are left to their TTL');
	$s->quit;
}

#
# a failed commit check: the release after it is bounded by cleanup_timeout_ms
#
{
	my ($s) = holder('cc', 1, 'transaction', "SET lease_fence.commit_check = 'always'",
		'SET lease_fence.command_timeout_ms = 300',
		'SET lease_fence.connect_timeout_ms = 60000', 'SET lease_fence.cleanup_timeout_ms = 300', 'BEGIN');
	my $id = sql_ok($s, "SELECT identity FROM lease_fence.leases WHERE resource = 'cc-1'");
	my $before = cleanups();
	pause_redis($redis, $pause_ms);
	my (undef, $err) = run_sql($s, 'COMMIT');
	is(sqlstate($err), 'LF010', 'commit check unanswered: COMMIT fails with LF010');
	is(cleanups($before), '0 confirmed, 1 unconfirmed, 0 skipped',
		'LF010: the release at abort is unconfirmed (its connect within cleanup_timeout_ms, not connect_timeout_ms)');
	wait_pause_over($redis);
	is($redis->cli('GET', lkey('cc-1')), $id, 'LF010: the key still holds the identity after the pause');
	$s->quit;
}

#
# pg_ctl stop -m fast: terminated by the shutdown, a backend tries no release
#
{
	my ($s1) = holder('stop1', 2, 'session', @large);
	my ($s2) = holder('stop2', 3, 'session', @large);
	my $offset = -s $node->logfile;
	pause_redis($redis, $pause_ms);
	$node->stop('fast');
	my $log = slurp_file($node->logfile, $offset);
	like($log, qr/the server is shutting down: 2 leases of this session are left to expire by their TTL/,
		'fast shutdown: the session with 2 leases logs that it leaves them to their TTL');
	like($log, qr/the server is shutting down: 3 leases of this session are left to expire by their TTL/,
		'fast shutdown: so does the session with 3');
	unlike($log, qr/could not confirm the release/, 'fast shutdown: no release was tried');
	is(keys_left('stop1', 2) + keys_left('stop2', 3), 5, 'fast shutdown: the 5 keys are left to their TTL');
	$_->quit for ($s1, $s2);
}

$redis->stop;
done_testing();

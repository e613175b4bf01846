# lease_take_over.pl — lease_fence.take_over(): an operator takes a lease
# away from a stuck holder, safely (docs/guides/leader-election.md,
# "Taking a lease over").
#
#  - not PUBLIC's: a role with the acquire GRANT but not take_over's gets
#    42501, nothing sent; bad arguments: 22023, nothing sent;
#  - a held lease is taken: a generation above the holder's, the resource
#    fence raised to it, the key the taker's; the holder's backend learns it
#    without asking Redis: its next fenced write under its generation is
#    LF010; its renew answers lost, its release not_held; the server log
#    names both pids; takeover / taken counted;
#  - the holder's transaction that wrote under the lease before the take-over
#    does not COMMIT after it (LF010), nothing of it committed;
#  - a transaction of the holder that fenced the resource (a
#    transaction-scoped lease) and stays open: the take-over waits for it at
#    most timeout_ms, then fails with 55P03 having taken nothing (key, fence
#    and the holder's COMMIT unchanged); takeover / timeout counted;
#  - such a transaction that commits within timeout_ms: the take-over waits
#    for it, then takes the lease;
#  - a take-over whose transaction rolls back holds nothing;
#  - the answer lost: ERROR 08007, the fence unchanged, the key released;
#  - Redis down: ERROR 08006, the fence unchanged.

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
my $node = $redis->node('takeover', "shared_preload_libraries = 'lease_fence'");
sql_ok($node, <<'SQL');
CREATE TABLE work (id int PRIMARY KEY, who text);
SELECT lease_fence.protect('work');
CREATE ROLE lf_app LOGIN;
GRANT EXECUTE ON FUNCTION lease_fence.acquire(text, bigint, bigint, text, bigint, boolean, boolean),
	lease_fence.campaign(text, bigint, bigint, text, text, boolean) TO lf_app;
SQL

sub counter
{
	my ($operation, $outcome) = @_;
	return sql_ok($node,
		"SELECT count FROM lease_fence.stats WHERE operation = '$operation' AND outcome = '$outcome'");
}

sub fence_of
{
	return sql_ok($node, "SELECT generation FROM lease_fence.resource_fences WHERE resource = " . lit($_[0]));
}

sub take_over
{
	my ($res, $ttl, %o) = @_;
	my @args = (lit($res), $ttl);
	push @args, "timeout_ms => $o{timeout_ms}" if exists $o{timeout_ms};
	push @args, "scope => " . lit($o{scope}) if exists $o{scope};
	return "lease_fence.take_over(" . join(', ', @args) . ")";
}

#
# Privileges and bad input
#
is(sql_ok($node, "SELECT has_function_privilege('public', 'lease_fence.take_over(text, bigint, bigint, text)', 'EXECUTE')"),
	'f', 'take_over is not PUBLIC\'s');
{
	my (undef, $err) = run_sql($node, "SELECT * FROM " . take_over('t-app', 1000), user => 'lf_app');
	is(sqlstate($err), '42501', 'a role with the acquire GRANT but not take_over\'s: ERROR 42501');
	is($redis->cli('EXISTS', lkey('t-app')), '0', '42501: nothing reached Redis');
}
foreach my $case (
	[ take_over('t-bad', 1000, timeout_ms => 0), 'timeout_ms must be between 1 and 2147483647' ],
	[ take_over('t-bad', 1000, timeout_ms => 'NULL'), 'timeout_ms must not be NULL' ],
	[ take_over('t-bad', 0), 'ttl_ms must be positive' ],
	[ take_over('t-bad', 1000, scope => 'transaction'), "take_over() takes scope 'session' or 'explicit'" ],
	[ "lease_fence.take_over(NULL, 1000)", 'resource must not be NULL' ])
{
	my ($fn, $msg) = @$case;
	my (undef, $err) = run_sql($node, "SELECT * FROM $fn");
	is(sqlstate($err), '22023', "$fn: ERROR 22023");
	like($err, qr/\Q$msg\E/, "$fn: says \"$msg\"");
}
is($redis->cli('EXISTS', lkey('t-bad')), '0', 'bad input: no lease key was written');
is(fence_of('t-bad'), '', 'bad input: no resource fence');

#
# A held lease is taken; the holder learns it without asking Redis
#
my $holder = session($node);
my $taken = counter('takeover', 'taken');
my $acquired = counter('acquire', 'acquired');
my $h = acquire($holder, 'res', 600000, 0, 'session');
need($h->{status}, 'acquired', 'the holder acquires res (session scope)');
my $holder_pid = sql_ok($holder, 'SELECT pg_backend_pid()');
my $t = call($node, take_over('res', 60000));
is($t->{status}, 'acquired', 'take_over: acquired');
ok($t->{generation} > $h->{generation}, "its generation is above the holder's");
is($redis->cli('GET', lkey('res')), $t->{identity}, 'the lease key is the taker\'s');
is(fence_of('res'), $t->{generation}, 'the resource fence is raised to it');
is(counter('takeover', 'taken'), $taken + 1, 'takeover / taken counted');
is(counter('acquire', 'acquired'), $acquired + 1, 'a take-over is not counted as an acquire (only the holder\'s was)');
ok($node->log_contains(qr/resource "res" taken over by the backend with pid \d+ from the backend with pid $holder_pid/),
	'the server log names the taker\'s and the holder\'s pids');
{
	my (undef, $err) = run_sql($holder,
		"BEGIN; SELECT lease_fence.set_generation($h->{generation}); INSERT INTO work VALUES (1, 'holder'); COMMIT;");
	is(sqlstate($err), 'LF010', "the holder's next fenced write under its generation: LF010, before any renew");
	like($err, qr/take_over\(\) in the backend with pid \d+ took it/, 'the error says a take_over took it');
	my $r = renew($holder, 'res', $h->{identity}, 60000);
	is($r->{status}, 'lost', "the holder's renew: lost");
	$r = release($holder, 'res', $h->{identity});
	is($r->{status}, 'not_held', "the holder's release: not_held");
	is($redis->cli('GET', lkey('res')), $t->{identity}, 'and the key is still the taker\'s');
	(undef, $err) = run_sql($node, "BEGIN; SELECT lease_fence.set_generation($h->{generation}, 'res'); COMMIT;");
	is(sqlstate($err), 'LF001', "any write of the holder's generation checking the fence: LF001");
}

#
# The holder's transaction that wrote before the take-over does not COMMIT after it
#
{
	my $h2 = acquire($holder, 'res2', 600000, 0, 'session');
	need($h2->{status}, 'acquired', 'the holder acquires res2');
	sql_ok($holder, "BEGIN; SELECT lease_fence.set_generation($h2->{generation}); INSERT INTO work VALUES (2, 'holder');");
	my $t2 = call($node, take_over('res2', 60000));
	is($t2->{status}, 'acquired', 'take_over of res2 while the holder\'s transaction is open');
	my (undef, $err) = run_sql($holder, 'COMMIT;');
	is(sqlstate($err), 'LF010', "the holder's COMMIT after the take-over: LF010");
	like($err, qr/was taken over before commit/, 'it says the lease was taken over before commit');
	is(sql_ok($node, 'SELECT count(*) FROM work WHERE id = 2'), '0', 'nothing of that transaction committed');
}

#
# A transaction that fenced the resource and stays open: bounded wait, nothing taken
#
my $victim = session($node);
{
	my $timeouts = counter('takeover', 'timeout');
	sql_ok($victim, "BEGIN;");
	my $v = acquire($victim, 'res3', 600000, 0, 'transaction');
	need($v->{status}, 'acquired', 'the victim holds res3 in its open transaction');
	my (undef, $err) = run_sql($node, "SELECT * FROM " . take_over('res3', 60000, timeout_ms => 300));
	is(sqlstate($err), '55P03', 'take_over waits timeout_ms for the transaction that fenced res3, then ERROR 55P03');
	like($err, qr/nothing was taken/, 'it says nothing was taken');
	is($redis->cli('GET', lkey('res3')), $v->{identity}, 'the lease key is still the victim\'s');
	is(counter('takeover', 'timeout'), $timeouts + 1, 'takeover / timeout counted');
	sql_ok($victim, "INSERT INTO work VALUES (3, 'victim');");
	(undef, $err) = run_sql($victim, 'COMMIT;');
	is($err =~ /ERROR/ ? 'error' : 'committed', 'committed', "the victim's transaction still commits");
	is(fence_of('res3'), $v->{generation}, "the resource fence is the victim's generation");
}

#
# Such a transaction that commits within timeout_ms: the take-over waits for it
#
{
	my $taker = session($node);
	sql_ok($victim, "BEGIN;");
	my $v = acquire($victim, 'res4', 600000, 0, 'transaction');
	need($v->{status}, 'acquired', 'the victim holds res4 in its open transaction');
	my $taker_pid = sql_ok($taker, 'SELECT pg_backend_pid()');
	$taker->query_until(qr/lf-started/,
		"\\echo lf-started\nSELECT row_to_json(t) FROM " . take_over('res4', 60000, timeout_ms => 600000) . " t;\n");
	$node->poll_query_until('postgres',
		"SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $taker_pid")
	  or die 'harness: the take-over did not wait';
	sql_ok($victim, "INSERT INTO work VALUES (4, 'victim'); COMMIT;");
	my $out = $taker->query_safe("SELECT 'lf-done'");
	like($out, qr/"status":"acquired"/, 'the take-over waited for the victim\'s transaction, then took res4');
	is(sql_ok($node, 'SELECT who FROM work WHERE id = 4'), 'victim', 'the victim\'s transaction committed before it');
	my ($gen) = $out =~ /"generation":(\d+)/;
	is(fence_of('res4'), $gen, 'the fence is the taker\'s generation');
	$taker->quit;
}

#
# A take-over whose transaction rolls back holds nothing
#
{
	my $before = fence_of('res');
	my $out = sql_ok($node, "BEGIN; SELECT row_to_json(t) FROM " . take_over('res', 60000) . " t; ROLLBACK;");
	like($out, qr/"status":"acquired"/, 'a take-over inside a transaction block takes');
	is($redis->cli('EXISTS', lkey('res')), '0', 'its transaction rolled back: the lease was released');
	is(fence_of('res'), $before, 'and the fence it raised is undone');
}

#
# The answer lost (Redis paused past command_timeout_ms): 08007, the fence
# unchanged, and what the take-over may have taken released again
#
{
	my $before = fence_of('res');
	my $operator = session($node);
	# connected, and key_prefix checked, before Redis stops answering
	sql_ok($operator, "SET lease_fence.command_timeout_ms = 200; SET lease_fence.cleanup_timeout_ms = 5000; "
		  . "SELECT held FROM lease_fence.leader('res');");
	pause_redis($redis, 1500);
	my (undef, $err) = run_sql($operator, "SELECT * FROM " . take_over('res', 60000) . ";");
	is(sqlstate($err), '08007', 'the answer lost: ERROR 08007, the outcome unknown');
	is(fence_of('res'), $before, 'the resource fence is unchanged');
	wait_pause_over($redis);
	is($redis->cli('EXISTS', lkey('res')), '0', 'what it may have taken was released as its transaction ended');
	$operator->quit;
}

#
# Redis down: 08006, nothing raised
#
{
	my $before = fence_of('res');
	$redis->stop;
	my (undef, $err) = run_sql($node, "SELECT * FROM " . take_over('res', 60000));
	is(sqlstate($err), '08006', 'Redis down: ERROR 08006');
	is(fence_of('res'), $before, 'the resource fence is unchanged');
}

done_testing();

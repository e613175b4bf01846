# lease_fair.pl — fair waiting: acquire(..., fair => true) grants a busy
# resource in the order its waiters came (docs/guides/keepalive-and-waiting.md).
#
#  - bad input: fair NULL is ERROR 22023 before anything is sent;
#  - arrival order: waiters started one after another (each visibly queued
#    before the next starts) are granted first to last, generations in the
#    same order; each release wakes only the head (one subscriber per
#    waiter, its own channel);
#  - queue() and all_leases show the queue (position, pid, since);
#  - wait_ms 0 with fair: busy while anybody waits, never joins;
#  - campaign(fair => true): followers win in the order they came;
#  - counters fair / queued, granted, left.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use LeaseFenceRedis;
use LeaseFenceTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use JSON::PP;

my $redis = LeaseFenceRedis->new;
my $node = $redis->node('fair', "shared_preload_libraries = 'lease_fence'");

sub counter
{
	my ($operation, $outcome) = @_;
	return sql_ok($node,
		"SELECT count FROM lease_fence.stats WHERE operation = '$operation' AND outcome = '$outcome'");
}

sub queued
{
	my ($resource) = @_;
	return sql_ok($node, "SELECT count(*) FROM lease_fence.queue(" . lit($resource) . ")");
}

sub wait_queued
{
	my ($resource, $n, $what) = @_;
	$node->poll_query_until('postgres',
		"SELECT count(*) = $n FROM lease_fence.queue(" . lit($resource) . ")")
	  or die "harness: $what: the queue never reached $n";
	return;
}

#
# Bad input
#
{
	my (undef, $err) = run_sql($node, "SELECT * FROM lease_fence.acquire('f-bad', 1000, fair => NULL)");
	is(sqlstate($err), '22023', 'fair NULL: ERROR 22023');
	like($err, qr/fair must not be NULL/, 'fair NULL: says so');
	is($redis->cli('EXISTS', lkey('f-bad')), '0', 'fair NULL: nothing was written');
	(undef, $err) = run_sql($node, "SELECT * FROM lease_fence.campaign('f-bad', 1000, fair => NULL)");
	is(sqlstate($err), '22023', 'campaign(fair NULL): ERROR 22023');
	is($redis->cli('EXISTS', lkey('f-bad')), '0', 'campaign(fair NULL): nothing was written');
}

#
# Arrival order, one wake per release
#
my $queued0 = counter('fair', 'queued');
my $granted0 = counter('fair', 'granted');
my $holder = acquire($node, 'f-order', 600000);
is($holder->{status}, 'acquired', 'the holder acquires');
my @s;
for my $i (0 .. 3)
{
	$s[$i] = session($node);
	start_sql($s[$i], "SELECT row_to_json(a) FROM lease_fence.acquire('f-order', 600000, wait_ms => 60000, fair => true) a;");
	wait_queued('f-order', $i + 1, "waiter $i");
}
my $q = sql_ok($node, "SELECT string_agg(position || ':' || pid, ' ' ORDER BY position) FROM lease_fence.queue('f-order')");
like($q, qr/^1:\d+ 2:\d+ 3:\d+ 4:\d+$/, "queue(): four waiters, positions 1 to 4, each with its pid ($q)");
is(sql_ok($node, "SELECT count(*) FROM lease_fence.all_leases WHERE resource = 'f-order' AND state = 'waiting'"),
	'4', "all_leases: the four waiters, state 'waiting'");
is(counter('fair', 'queued'), $queued0 + 4, 'fair / queued counted four times');
{
	my @lines = split /\n/, $redis->cli('PUBSUB', 'NUMSUB', lkey('f-order') . ':released');
	is($lines[1] // 0, '0', 'no fair waiter listens on the shared release channel');
}
my $prev = $holder;
for my $i (0 .. 3)
{
	my $r = call($node, "lease_fence.release('f-order', " . lit($prev->{identity}) . ")");
	is($r->{status}, 'released', "release $i");
	my $got = finish_row($s[$i]);
	is($got->{status}, 'acquired', "waiter $i (arrived $i-th) is granted next");
	ok($got->{generation} > $prev->{generation}, "waiter $i: its generation is above the one before");
	is(queued('f-order') + 0, 3 - $i, "the queue holds the " . (3 - $i) . " after it");
	$prev = $got;
}
is(counter('fair', 'granted'), $granted0 + 4, 'fair / granted counted four times');
call($node, "lease_fence.release('f-order', " . lit($prev->{identity}) . ")");

#
# wait_ms 0 with fair: busy while anybody waits, never joins
#
{
	my $h = acquire($node, 'f-zero', 600000);
	my $w = session($node);
	start_sql($w, "SELECT row_to_json(a) FROM lease_fence.acquire('f-zero', 600000, wait_ms => 60000, fair => true) a;");
	wait_queued('f-zero', 1, 'the waiter');
	call($node, "lease_fence.release('f-zero', " . lit($h->{identity}) . ")");
	my $got = finish_row($w);
	is($got->{status}, 'acquired', 'the waiter is granted');
	my $z = call($node, "lease_fence.acquire('f-zero', 600000, fair => true)");
	is($z->{status}, 'busy', 'fair, wait_ms 0, the lease held: busy');
	is(queued('f-zero'), '0', 'and it did not join the queue');
	call($node, "lease_fence.release('f-zero', " . lit($got->{identity}) . ")");
}

#
# campaign(fair => true): the followers lead in the order they came
#
{
	my $leader = call($node, "lease_fence.campaign('f-elect', 600000, wait_ms => 0, scope => 'explicit', fair => true)");
	is($leader->{status}, 'acquired', 'campaign(fair): the first leads at once');
	my @f;
	for my $i (0 .. 1)
	{
		$f[$i] = session($node);
		start_sql($f[$i], "SELECT row_to_json(c) FROM lease_fence.campaign('f-elect', 600000, wait_ms => 60000, scope => 'explicit', fair => true) c;");
		wait_queued('f-elect', $i + 1, "follower $i");
	}
	call($node, "lease_fence.resign('f-elect', " . lit($leader->{identity}) . ")");
	my $first = finish_row($f[0]);
	is($first->{status}, 'acquired', 'campaign(fair): the follower that came first leads after the resign');
	ok($first->{term} > $leader->{term}, 'campaign(fair): with a higher term');
	is(queued('f-elect'), '1', 'campaign(fair): the second still waits');
	is(sql_ok($node, "SELECT generation FROM lease_fence.resource_fences WHERE resource = 'f-elect'"),
		$first->{term}, "campaign(fair): the win raised the election's resource fence to its term");
	call($node, "lease_fence.resign('f-elect', " . lit($first->{identity}) . ")");
	my $second = finish_row($f[1]);
	is($second->{status}, 'acquired', 'campaign(fair): then the second');
	call($node, "lease_fence.resign('f-elect', " . lit($second->{identity}) . ")");
}

#
# queue()'s errors: a queue member lease_fence never writes (XX001, nothing
# returned), and Redis down (08006)
#
{
	$redis->cli('ZADD', lkey('f-odd') . ':queue', '1', 'x' x 65);
	$redis->cli('SET', lkey('f-odd') . ':queue:' . ('x' x 65), '1');
	my (undef, $err) = run_sql($node, "SELECT * FROM lease_fence.queue('f-odd')");
	is(sqlstate($err), 'XX001', 'queue(): a member longer than 64 bytes is XX001');
	$redis->cli('DEL', lkey('f-odd') . ':queue');
	$redis->stop;
	(undef, $err) = run_sql($node, "SELECT * FROM lease_fence.queue('f-order')");
	is(sqlstate($err), '08006', 'queue(): Redis down is 08006');
}

done_testing();

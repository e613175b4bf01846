# lease_fair_cluster.pl — fair waiting on a Redis Cluster
# (docs/guides/keepalive-and-waiting.md; docs/guides/redis-deployments.md,
# "Cluster").
# Three masters, real servers on 127.0.0.1, and a node whose lease helper
# talks to them through one seed.  For a resource whose slot is another
# master's, and for one whose name starts with '}' (its keys spelt in
# hexadecimal): a holder and fair waiters queued one after another.  Pinned:
#  - the queue's keys are in the resource's slot: CLUSTER KEYSLOT of
#    <lease key>:queue and of every waiter key is the lease key's, and the
#    slot's owner holds them (no CROSSSLOT, no redirection);
#  - each waiter listens on its own channel, <lease key>:wake:<identity>,
#    with SSUBSCRIBE on the slot's owner (PUBSUB SHARDNUMSUB 1 each), and
#    nobody on the shared <lease key>:released;
#  - each release grants the next waiter in arrival order, generations
#    rising, with one SPUBLISH on the owner (INFO commandstats) and one
#    waiter woken (wait / woken), the others still waiting;
#  - queue() answers for both resources, through the seed.
# The waiters' places are kept with fair_waiter_ttl_ms = 60000, so that no
# renewal (every third of it) falls between a release and its grant: a
# renewal that finds the lease free wakes the head once more, which is
# right but would make the count of messages per release two.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use JSON::PP;
use LeaseFenceRedis;
use LeaseFenceTest;
use LeaseFenceTopology;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my @masters = LeaseFenceTopology::cluster(masters => 3, replicas => 0);
my $seed = $masters[0];
my $node = $seed->node('fair_cluster',
	"shared_preload_libraries = 'lease_fence'",
	'lease_fence.redis_cluster = on',
	"lease_fence.redis_host = '127.0.0.1'",
	'lease_fence.redis_port = ' . $seed->port,
	'lease_fence.command_timeout_ms = 1000');

sub counter
{
	my ($op, $outcome) = @_;
	return sql_ok($node,
		"SELECT count FROM lease_fence.stats WHERE operation = '$op' AND outcome = '$outcome'");
}

sub running
{
	my ($pid) = @_;
	return sql_ok($node, "SELECT state FROM pg_stat_activity WHERE pid = $pid") eq 'active';
}

sub hexof { return join '', map { sprintf '%02x', ord } split //, $_[0]; }

# SPUBLISH commands a node has run (scripts' included)
sub spublishes
{
	my ($redis) = @_;
	return $redis->cli('INFO', 'commandstats') =~ /^cmdstat_spublish:calls=(\d+)/m ? $1 : 0;
}

sub shard_subscribers
{
	my ($redis, $channel) = @_;
	return (split /\n/, $redis->cli('PUBSUB', 'SHARDNUMSUB', $channel))[1] // 0;
}

# A holder and $n fair waiters of $resource (its lease key $lkey), each
# queued before the next starts and subscribed on its own channel; then
# each release grants the next, in order.
sub fair_round
{
	my ($resource, $lkey, $n) = @_;
	my $slot = $seed->cli('CLUSTER', 'KEYSLOT', $lkey);
	my $owner = LeaseFenceTopology::owner_of($lkey, @masters);
	my $q = "lease_fence.queue(" . lit($resource) . ")";

	is($seed->cli('CLUSTER', 'KEYSLOT', "$lkey:queue"), $slot, "'$resource': the queue key is in the lease key's slot");

	my $redirects = counter('cluster', 'redirect_followed');
	my $holder = acquire($node, $resource, 600000);
	need($holder->{status}, 'acquired', "the holder acquires '$resource'");
	need($owner->cli('GET', $lkey), $holder->{identity}, "'$resource': the lease key on its slot's owner");
	my @w;
	for my $i (1 .. $n)
	{
		my $s = session($node);
		my $pid = sql_ok($s, 'SELECT pg_backend_pid()');
		sql_ok($s, 'SET lease_fence.fair_waiter_ttl_ms = 60000');
		start_sql($s, "SELECT row_to_json(a) FROM lease_fence.acquire(" . lit($resource)
			  . ", 600000, wait_ms => 600000, fair => true) a;");
		LeaseFenceTopology::wait_for("'$resource': waiter $i to queue",
			sub { sql_ok($node, "SELECT count(*) FROM $q") == $i });
		push @w, { s => $s, pid => $pid, name => "waiter $i" };
	}
	my @ids = split /\n/, sql_ok($node, "SELECT identity || ' ' || pid FROM $q ORDER BY position");
	is(join(' ', map { (split / /)[1] } @ids), join(' ', map { $_->{pid} } @w),
		"'$resource': queue() through the seed shows the $n waiters in their order");
	for my $i (0 .. $#w)
	{
		$w[$i]{identity} = (split / /, $ids[$i])[0];
	}
	is(counter('cluster', 'redirect_followed'), $redirects, "'$resource': queued without one redirection");
	is(join(' ', map { scalar $seed->cli('CLUSTER', 'KEYSLOT', "$lkey:queue:$_->{identity}") } @w),
		join(' ', ($slot) x $n), "'$resource': every waiter key is in the lease key's slot");
	is($owner->cli('ZCARD', "$lkey:queue") . ' '
		  . join(' ', map { scalar $owner->cli('EXISTS', "$lkey:queue:$_->{identity}") } @w),
		join(' ', $n, (1) x $n), "'$resource': the queue and the waiter keys are on the slot's owner");
	LeaseFenceTopology::wait_for("'$resource': every waiter to subscribe", sub {
		!grep { shard_subscribers($owner, "$lkey:wake:$_->{identity}") != 1 } @w });
	pass("'$resource': each waiter listens on its own channel (SSUBSCRIBE on the slot's owner)");
	is(shard_subscribers($owner, "$lkey:released") . ' '
		  . (split /\n/, $owner->cli('PUBSUB', 'NUMSUB', "$lkey:wake:$w[0]{identity}"))[1],
		'0 0', "'$resource': nobody on the shared release channel, nor on a non-sharded one");

	my $prev = $holder;
	for my $i (0 .. $#w)
	{
		my $published = spublishes($owner);
		my $woken = counter('wait', 'woken');
		my $r = call($node, "lease_fence.release(" . lit($resource) . ", " . lit($prev->{identity}) . ")");
		need($r->{status}, 'released', "'$resource': release $i");
		my $done;
		LeaseFenceTopology::wait_for("'$resource': a waiter to return after release $i", sub {
			($done) = grep { !running($_->{pid}) } @w[ $i .. $#w ];
			defined $done });
		is($done->{name}, $w[$i]{name}, "'$resource': $w[$i]{name} returns next (arrival order)");
		my $got = finish_row($done->{s});
		is($got->{status}, 'acquired', "'$resource': $done->{name} is granted");
		cmp_ok($got->{generation} // 0, '>', $prev->{generation}, "'$resource': its generation is above the one before");
		is($owner->cli('GET', $lkey), $got->{identity} // 'none', "'$resource': the lease key is its");
		is(spublishes($owner) - $published, 1, "'$resource': release $i sent one SPUBLISH");
		is(counter('wait', 'woken') - $woken, 1, "'$resource': and woke one waiter");
		ok(!grep({ !running($_->{pid}) } grep { $_ != $done } @w[ $i .. $#w ]),
			"'$resource': the others still wait");
		$prev = $got;
	}
	call($node, "lease_fence.release(" . lit($resource) . ", " . lit($prev->{identity} // '') . ")");
	is(sql_ok($node, "SELECT count(*) FROM $q") . ' ' . $owner->cli('EXISTS', "$lkey:queue"), '0 0',
		"'$resource': the queue is empty, its key gone");
	$_->{s}->quit for @w;
	return;
}

# a resource whose slot is not the seed's
my $res;
for my $i (1 .. 1000)
{
	next if LeaseFenceTopology::owner_of(lkey("F$i"), @masters) == $seed;
	$res = "F$i";
	last;
}
fair_round($res, lkey($res), 4);

# a resource that starts with '}': <prefix>{<hex>}#lease
fair_round('}x', 'lease_fence:{' . hexof('}x') . '}#lease', 2);

$node->stop;
done_testing();

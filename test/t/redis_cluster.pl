# redis_cluster.pl — the lease helper talks to a Redis Cluster through one
# seed.  Three masters with a replica each, real servers on 127.0.0.1.
# Every resource's slot is computed in the backend, so 1,000 resources are
# acquired and released without one redirection.  While a slot migrates,
# one-key scripts (renew, release) follow ASK to the importing node, and an
# acquire (two keys, which Redis answers TRYAGAIN then) is retried until
# the migration ends or command_timeout_ms passes; once the slot has moved,
# MOVED is followed once and the map refreshed.  A killed master's slots
# are unavailable until its replica takes over (the first request on the
# connection that answered within the last second may be unknown), and
# acquirable after.

use strict;
use warnings;

use FindBin;
use IPC::Run;
use lib "$FindBin::RealBin/../perl";

use LeaseFenceRedis;
use LeaseFenceTest;
use LeaseFenceTopology;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my @nodes = LeaseFenceTopology::cluster(masters => 3, replicas => 1);
my @masters = grep { LeaseFenceTopology::is_master($_) } @nodes;
is(scalar(@masters), 3, 'three masters');
my $seed = $masters[0];

my $node = $seed->node('cluster',
	"shared_preload_libraries = 'lease_fence'",
	'lease_fence.redis_cluster = on',
	"lease_fence.redis_host = '127.0.0.1'",
	'lease_fence.redis_port = ' . $seed->port,
	'lease_fence.command_timeout_ms = 1000');
my $s = session($node);

sub counter
{
	my ($op, $outcome) = @_;
	return sql_ok($s, "SELECT count FROM lease_fence.stats WHERE operation = '$op' AND outcome = '$outcome'");
}

sub keys_in_slot
{
	my ($redis, $slot) = @_;
	return $redis->cli('CLUSTER', 'COUNTKEYSINSLOT', $slot);
}

# how many TRYAGAIN answers the masters have given (INFO errorstats)
sub tryagains
{
	my $n = 0;
	for my $m (@masters)
	{
		$n += $1 if $m->cli('INFO', 'errorstats') =~ /^errorstat_TRYAGAIN:count=(\d+)/m;
	}
	return $n;
}

# 1,000 resources through one seed.  The first acquire loads the slot map
# and claims the key_prefix (its owner key has a slot of its own).
is(acquire($s, 'warm-up', 60000)->{status}, 'acquired', 'a first acquire through the seed');
is(sql_ok($s, "SELECT string_agg(DISTINCT kind, ',') FROM lease_fence.redis_connections()"), 'cluster_node',
	'redis_connections(): every connection is a Cluster node\'s');
my $redirects = counter('cluster', 'redirect_followed');
sql_ok($s, q{
CREATE TABLE held AS
SELECT a.* FROM generate_series(1, 1000) i, LATERAL lease_fence.acquire('res-' || i, 60000) a
});
is(sql_ok($s, q{SELECT count(*) FILTER (WHERE status = 'acquired') || ' of ' || count(*) FROM held}),
	'1000 of 1000', '1000 resources acquired through one seed');
is(counter('cluster', 'redirect_followed'), $redirects,
	'without one redirection: every slot was computed right');
for my $m (@masters)
{
	cmp_ok($m->cli('DBSIZE'), '>', 200, 'master ' . $m->port . ' holds its share of the keys');
}
my $one = sql_ok($s, q{SELECT identity FROM held WHERE resource = 'res-77'});
my $owner77 = LeaseFenceTopology::owner_of(lkey('res-77'), @masters);
is($owner77->cli('GET', lkey('res-77')), $one, "res-77's key is on the master of its slot");
# holder(): its two keys share the resource's slot, so one script on the
# master of that slot answers, without a redirection or CROSSSLOT
is(sql_ok($s, q{SELECT x.held || ' ' || x.identity || ' ' || (x.generation = h.generation)
	FROM held h, LATERAL lease_fence.holder(h.resource) x WHERE h.resource = 'res-77'}),
	"true $one true", 'holder() on a Cluster: held, with its identity and the generation granted');
is(sql_ok($s, q{
SELECT count(*) FILTER (WHERE r.status = 'released') FROM held h, LATERAL lease_fence.release(h.resource, h.identity) r
}), '1000', 'and all 1000 released');
is(counter('cluster', 'redirect_followed'), $redirects, 'still without a redirection');

# A slot in migration.  The lease was granted before it began, and its keys
# have been moved to the importing node: the migrating node answers ASK,
# and the importing node serves a one-key script after ASKING.
my $res = 'moving';
my $slot = $seed->cli('CLUSTER', 'KEYSLOT', lkey($res));
my $from = LeaseFenceTopology::owner_of(lkey($res), @masters);
my ($to) = grep { $_ != $from } @masters;
my ($from_id, $to_id) = map { LeaseFenceTopology::node_id($_) } $from, $to;
my $m = acquire($s, $res, 60000);
is($m->{status}, 'acquired', 'acquired before the migration');
is(keys_in_slot($from, $slot), '2', 'its two keys on the node that owns the slot');
need($to->cli('CLUSTER', 'SETSLOT', $slot, 'IMPORTING', $from_id), 'OK', 'IMPORTING');
need($from->cli('CLUSTER', 'SETSLOT', $slot, 'MIGRATING', $to_id), 'OK', 'MIGRATING');
need($from->cli('MIGRATE', '127.0.0.1', $to->port, '', '0', '5000', 'KEYS', lkey($res), gkey($res)),
	'OK', 'MIGRATE the two keys');
$redirects = counter('cluster', 'redirect_followed');
is(renew($s, $res, $m->{identity}, 90000)->{status}, 'renewed', 'slot in migration: renewed');
cmp_ok(counter('cluster', 'redirect_followed'), '>', $redirects, 'by following ASK');
cmp_ok(LeaseFenceTopology::asking_cli($to, 'PTTL', lkey($res)), '>', 60000,
	'the key on the importing node has the new TTL');
is(release($s, $res, $m->{identity})->{status}, 'released', 'released through ASK too');
is(keys_in_slot($to, $slot), '1', 'only the generation key is left, on the importing node');
is(keys_in_slot($from, $slot), '0', 'and nothing on the migrating node');

# An acquire names two keys; while the slot migrates, Redis serves it on
# neither node (TRYAGAIN): it is retried until command_timeout_ms, then
# unavailable: not applied, not unknown.  A loaded machine can reach the
# short timeout first -- before the first try is sent (unavailable, Redis
# never asked), or while a try's answer is on its way (unknown: the timeout
# of a request sent).  Whichever comes first, nothing is granted or
# written, and the status and its WARNING say which it was; Redis's own
# count of TRYAGAIN answers tells the cases apart.
my $tries = tryagains();
my ($out, $err) = run_sql($s, qq{SET lease_fence.command_timeout_ms = 300;
SELECT status FROM lease_fence.acquire('$res', 60000); RESET lease_fence.command_timeout_ms});
my $answered = tryagains() - $tries;
note "acquire in a migrating slot: $out, Redis answered TRYAGAIN $answered times";
like($out, qr/^(unavailable|unknown)$/,
	"acquire in a migrating slot, short timeout: not granted ($out)");
my ($why, $what) =
	$out eq 'unknown' ? (qr/timed out waiting for Redis/, 'that no answer came in time')
  : $answered > 0 ? (qr/TRYAGAIN/, "that Redis answered TRYAGAIN ($answered times)")
  : (qr/^(?!.*TRYAGAIN).*timed out/s, 'that it timed out before Redis was asked (and no TRYAGAIN)');
like($err, $why, "the WARNING says $what");
is(keys_in_slot($to, $slot) . ' ' . keys_in_slot($from, $slot), '1 0',
	'nothing was written: the generation key alone on the importing node, nothing on the migrating one');

# The same acquire, with time to wait, from a new backend: it is still
# being retried when the migration ends, and then granted on the new owner.
my ($bg_out, $bg_err) = ('', '');
$tries = tryagains();
my $bg = IPC::Run::start(
	[ 'psql', '-X', '-At', '-d', $node->connstr('postgres'), '-c',
	  "SET lease_fence.command_timeout_ms = 20000; SELECT status || ' ' || identity FROM lease_fence.acquire('$res', 60000)" ],
	'>', \$bg_out, '2>', \$bg_err);
# (no other request meets the migrating slot meanwhile)
LeaseFenceTopology::wait_for('Redis to answer the acquire TRYAGAIN', sub { tryagains() > $tries });
for my $n (@masters)
{
	need($n->cli('CLUSTER', 'SETSLOT', $slot, 'NODE', $to_id), 'OK', 'SETSLOT NODE');
}
$bg->finish;
like($bg_out, qr/^acquired [0-9a-f]{32}$/m, 'retried through the migration: acquired once it ended');
my ($bg_id) = $bg_out =~ /([0-9a-f]{32})/;
is($to->cli('GET', lkey($res)), $bg_id // '', 'on the new owner of the slot');

# This backend's map still names the old owner: MOVED, followed once.
LeaseFenceTopology::wait_for('every node to agree on the moved slot', sub {
	!grep { (LeaseFenceTopology::owner_seen_by($_, lkey($res), @masters) // 0) != $to } @masters });
$redirects = counter('cluster', 'redirect_followed');
is(release($s, $res, $bg_id // '0' x 32)->{status}, 'released', 'slot moved: released');
is(counter('cluster', 'redirect_followed'), $redirects + 1, 'by following one MOVED');
$m = acquire($s, $res, 60000);
is($m->{status}, 'acquired', 'acquired again');
is($to->cli('GET', lkey($res)), $m->{identity}, 'on the new owner');
is(release($s, $res, $m->{identity})->{status}, 'released', 'released');
is(counter('cluster', 'redirect_followed'), $redirects + 1, 'the map was refreshed: no redirect since');

# A waiting acquire on a cluster: the release script publishes with SPUBLISH
# on the shard of the resource's slot, where the waiter subscribed
# (SSUBSCRIBE); the waiter is woken by it.  A resource served by a master
# other than the seed, so the subscription follows the slot map.
{
	my $wres;
	for my $i (1 .. 1000)
	{
		next if LeaseFenceTopology::owner_of(lkey("wait-$i"), @masters) == $seed;
		$wres = "wait-$i";
		last;
	}
	my $waiter = session($node);
	my $held = acquire($s, $wres, 60000);
	need($held->{status}, 'acquired', "the holder acquires $wres");
	my $woken = counter('wait', 'woken');
	my $trips = acquire_round_trips($node);
	$waiter->query_until(qr/lf-started/,
		"\\echo lf-started\nSELECT status FROM lease_fence.acquire('$wres', 10000, wait_ms => 30000);\n");
	my $owner = LeaseFenceTopology::owner_of(lkey($wres), @masters);
	# subscribed on the shard, and its attempt after subscribing answered busy
	wait_until_waiting($node, $trips,
		sub { (split /\n/, $owner->cli('PUBSUB', 'SHARDNUMSUB', "lease_fence:{$wres}:released"))[1] == 1 },
		"the waiter of $wres");
	is(release($s, $wres, $held->{identity})->{status}, 'released', 'wait on a cluster: the holder releases');
	like(sql_ok($waiter, "SELECT 'lf-after'"), qr/^acquired$/m, 'wait on a cluster: the waiter acquires');
	is(counter('wait', 'woken'), $woken + 1, "wait on a cluster: woken by the release's SPUBLISH");
	$waiter->quit;
	$owner->cli('DEL', lkey($wres));

	# keep-alive through the cluster layer
	my $k = call($s, "lease_fence.acquire('$wres', 1000, scope => 'session', keepalive => true)");
	is($k->{status}, 'acquired', 'keepalive on a cluster: acquired');
	sql_ok($s, 'SELECT pg_sleep(3)');
	is($owner->cli('GET', lkey($wres)), $k->{identity}, 'keepalive on a cluster: renewed past 3 TTLs on its node');
	is(release($s, $wres, $k->{identity})->{status}, 'released', 'keepalive on a cluster: released');
}

# A master killed: its slots are unavailable until its replica takes over.
my ($victim) = grep { $_ != $seed } @masters;
my $vres;
for my $i (1 .. 1000)
{
	next unless LeaseFenceTopology::owner_of(lkey("victim-$i"), @masters) == $victim;
	$vres = "victim-$i";
	last;
}
my $before = acquire($s, $vres, 60000);
is($before->{status}, 'acquired', "$vres acquired on its master before the kill");
is(release($s, $vres, $before->{identity})->{status}, 'released', 'and released');
LeaseFenceTopology::kill9($victim);
my (@seen, $got);
my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
while (time() < $deadline)
{
	$got = acquire($s, $vres, 60000);
	last if $got->{status} eq 'acquired';
	push @seen, $got->{status};
	usleep(100_000);
}
is($got->{status}, 'acquired', 'after the failover the slot is acquirable again');
cmp_ok(scalar(@seen), '>', 0, 'before it, acquires were refused (' . scalar(@seen) . ')');
# the first goes on the connection that answered the release just now,
# without a look at its socket: unknown there (never a grant); every later
# one finds no connection and is unavailable
my @later = @seen;
my $first = shift @later;
like($first // '', qr/^(unavailable|unknown)$/,
	'the first: unavailable, or unknown on the connection that answered within the last second');
is(scalar(grep { $_ ne 'unavailable' } @later), 0, 'all later ones unavailable, never unknown');
my $promoted = LeaseFenceTopology::owner_of(lkey($vres), grep { $_->pid } @nodes);
ok(defined $promoted && $promoted != $victim, 'the slot is served by the promoted replica');
is($promoted ? $promoted->cli('GET', lkey($vres)) : '', $got->{identity}, 'which holds the lease');

$s->quit;
$node->stop;
done_testing();

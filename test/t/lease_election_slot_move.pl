# lease_election_slot_move.pl — an election whose slot moves to another
# Redis Cluster node while a follower waits (docs/guides/leader-election.md;
# slots in migration: docs/guides/redis-deployments.md, "Cluster").  Three
# masters, real servers on 127.0.0.1, and a node whose lease helper talks to
# them through one seed.  A leader L holds election E; a follower F
# campaigns for E with a generous wait_ms and waits (subscribed on the
# shard of E's slot).  The slot is then migrated to another master
# (IMPORTING / MIGRATING, MIGRATE of E's three keys, SETSLOT NODE on every
# master), as redis_cluster.pl moves one.  Pinned:
#  - while the slot migrates and after it moved, F does not end (never busy
#    while the slot moves: its attempts follow ASK, then MOVED, and its
#    wait goes on when the shard subscription ends with the move);
#  - leader() answers while the slot migrates (ASK: its three keys are on
#    the importing node) and after the move, from a backend whose slot map
#    still names the old owner (MOVED): L, its term and its value;
#  - L resigns after the move: F wins with a term above L's, on the new
#    owner of the slot, nothing left on the old one; E's resource fence is
#    F's term, and a write of L's term checking it is LF001; leader() then
#    shows F.

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
my $node = $seed->node('elect_cluster',
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

# an election whose slot is not the seed's: the move is not to or from it
my $e;
for my $i (1 .. 1000)
{
	next if LeaseFenceTopology::owner_of(lkey("E$i"), @masters) == $seed;
	$e = "E$i";
	last;
}
my $vkey = "lease_fence:{$e}:value";
my $slot = $seed->cli('CLUSTER', 'KEYSLOT', lkey($e));
my $from = LeaseFenceTopology::owner_of(lkey($e), @masters);
my ($to) = grep { $_ != $from && $_ != $seed } @masters;
my ($from_id, $to_id) = map { LeaseFenceTopology::node_id($_) } $from, $to;

my $value = "leader-host:8080\n\"quoted\" 'term'";
my $leader = session($node);
my $cl = call($leader, "lease_fence.campaign(" . lit($e) . ", 600000, value => " . lit($value) . ")");
need($cl->{status}, 'acquired', "L campaigns for $e");
need($from->cli('CLUSTER', 'COUNTKEYSINSLOT', $slot), '3', "${e}'s lease, generation and value keys on its slot's node");

# F waits: subscribed on the shard of the slot, its attempt after that busy
my $follower = session($node);
my $fpid = sql_ok($follower, 'SELECT pg_backend_pid()');
{
	my $trips = acquire_round_trips($node);
	start_sql($follower, "SELECT row_to_json(c) FROM lease_fence.campaign(" . lit($e)
		  . ", 600000, wait_ms => 600000) c;");
	wait_until_waiting($node, $trips,
		sub { (split /\n/, $from->cli('PUBSUB', 'SHARDNUMSUB', "lease_fence:{$e}:released"))[1] == 1 },
		'the follower F');
}
my $trips = acquire_round_trips($node);

# the slot migrates: its keys are on the importing node
need($to->cli('CLUSTER', 'SETSLOT', $slot, 'IMPORTING', $from_id), 'OK', 'IMPORTING');
need($from->cli('CLUSTER', 'SETSLOT', $slot, 'MIGRATING', $to_id), 'OK', 'MIGRATING');
need($from->cli('MIGRATE', '127.0.0.1', $to->port, '', '0', '5000', 'KEYS', lkey($e), gkey($e), $vkey),
	'OK', "MIGRATE ${e}'s three keys");
{
	my $l = call($node, "lease_fence.leader(" . lit($e) . ")");
	is(join(' ', tf($l->{held}), $l->{identity} // 'none', $l->{term} // 'none'),
		"true $cl->{identity} $cl->{term}", 'leader() while the slot migrates: L, with its term');
	is($l->{value}, $value, "and L's value");
}
# F tried again meanwhile (at least once a second: TRYAGAIN), and waits on
LeaseFenceTopology::wait_for('F to try again while the slot migrates, or to return',
	sub { acquire_round_trips($node) > $trips || !running($fpid) });
ok(running($fpid), 'F still waits while the slot migrates');

# SETSLOT NODE as redis-cli --cluster does it: the importing node first,
# then the migrating one, then the others
for my $m ($to, $from, grep { $_ != $to && $_ != $from } @masters)
{
	need($m->cli('CLUSTER', 'SETSLOT', $slot, 'NODE', $to_id), 'OK', 'SETSLOT NODE on ' . $m->port);
}
LeaseFenceTopology::wait_for('every node to agree on the moved slot', sub {
	!grep { (LeaseFenceTopology::owner_seen_by($_, lkey($e), @masters) // 0) != $to } @masters });
is($to->cli('GET', lkey($e)), $cl->{identity}, "the slot moved: L's lease is on the new owner");

# leader() after the move, from the session that holds the old map
{
	my $l = call($leader, "lease_fence.leader(" . lit($e) . ")");
	is(join(' ', tf($l->{held}), $l->{identity} // 'none', $l->{term} // 'none'),
		"true $cl->{identity} $cl->{term}", 'leader() after the move: L, with its term');
	is($l->{value}, $value, "and L's value");
}
$trips = acquire_round_trips($node);
LeaseFenceTopology::wait_for('F to try again after the move, or to return',
	sub { acquire_round_trips($node) > $trips || !running($fpid) });
ok(running($fpid), 'F still waits after the move: it did not end busy');

my $r = call($leader, "lease_fence.resign(" . lit($e) . ", " . lit($cl->{identity}) . ")");
is($r->{status}, 'released', 'L resigns after the move: released');
my $cf = finish_row($follower);
is($cf->{status}, 'acquired', 'F wins once L resigned');
cmp_ok($cf->{term}, '>', $cl->{term}, "F's term is above L's");
is($to->cli('GET', lkey($e)), $cf->{identity} // 'none', "F's lease is on the new owner of the slot");
is($from->cli('CLUSTER', 'COUNTKEYSINSLOT', $slot), '0', 'nothing of it on the old owner');
is(sql_ok($node, "SELECT generation FROM lease_fence.resource_fences WHERE resource = " . lit($e)),
	$cf->{term} // 'none', "${e}'s resource fence is F's term");
{
	my (undef, $err) = run_sql($node,
		"BEGIN; SELECT lease_fence.set_generation($cl->{term}, " . lit($e) . "); COMMIT;");
	is(sqlstate($err), 'LF001', "a write of L's term checking ${e}'s fence: LF001");
}
{
	my $l = call($leader, "lease_fence.leader(" . lit($e) . ")");
	is(join(' ', tf($l->{held}), $l->{identity} // 'none', $l->{term} // 'none'),
		"true $cf->{identity} $cf->{term}", 'leader(): F, with its term');
	ok(!defined $l->{value}, 'no value: F campaigned without one');
}

$_->quit for $leader, $follower;
$node->stop;
done_testing();

# redis_replicated_renew_release.pl — with lease_fence.redis_min_replicas,
# renew and release wait for the replicas as acquire does (docs/guides/failover-and-generations.md,
# "Replication safety").
#
# A master with one replica.  While the replica follows, renew is renewed
# and release released.  With the replica cut off (REPLICAOF NO ONE: WAIT
# then counts no replica), a renewal the replicas do not have is
# "unreplicated" (renewed false) — a failover could undo it — and a release
# is "unknown" (the key could come back until its TTL), recorded so and
# settled at the end of the transaction; counted as renew/unreplicated and
# release/unknown.  (Before, both answered as if replicated.)

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

my $master = LeaseFenceRedis->new;
my $replica = LeaseFenceRedis->new(extra => [ '--replicaof', '127.0.0.1', $master->port ]);
LeaseFenceTopology::wait_for('the replica to sync',
	sub { $replica->cli('INFO', 'replication') =~ /master_link_status:up/ });
my $node = $master->node('replicated', "shared_preload_libraries = 'lease_fence'");
my $s = session($node);
sql_ok($s, 'SET lease_fence.redis_min_replicas = 1; SET lease_fence.redis_replica_timeout_ms = 300');

sub counter
{
	my ($op, $outcome) = @_;
	return sql_ok($node,
		"SELECT count FROM lease_fence.stats WHERE operation = '$op' AND outcome = '$outcome'");
}

# the replica follows: as before
my $r = acquire($s, 'rep', 60000);
is($r->{status}, 'acquired', 'the replica follows: acquired');
is(renew($s, 'rep', $r->{identity}, 60000)->{status}, 'renewed', 'the replica follows: renewed');
is(release($s, 'rep', $r->{identity})->{status}, 'released', 'the replica follows: released');

# the replica cut off, after a grant it acknowledged
my $held = acquire($s, 'cut', 60000);
need($held->{status}, 'acquired', 'a lease before the replica is cut off');
need($replica->cli('REPLICAOF', 'NO', 'ONE'), 'OK', 'REPLICAOF NO ONE on the replica');
LeaseFenceTopology::wait_for('the master to see no replica',
	sub { $master->cli('INFO', 'replication') =~ /connected_slaves:0/ });

my ($unrep0, $unknown0) = (counter('renew', 'unreplicated'), counter('release', 'unknown'));
my ($out, $err) = run_sql($s,
	"SELECT row_to_json(r) FROM lease_fence.renew('cut', '$held->{identity}', 60000) r");
like($out, qr/"renewed":false,"status":"unreplicated","validity_ms":null,"reason":"0 of 1 replicas acknowledged it within \d+ ms"/,
	'no replica: renew is unreplicated, renewed false, and the reason column says why');
like($err, qr/renew of resource "cut": 0 of 1 replicas acknowledged it/, 'a WARNING says how many replicas acknowledged');
is(counter('renew', 'unreplicated'), $unrep0 + 1, 'counted as renew/unreplicated');

# a release the replicas do not have is not "released"
($out, $err) = run_sql($s,
	"BEGIN;\nSELECT row_to_json(r) FROM lease_fence.release('cut', '$held->{identity}') r;\n"
	  . "SELECT state FROM lease_fence.leases WHERE identity = '$held->{identity}'");
my @lines = split /\n/, $out;
like($lines[0], qr/"released":null,"status":"unknown","reason":"0 of 1 replicas acknowledged it within \d+ ms"/,
	'no replica: release is unknown, released NULL, and the reason column says why');
is($lines[1], 'unknown', 'lease_fence.leases says unknown');
like($err, qr/release of resource "cut": 0 of 1 replicas acknowledged it/, 'a WARNING says why');
is(counter('release', 'unknown'), $unknown0 + 1, 'counted as release/unknown');
is($master->cli('EXISTS', lkey('cut')), '0', 'the master has deleted the key (only its durability is unknown)');
sql_ok($s, 'COMMIT');
is(sql_ok($s, "SELECT state FROM lease_fence.leases WHERE identity = '$held->{identity}'"),
	'released', 'the end of the transaction settles it: released');

$s->quit;
$node->stop;
$replica->stop;
$master->stop;
done_testing();

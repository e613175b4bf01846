# lease_wait_through_failover.pl — a waiting acquire goes on through a
# Sentinel failover (docs/guides/keepalive-and-waiting.md, "Waiting for a busy lease": unavailable is
# "not yet").  A master, two replicas, three redis-sentinels (the master
# called down after 1000 ms), and a node with lease_fence preloaded (the
# sentinel watch).  A holder takes R (TTL 5 s, replicated); a waiter asks
# for R with wait_ms 20 s; once it waits, the master is killed (kill -9).
# Pinned: the waiter's answer is acquired (not the unavailable or unknown
# of the attempts made while there was no master), its key is on the new
# master, and acquire/unavailable was counted meanwhile: the wait went on
# through unavailable attempts.

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

# a master, two replicas, three sentinels, and the node that finds the
# master through them, all settled
my ($master, $replicas, $sentinels, $node) = LeaseFenceTopology::sentinel_group('wait_failover');
my @replicas = @$replicas;
my @sentinels = @$sentinels;

sub counter
{
	my ($op, $outcome) = @_;
	return sql_ok($node,
		"SELECT count FROM lease_fence.stats WHERE operation = '$op' AND outcome = '$outcome'");
}

my $holder = session($node);
my $held = acquire($holder, 'R', 5000);
need($held->{status}, 'acquired', 'the holder acquires R');
LeaseFenceTopology::wait_for('both replicas to have R', sub {
	!grep { $_->cli('GET', lkey('R')) ne $held->{identity} } @replicas });

my $waiter = session($node);
my $pid = sql_ok($waiter, 'SELECT pg_backend_pid()');
$waiter->query_until(qr/lf-started/,
	"\\echo lf-started\nSELECT row_to_json(a) FROM lease_fence.acquire('R', 30000, wait_ms => 20000) a;\n");
LeaseFenceTopology::wait_for('the waiter to wait', sub {
	sql_ok($node, "SELECT wait_event_type FROM pg_stat_activity WHERE pid = $pid") eq 'Extension'
	  && (split /\n/, $master->cli('PUBSUB', 'NUMSUB', 'lease_fence:{R}:released'))[1] == 1 });
my $unavailable = counter('acquire', 'unavailable');

LeaseFenceTopology::kill9($master);

my ($line) = grep { /^\{/ } split /\n/, sql_ok($waiter, "SELECT 'lf-after'");
my $r = JSON::PP->new->decode($line // '{}');
is($r->{status}, 'acquired', 'the waiter acquires R after the failover');

LeaseFenceTopology::wait_for('every sentinel to name a new master', sub {
	!grep {
		(split /\n/, $_->cli('SENTINEL', 'get-master-addr-by-name', 'lf'))[1] == $master->port
	} @sentinels });
my (undef, $port) = split /\n/, $sentinels[0]->cli('SENTINEL', 'get-master-addr-by-name', 'lf');
my ($new) = grep { $_->port == $port } @replicas;
die 'harness: the sentinels name none of the replicas' unless $new;
is($new->cli('GET', lkey('R')), $r->{identity} // 'none', "the waiter's key is on the new master");
cmp_ok(counter('acquire', 'unavailable'), '>', $unavailable,
	'acquire/unavailable was counted meanwhile: the wait went on through it');
note 'attempts unavailable during the wait: ' . (counter('acquire', 'unavailable') - $unavailable)
  . ', unknown so far: ' . counter('acquire', 'unknown');

$_->quit for $holder, $waiter;
$node->stop;
done_testing();

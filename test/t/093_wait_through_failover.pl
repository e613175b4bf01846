# 093_wait_through_failover.pl — a waiting acquire goes on through a
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

my $master = LeaseFenceRedis->new;
my @replicas = map {
	LeaseFenceRedis->new(extra => [ '--replicaof', '127.0.0.1', $master->port ])
} 1 .. 2;
LeaseFenceTopology::wait_for('the replicas to sync', sub {
	!grep { $_->cli('INFO', 'replication') !~ /master_link_status:up/ } @replicas });
my @sentinels = map {
	LeaseFenceTopology::Sentinel->new(master_name => 'lf', master_port => $master->port)
} 1 .. 3;

my $list = join ',', map { '127.0.0.1:' . $_->port } @sentinels;
my $node = $master->node('wait_failover',
	"shared_preload_libraries = 'lease_fence'",
	"lease_fence.redis_sentinels = '$list'",
	"lease_fence.redis_sentinel_master = 'lf'",
	'lease_fence.connect_timeout_ms = 500');

# every sentinel sees the master, both replicas and the two other sentinels
# (they find each other while the node above is made; its first request
# waits until they have)
LeaseFenceTopology::wait_for('the sentinels to settle', sub {
	!grep {
		my $m = $_->cli('SENTINEL', 'master', 'lf');
		my @up = $_->cli('SENTINEL', 'replicas', 'lf') =~ /\nflags\nslave\n/g;
		$m !~ /\nflags\nmaster\n/ || $m !~ /\nnum-slaves\n2\n/
		  || $m !~ /\nnum-other-sentinels\n2\n/ || @up != 2
	} @sentinels });

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

# redis_sentinel.pl — the lease helper follows a Sentinel failover by itself.
# A master, an asynchronous replica and three redis-sentinels, all real
# servers on 127.0.0.1.  One backend, whose settings never change, acquires
# before and after the master is killed (kill -9) and, once that is over,
# after the new master is frozen (SIGSTOP): each time an acquire succeeds,
# and once every sentinel names the new master, no acquire goes anywhere
# else (each is granted there, or waits unsent until the Sentinel watch has
# seen the sentinels agree).  A lease replicated
# before the failover is busy on the new master.  With
# lease_fence.redis_min_replicas = 1, a grant the replica did not
# acknowledge is "unreplicated" and leaves no key behind.

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
use Time::HiRes qw(time usleep);

my $master = LeaseFenceRedis->new;
my $replica = LeaseFenceRedis->new(extra => [ '--replicaof', '127.0.0.1', $master->port ]);
LeaseFenceTopology::wait_for('the replica to sync',
	sub { $replica->cli('INFO', 'replication') =~ /master_link_status:up/ });
my @sentinels = map {
	LeaseFenceTopology::Sentinel->new(master_name => 'lf', master_port => $master->port)
} 1 .. 3;

# every sentinel knows the replica and the two other sentinels, and sees
# nobody down
sub settled
{
	for my $s (@sentinels)
	{
		my $m = $s->cli('SENTINEL', 'master', 'lf');
		return 0 unless $m =~ /\nnum-slaves\n1\n/ && $m =~ /\nnum-other-sentinels\n2\n/
		  && $m =~ /\nflags\nmaster\n/;
		return 0 unless $s->cli('SENTINEL', 'replicas', 'lf') =~ /\nflags\nslave\n/;
	}
	return 1;
}

# the first sentinel listed is down: the next one that answers is asked
my $dead_port = PostgreSQL::Test::Cluster::get_free_port();
my $list = join ',', "127.0.0.1:$dead_port", map { '127.0.0.1:' . $_->port } @sentinels;
my $node = $master->node('sentinel',
	"shared_preload_libraries = 'lease_fence'",
	"lease_fence.redis_sentinels = '$list'",
	"lease_fence.redis_sentinel_master = 'lf'",
	'lease_fence.connect_timeout_ms = 500');
# (the node's redis_socket, the master's, is not used with sentinels)
# (the node is made while the sentinels find each other; its first request
# waits until they have)
LeaseFenceTopology::wait_for('the sentinels to settle', \&settled);
my $s = session($node);
my $pid = sql_ok($s, 'SELECT pg_backend_pid()');

sub counter
{
	my ($op, $outcome) = @_;
	return sql_ok($s, "SELECT count FROM lease_fence.stats WHERE operation = '$op' AND outcome = '$outcome'");
}

my $r = acquire($s, 'first', 600000);
is($r->{status}, 'acquired', 'acquire through Sentinel');
is($master->cli('GET', lkey('first')), $r->{identity}, 'the lease key is on the master');
is(counter('sentinel', 'master_discovered'), '1', 'the master was discovered once');
is(sql_ok($s, "SELECT string_agg(endpoint, ',') FROM lease_fence.redis_connections() WHERE kind = 'master'"),
	'127.0.0.1:' . $master->port, 'redis_connections(): one connection of kind master, to the master the sentinels named');
is(sql_ok($s, "SELECT count(*) FROM lease_fence.redis_connections() WHERE kind NOT IN ('master', 'sentinel')"), '0',
	'redis_connections(): no connection of another kind (none to the redis_host/port settings)');

# replication safety
sql_ok($s, 'SET lease_fence.redis_min_replicas = 1; SET lease_fence.redis_replica_timeout_ms = 300');
my $rep = acquire($s, 'replicated', 600000);
is($rep->{status}, 'acquired', 'min_replicas 1, the replica up: acquired');
is($replica->cli('GET', lkey('replicated')), $rep->{identity},
	'and the replica has the lease key');

kill 'STOP', $replica->pid;
my ($out, $err) = run_sql($s, q{SELECT row_to_json(r) FROM lease_fence.acquire('cut', 600000) r});
kill 'CONT', $replica->pid;
like($out, qr/"acquired":false,"status":"unreplicated","resource":"cut","identity":null,"generation":null,"validity_ms":null,"reason":"0 of 1 replicas acknowledged the grant within 300 ms"/,
	'the replica cut off: unreplicated, acquired false, no identity, and the reason column says why');
like($err, qr/0 of 1 replicas acknowledged the grant within 300 ms; releasing it/,
	'the WARNING says how many replicas acknowledged');
is($master->cli('EXISTS', lkey('cut')), '0', 'no lease key left on the master');
is(counter('acquire', 'unreplicated'), '1', 'counted as unreplicated');
sql_ok($s, 'RESET lease_fence.redis_min_replicas');
LeaseFenceTopology::wait_for('the replica to catch up', sub {
	$replica->cli('EXISTS', lkey('cut')) eq '0'
	  && $replica->cli('INFO', 'replication') =~ /master_link_status:up/ });
LeaseFenceTopology::wait_for('the sentinels to settle again', \&settled);

# A waiting acquire and a keep-alive through Sentinel: the waiter subscribes
# on the master the sentinels name, and the keep-alive worker renews there.
{
	my $w = session($node);
	my $held = acquire($s, 'waited', 600000);
	need($held->{status}, 'acquired', 'the holder acquires "waited"');
	my $trips = acquire_round_trips($node);
	$w->query_until(qr/lf-started/,
		"\\echo lf-started\nSELECT status FROM lease_fence.acquire('waited', 10000, wait_ms => 30000);\n");
	# subscribed on the master, and its attempt after subscribing answered busy
	wait_until_waiting($node, $trips,
		sub { (split /\n/, $master->cli('PUBSUB', 'NUMSUB', 'lease_fence:{waited}:released'))[1] == 1 },
		'the waiter on the master');
	my $woken = counter('wait', 'woken');
	is(release($s, 'waited', $held->{identity})->{status}, 'released', 'wait through Sentinel: the holder releases');
	like(sql_ok($w, "SELECT 'lf-after'"), qr/^acquired$/m, 'wait through Sentinel: the waiter acquires');
	is(counter('wait', 'woken'), $woken + 1, "wait through Sentinel: woken by the release's message");
	$w->quit;

	my $k = call($s, "lease_fence.acquire('kept', 1000, scope => 'session', keepalive => true)");
	is($k->{status}, 'acquired', 'keepalive through Sentinel: acquired');
	sql_ok($s, 'SELECT pg_sleep(3)');
	is($master->cli('GET', lkey('kept')), $k->{identity}, 'keepalive through Sentinel: renewed past 3 TTLs on the master');
	is(release($s, 'kept', $k->{identity})->{status}, 'released', 'keepalive through Sentinel: released');
	$master->cli('DEL', lkey('waited'));
}

# Whether every sentinel names the master on $port, none reporting a
# failover under way or a server down: the agreement the Sentinel watch
# waits for before it names a master to the backends (src/redis/redis_watch.c)
sub sentinels_agree_on
{
	my ($port) = @_;
	return !grep {
		my (undef, $named) = split /\n/, $_->cli('SENTINEL', 'get-master-addr-by-name', 'lf');
		my $m = $_->cli('SENTINEL', 'master', 'lf');
		$named != $port || $m !~ /\nflags\n[^\n]*\n/ || $m =~ /failover_in_progress|s_down|o_down/
	} @sentinels;
}

# Acquire a new resource every 50 ms until acquired, looking before each
# whether the sentinels agree on the new master yet (once they do, no more
# looks).  Returns (acquired or not, the statuses seen before the grant,
# the rows of the acquires made once the sentinels agreed).
sub acquire_through_failover
{
	my ($resource, $new_port) = @_;
	my (@seen, @agreed, $since);
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	while (time() < $deadline)
	{
		$since //= time() if sentinels_agree_on($new_port);
		my $got = acquire($s, $resource, 600000);
		push @agreed, $got if defined $since;
		if ($got->{status} eq 'acquired')
		{
			# reported, not asserted: how long the watch and the backend took
			note sprintf('%s: acquired %.2f s after the sentinels were seen to agree',
				$resource, time() - $since) if defined $since;
			return (1, \@seen, \@agreed);
		}
		push @seen, $got->{status};
		usleep(50_000);
	}
	return (0, \@seen, \@agreed);
}

# of the acquires made once the sentinels agreed, those that went elsewhere
# than to the new master: neither granted there, nor refused unsent because
# the watch had not seen the agreement yet ("not settled")
sub elsewhere
{
	return map { "$_->{status} ($_->{reason})" }
	  grep { $_->{status} ne 'acquired' && !($_->{status} eq 'unavailable' && ($_->{reason} // '') =~ /is not settled/) } @_;
}

# 1. the master killed
LeaseFenceTopology::kill9($master);
my ($acquired, $seen, $agreed) = acquire_through_failover('after_kill', $replica->port);
ok($acquired, 'master killed: an acquire succeeds after the failover, no setting changed');
is(join('; ', elsewhere(@$agreed)), '',
	'master killed: once every sentinel named the new master, each acquire went to it or waited unsent for the watch ('
	  . scalar(@$agreed) . ' acquires)');
# the first goes on the connection that answered just before the kill,
# without a look at its socket (it answered within the last second):
# unknown there, never a grant; every later one is unavailable
my @later = @$seen;
my $first = shift @later;
like($first // 'unavailable', qr/^(unavailable|unknown)$/,
	'master killed: the first acquire is unavailable, or unknown on the connection that had just answered');
is(scalar(grep { $_ ne 'unavailable' } @later), 0,
	'until then every later acquire was unavailable (' . scalar(@later) . ' of them)');
is($replica->cli('EXISTS', lkey('after_kill')), '1', 'the lease is on the promoted replica');
is(acquire($s, 'replicated', 600000)->{status}, 'busy',
	'a lease replicated before the failover is busy on the new master');
cmp_ok(counter('sentinel', 'master_discovered'), '>=', 2, 'the new master was discovered');

# 2. once every sentinel names the new master and none is failing over, the
# old master comes back as a replica of the new one; then the new master is
# frozen
LeaseFenceTopology::wait_for('every sentinel to name the new master',
	sub { sentinels_agree_on($replica->port) });
# (made a replica at once: Sentinel would do it too, but only 8 s after it
# sees the old master back as a master)
$master->start;
need($master->cli('REPLICAOF', '127.0.0.1', $replica->port), 'OK', 'REPLICAOF the new master');
LeaseFenceTopology::wait_for('the old master to become a replica', sub {
	$master->cli('INFO', 'replication') =~ /role:slave.*master_link_status:up/s });
LeaseFenceTopology::wait_for('the sentinels to settle after the failover', \&settled);
kill 'STOP', $replica->pid;
($acquired, $seen, $agreed) = acquire_through_failover('after_stop', $master->port);
kill 'CONT', $replica->pid;
ok($acquired, 'master frozen: an acquire succeeds after the failover, no setting changed');
is(join('; ', elsewhere(@$agreed)), '',
	'master frozen: once every sentinel named the new master, each acquire went to it or waited unsent for the watch ('
	  . scalar(@$agreed) . ' acquires)');
is(scalar(grep { $_ ne 'unavailable' && $_ ne 'unknown' } @$seen), 0,
	'until then every acquire was unavailable or unknown, never refused: ' . join(',', @$seen));
is($master->cli('EXISTS', lkey('after_stop')), '1', 'the lease is on the master promoted again');
is(sql_ok($s, 'SELECT pg_backend_pid()'), $pid, 'all in one backend');

$s->quit;
$node->stop;
done_testing();

# redis_fd_accounting.pl — Redis sockets count as PostgreSQL's own open files
# (docs/guides/redis-deployments.md, "Connections").
#
# A backend keeps one Redis connection per server it used; here each Redis
# database (lease_fence.redis_db) is another server, so a session that walks
# 100 databases opens 100 connections.  Each socket is taken from the share
# of descriptors PostgreSQL allows a backend besides its own files
# (AcquireExternalFD; about a third of max_files_per_process), so with
# max_files_per_process = 100 the connections beyond that share are refused
# before anything is sent: the acquire is "unavailable", with a WARNING that
# says why, and the backend's own files (relations, sorts) still open as
# PostgreSQL expects.  (1.2 opened all 100 sockets behind PostgreSQL's back.)

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use LeaseFenceRedis;
use LeaseFenceTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $n = 100;
my $redis = LeaseFenceRedis->new(extra => [ '--databases', $n ]);
my $node = $redis->node('fd_accounting', 'max_files_per_process = 100');

# one session, 100 servers: (status, WARNING) of each acquire
my $s = session($node);
my (%status, @refusals, @refused_dbs);
for my $db (0 .. $n - 1)
{
	my ($out, $err) = run_sql($s,
		"SET lease_fence.redis_db = $db;\n"
		  . "SELECT status FROM lease_fence.acquire('fd:$db', 60000)");
	$status{$out}++;
	next unless $out eq 'unavailable';
	push @refusals, $err;
	push @refused_dbs, $db;
}
my $acquired = $status{acquired} // 0;
my $unavailable = $status{unavailable} // 0;
note("acquired $acquired, unavailable $unavailable");

ok($acquired > 0 && $acquired < $n,
	"with max_files_per_process = 100, $acquired of $n connections were opened, not all");
is($acquired + $unavailable, $n, 'every other acquire was unavailable (nothing else)');
like($refusals[0] // '', qr/too many open files for another Redis connection \(see max_files_per_process\)/,
	'the WARNING says why');

# nothing of a refused acquire was sent: no key in its Redis database
is(scalar(grep { $redis->cli('-n', $_, 'EXISTS', lkey("fd:$_")) ne '0' } @refused_dbs), 0,
	'the refused acquires left no key in their Redis databases');

# PostgreSQL's own files still open: a query that touches every relation,
# and a sort that spills to temporary files
my ($out, $err) = run_sql($s,
	"SELECT count(*) > 0 FROM pg_class c WHERE pg_relation_size(c.oid) >= 0;\n"
	  . "SET work_mem = '64kB';\n"
	  . "SELECT count(*) FROM (SELECT g FROM generate_series(1, 200000) g ORDER BY g DESC) s");
is($err, '', 'the backend still opens its own files (every relation, a sort on disk)');

# a connection already open goes on working
($out) = run_sql($s, "SET lease_fence.redis_db = 0;\nSELECT status FROM lease_fence.renew('fd:0', "
	  . "(SELECT identity FROM lease_fence.leases WHERE resource = 'fd:0'), 60000)");
is($out, 'renewed', 'a lease on an open connection is renewed as before');

$s->quit;
$node->stop;
$redis->stop;
done_testing();

# lease_input.pl — what the lease helper accepts as input, against a real,
# private redis-server.
#
# Bad input is an ERROR with SQLSTATE 22023 before anything is sent to Redis
# (docs/guides/leases.md, "The Redis lease helper"); a valid resource is 1 to 1024 bytes of
# any text, and quotes and Lua syntax in it are only bytes of a key: the
# exact key holds the lease, nothing of it runs as Lua.  What Redis holds is
# read back with redis-cli, never through the extension.
#
# The lease_* and redis_* files test the helper one behaviour each; their
# shared helpers are in test/perl/LeaseFenceTest.pm.  Redis runs on a unix
# socket and a 127.0.0.1 port of its own (test/perl/LeaseFenceRedis.pm);
# nothing leaves the host.

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
my $node = $redis->node('input');

# the control file's default_version
my ($default_version) = slurp_file("$FindBin::RealBin/../../lease_fence.control")
  =~ /^default_version = '([^']+)'/m;
is($node->safe_psql('postgres',
		"SELECT extversion FROM pg_extension WHERE extname = 'lease_fence'"),
	$default_version, "CREATE EXTENSION installs the default version, $default_version");

#
# Bad input is an ERROR (22023) before anything is sent
#
{
	my @bad = (
		[ "lease_fence.acquire('bad', 0)" => 'ttl_ms 0' ],
		[ "lease_fence.acquire('bad', -5)" => 'negative ttl_ms' ],
		[ "lease_fence.acquire(NULL, 1000)" => 'NULL resource' ],
		[ "lease_fence.acquire('', 1000)" => 'empty resource' ],
		[ "lease_fence.acquire(repeat('x', 100000), 1000)" => 'over-long resource' ],
		[ "lease_fence.acquire('bad', 1000, 0, 'forever')" => 'unknown scope' ],
		[ "lease_fence.renew('bad', repeat('a', 32), 0)" => 'renew with ttl_ms 0' ],
		[ "lease_fence.release(NULL, repeat('a', 32))" => 'release of a NULL resource' ],
	);
	for my $b (@bad)
	{
		my ($call, $what) = @$b;
		my (undef, $err) = run_sql($node, "SELECT $call");
		is(sqlstate($err), '22023', "bad input: $what is ERROR 22023");
	}
	is($redis->cli('DBSIZE'), '0', 'bad input: nothing reached Redis');
}

#
# A resource full of quotes and Lua syntax is just a key
#
{
	my $s1 = session($node);
	my $res = qq{a'"]]..)--{}:gen\n\\'); redis.call('FLUSHALL') --[[ %s \$1};
	$redis->cli('SET', 'sentinel', 'still here');
	my $r = acquire($s1, $res, 30000);
	is($r->{status}, 'acquired', 'odd resource: acquired');
	is($r->{resource}, $res, 'odd resource: returned unchanged');
	is($redis->cli('EXISTS', lkey($res)), '1', 'odd resource: redis-cli EXISTS on the exact key');
	is($redis->cli('GET', lkey($res)), $r->{identity}, 'odd resource: the exact key holds the identity');
	is($redis->cli('GET', gkey($res)), $r->{generation}, 'odd resource: the exact :gen key holds the generation');
	is($redis->cli('GET', 'sentinel'), 'still here', 'odd resource: nothing in it ran as Lua');
	my $v = lease_view($s1, $r->{identity});
	is($v && $v->{resource}, $res, 'odd resource: the leases view shows it unchanged');
	$r = release($s1, $res, $r->{identity});
	is($r->{status}, 'released', 'odd resource: released');
	is($redis->cli('EXISTS', lkey($res)), '0', 'odd resource: the exact key is gone');
	$s1->quit;
}

$node->stop;
$redis->stop;
done_testing();

# redis_server_kind.pl — the key-value server of the run is the one LF_REDIS
# names (redis, the default, or valkey), and what lease_fence reads of it
# answers the same way on both (docs/guides/redis-deployments.md, "Valkey"):
#
#  - INFO server: Valkey says server_name:valkey and valkey_version:8.x,
#    and redis_version:7.2.x, the Redis it stays compatible with; Redis has
#    no valkey_version.  The sentinel is the same server's (valkey-sentinel);
#  - ROLE: "master" on a master, "slave" on a replica — the word
#    lease_fence's Sentinel check of a named master compares;
#  - SENTINEL MASTER: a flat list of fields with "ip", "port" and "flags",
#    the ones the sentinel watch reads; get-master-addr-by-name: host, port;
#  - a lease taken through lease_fence on it, the script's answers read as
#    on Redis.

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

my $kind = $ENV{LF_REDIS} // 'redis';
$kind = 'redis' if $kind eq '';
die "LF_REDIS=$kind: expected redis or valkey\n" unless $kind =~ /^(redis|valkey)$/;

sub info_fields
{
	my ($server) = @_;
	my %f = map { /^([a-z_]+):(.*?)\r?$/ ? ($1, $2) : () } split /\n/, $server->cli('INFO', 'server');
	return \%f;
}

my $master = LeaseFenceRedis->new;
my $replica = LeaseFenceRedis->new(extra => [ '--replicaof', '127.0.0.1', $master->port ]);
LeaseFenceTopology::wait_for('the replica to sync',
	sub { $replica->cli('INFO', 'replication') =~ /master_link_status:up/ });
my $sentinel = LeaseFenceTopology::Sentinel->new(master_name => 'kind',
	master_port => $master->port, quorum => 1);

# --- which server
for my $s ([ 'the master', $master ], [ 'the sentinel', $sentinel ])
{
	my ($what, $server) = @$s;
	my $f = info_fields($server);
	if ($kind eq 'valkey')
	{
		is($f->{server_name}, 'valkey', "$what: INFO server says server_name:valkey");
		like($f->{valkey_version} // '', qr/^8\.\d+\.\d+$/, "$what: valkey_version is 8.x ($f->{valkey_version})");
		like($f->{redis_version} // '', qr/^7\.2\.\d+$/,
			"$what: redis_version is 7.2.x, the Redis Valkey answers as ($f->{redis_version})");
	}
	else
	{
		ok(!exists $f->{valkey_version} && ($f->{server_name} // '') ne 'valkey',
			"$what: INFO server has no valkey_version nor server_name:valkey");
		like($f->{redis_version} // '', qr/^\d+\.\d+\.\d+$/, "$what: redis_version ($f->{redis_version})");
	}
}

# --- ROLE, as the Sentinel check reads it (the first element)
is((split /\n/, $master->cli('ROLE'))[0], 'master', 'ROLE on the master: master');
is((split /\n/, $replica->cli('ROLE'))[0], 'slave', 'ROLE on the replica: slave');

# --- SENTINEL MASTER and get-master-addr-by-name, as the watch reads them
LeaseFenceTopology::wait_for('the sentinel to see the master',
	sub { ($sentinel->cli('SENTINEL', 'get-master-addr-by-name', 'kind') =~ tr/\n//) == 1 });
my @flat = split /\n/, $sentinel->cli('SENTINEL', 'MASTER', 'kind');
my %m = @flat;
is(scalar(@flat) % 2, 0, 'SENTINEL MASTER: a flat list of field, value');
is($m{ip}, '127.0.0.1', 'SENTINEL MASTER: ip');
is($m{port}, $master->port, 'SENTINEL MASTER: port');
is($m{flags}, 'master', 'SENTINEL MASTER: flags says master');
is($sentinel->cli('SENTINEL', 'get-master-addr-by-name', 'kind'), "127.0.0.1\n" . $master->port,
	'SENTINEL get-master-addr-by-name: host, then port');

# --- a lease through lease_fence, through the sentinel
my $node = $master->node('kind',
	"lease_fence.redis_sentinels = '127.0.0.1:" . $sentinel->port . "'",
	"lease_fence.redis_sentinel_master = 'kind'");
my $s = session($node);
my $l = acquire($s, 'kind:R', 60000);
is($l->{status}, 'acquired', "lease_fence acquires through the sentinel ($kind)");
is($master->cli('GET', lkey('kind:R')), $l->{identity}, 'the master holds the lease key with its identity');
is(acquire(session($node), 'kind:R', 60000)->{status}, 'busy', 'a second acquire of it is busy');

done_testing();

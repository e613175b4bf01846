# redis_connections.pl — lease_fence.redis_connections() lists this
# backend's open Redis connections (endpoint, kind, TLS, age, requests) and
# lease_fence.redis_disconnect() closes them (docs/reference.md), checked
# against what Redis itself sees with CLIENT LIST.
#
# Kinds over Sentinel and Cluster are asserted in redis_sentinel.pl and
# redis_cluster.pl, TLS in redis_tls.pl.

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
my $node = $redis->node('connections');
my $sock = $redis->socket_path;
my $port = $redis->port;

# the connections Redis has from PostgreSQL backends (redis-cli's own
# connection is the one running CLIENT LIST: its "cmd=client|list")
sub redis_clients
{
	my $list = $redis->cli('CLIENT', 'LIST', 'TYPE', 'normal');
	return scalar(grep { !/cmd=client\|list/ } split(/\n/, $list));
}

# the backend's connections as "kind tls endpoint" lines, sorted
sub conns
{
	my ($s) = @_;
	return sql_ok($s,
		"SELECT string_agg(concat_ws(' ', kind, tls, coalesce(endpoint, '<hidden>')), ',' ORDER BY kind, endpoint) "
		  . "FROM lease_fence.redis_connections()");
}

my $s = session($node);

is(conns($s), '', 'a new session has no Redis connection');
is(sql_ok($s, 'SELECT lease_fence.redis_disconnect()'), '0',
	'redis_disconnect() with none open returns 0');

#
# the unix socket of lease_fence.redis_socket
#
my $before = redis_clients();
my $r = acquire($s, 'conn:a', 30000);
is($r->{status}, 'acquired', 'unix socket: acquired');
is(conns($s), "server f $sock", 'unix socket: one connection, kind server, no TLS, the socket path as endpoint');
is(redis_clients(), $before + 1, 'unix socket: Redis sees one more client');
my $req1 = sql_ok($s, 'SELECT requests FROM lease_fence.redis_connections()');
cmp_ok($req1, '>=', 2, "unix socket: its requests count the connection check and the acquire ($req1)");
cmp_ok(sql_ok($s, 'SELECT age_ms FROM lease_fence.redis_connections()'), '>=', 0, 'unix socket: age_ms is not negative');
release($s, 'conn:a', $r->{identity});
my $req2 = sql_ok($s, 'SELECT requests FROM lease_fence.redis_connections()');
cmp_ok($req2, '>', $req1, "the release went over the same connection: requests grew ($req1 -> $req2)");
is(sql_ok($s, 'SELECT count(*) FROM lease_fence.redis_connections()'), '1',
	'the release reused the connection: still one');

is(sql_ok($s, 'SELECT lease_fence.redis_disconnect()'), '1', 'redis_disconnect() returns the one it closed');
is(conns($s), '', 'after redis_disconnect() none is listed');
my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
sleep(0.05) while redis_clients() != $before && time() < $deadline;
is(redis_clients(), $before, 'after redis_disconnect() Redis no longer sees the connection');

$r = acquire($s, 'conn:b', 30000);
is($r->{status}, 'acquired', 'after redis_disconnect() the next acquire connects again');
my $req3 = sql_ok($s, 'SELECT requests FROM lease_fence.redis_connections()');
cmp_ok($req3, '<', $req2, "the new connection counts its own requests from zero ($req3)");
release($s, 'conn:b', $r->{identity});

#
# a release sent after COMMIT: redis_disconnect() reads its answer first
#
{
	my $confirmed = sub {
		return sql_ok($s,
			"SELECT count FROM lease_fence.stats WHERE operation = 'cleanup' AND outcome = 'confirmed'");
	};
	my $unconfirmed = sub {
		return sql_ok($s,
			"SELECT count FROM lease_fence.stats WHERE operation = 'cleanup' AND outcome = 'unconfirmed'");
	};
	my ($c0, $u0) = ($confirmed->(), $unconfirmed->());
	sql_ok($s, 'BEGIN');
	my $t = acquire($s, 'conn:tx', 30000, 0, 'transaction');
	is($t->{status}, 'acquired', 'transaction scope: acquired');
	sql_ok($s, 'COMMIT');
	is(sql_ok($s, 'SELECT lease_fence.redis_disconnect()'), '1', 'after COMMIT: redis_disconnect() closes the connection');
	is($confirmed->(), $c0 + 1, "the release sent after COMMIT was read by redis_disconnect() and counted confirmed");
	is($unconfirmed->(), $u0, 'and not counted unconfirmed');
	is($redis->cli('EXISTS', lkey('conn:tx')), '0', 'Redis ran that release');
}

#
# TCP: host:port; and the endpoint is shown only to those who may read the
# where-to-connect settings
#
set_redis_conf($node, redis_socket => '', redis_host => '127.0.0.1', redis_port => $port);
my $t = session($node);
$r = acquire($t, 'conn:tcp', 30000);
is($r->{status}, 'acquired', 'TCP: acquired');
is(conns($t), "server f 127.0.0.1:$port", 'TCP: kind server, no TLS, host:port as endpoint');
release($t, 'conn:tcp', $r->{identity});

sql_ok($node, q{
	CREATE ROLE lf_app LOGIN;
	CREATE ROLE lf_reader LOGIN IN ROLE pg_read_all_settings;
});
my ($out, $err) = run_sql($node, 'SELECT * FROM lease_fence.redis_connections()', user => 'lf_app');
is(sqlstate($err), '42501', 'redis_connections(): EXECUTE is not PUBLIC\'s');
($out, $err) = run_sql($node, 'SELECT lease_fence.redis_disconnect()', user => 'lf_app');
is(sqlstate($err), '42501', 'redis_disconnect(): EXECUTE is not PUBLIC\'s');
sql_ok($node, q{
	GRANT EXECUTE ON FUNCTION lease_fence.acquire(text, bigint, bigint, text, bigint, boolean, boolean),
		lease_fence.release(text, text), lease_fence.redis_connections(),
		lease_fence.redis_disconnect() TO lf_app, lf_reader;
});
my $acq_list = "SELECT status FROM lease_fence.acquire('conn:role', 1000); "
  . "SELECT concat_ws(' ', kind, tls, coalesce(endpoint, '<hidden>')) FROM lease_fence.redis_connections(); "
  . "SELECT lease_fence.redis_disconnect();";
is(sql_ok($node, $acq_list, user => 'lf_app'), "acquired\nserver f <hidden>\n1",
	'a granted role sees its connection, but not where it goes');
$redis->cli('DEL', lkey('conn:role'));
is(sql_ok($node, $acq_list, user => 'lf_reader'), "acquired\nserver f 127.0.0.1:$port\n1",
	'a member of pg_read_all_settings sees the endpoint');
$redis->cli('DEL', lkey('conn:role'));

$s->quit;
$t->quit;
$node->stop;
done_testing();

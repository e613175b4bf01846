# redis_stray_reply.pl — a reply no request asked for is never taken as an
# answer (docs/security.md, "Replies from Redis, and who sees what they were about";
# lease_fence.stats: connection/desynchronized).
#
# The release after COMMIT is sent without waiting, and its answer read
# before the connection's next request.  A Redis (or a man in the middle on
# plain TCP) that sends one reply more after it would have that reply read
# as the answer to the next acquire: "acquired" for a resource another
# session holds, and every later answer off by one.  Before a request is
# sent, a connection must hold nothing beyond the replies it owes: one that
# does is closed (WARNING, counted), the bytes unread, and the request goes
# on a new connection.  A proxy (test/perl/LeaseFenceInject.pm) in front of
# a real Redis sends the extra reply ("acquired"), in the same segment as
# the release's answer, or 200 ms after it.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use JSON::PP;
use LeaseFenceInject;
use LeaseFenceRedis;
use LeaseFenceTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $redis = LeaseFenceRedis->new;
my $node = $redis->node('stray_reply');
my $proxy = LeaseFenceInject->new(upstream_port => $redis->port, dir => $redis->dir);
set_redis_conf($node, redis_socket => '', redis_host => '127.0.0.1', redis_port => $proxy->port);

# a resource another session holds
my $held = acquire($node, 'r-held', 120000);
need($held->{status}, 'acquired', 'another session holds r-held');

my $s = session($node);
my $counter = sub {
	my ($op, $outcome) = @_;
	return sql_ok($s, "SELECT count FROM lease_fence.stats WHERE operation = '$op' AND outcome = '$outcome'");
};

my $evals = 0;
for my $how ('inject', 'inject-late')
{
	# a release after COMMIT, followed by one reply more
	my $w = acquire($s, "r-warm-$how", 60000);
	release($s, "r-warm-$how", $w->{identity});
	my $desync = $counter->('connection', 'desynchronized');
	my $confirmed = $counter->('cleanup', 'confirmed');
	sql_ok($s, 'BEGIN');
	my $t = acquire($s, "r-tx-$how", 60000, 0, 'transaction');
	need($t->{status}, 'acquired', 'the transaction-scoped lease');
	$proxy->mode($how);
	sql_ok($s, 'COMMIT');
	# (the release after COMMIT is the one sent as EVAL)
	$proxy->wait_done('injected', ++$evals);

	my ($out, $err) = run_sql($s, "SELECT row_to_json(a) FROM lease_fence.acquire('r-held', 60000) a");
	my $r = JSON::PP->new->decode($out);
	is($r->{status}, 'busy', "$how: the next acquire of a held resource is busy, not the extra reply's \"acquired\"");
	like($err, qr/WARNING:  01000: closed a Redis connection that sent a reply no request asked for/,
		"$how: a WARNING says the connection was closed");
	is($counter->('connection', 'desynchronized'), $desync + 1, "$how: counted as connection/desynchronized");
	is($counter->('cleanup', 'confirmed'), $confirmed + 1, "$how: the release's own answer was read first and confirmed");
	is($redis->cli('EXISTS', lkey("r-tx-$how")), '0', "$how: the release after COMMIT ran");
	is($redis->cli('GET', lkey('r-held')), $held->{identity}, "$how: the held key is untouched");

	# no answer off by one afterwards
	my $n = acquire($s, "r-next-$how", 60000);
	is($n->{status}, 'acquired', "$how: the next free resource is acquired");
	is($redis->cli('GET', lkey("r-next-$how")), $n->{identity}, "$how: and Redis holds that acquire's identity");
	is(release($s, "r-next-$how", $n->{identity})->{status}, 'released', "$how: its release is released");
}
$s->quit;

generations_increase();

$node->stop;
$proxy->stop;
$redis->stop;
done_testing();

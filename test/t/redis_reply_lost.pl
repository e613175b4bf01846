# redis_reply_lost.pl — "applied, reply lost": Redis ran the request but the
# reply never came in time.  The outcome is unknown (NULL), never "no"
# (docs/guides/leases.md, "Statuses").
#
# CLIENT PAUSE cannot produce this case (a paused command whose client hangs
# up is dropped), so a proxy (test/perl/LeaseFenceRedis.pm) forwards every
# request to Redis at once and holds the replies back longer than
# command_timeout_ms.  With only the session's connection held, the bounded
# cleanup on a fresh connection deletes the key and the lease ends
# released; with every reply held the cleanup is unconfirmed too, and a
# later release with the same identity is definite.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use LeaseFenceRedis;
use LeaseFenceTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);

my $redis = LeaseFenceRedis->new;
# (a test of timeouts: command and cleanup 300 ms, shorter than the
# proxy's hold of 1500 ms, not node()'s 2 s)
my $node = $redis->node('reply_lost',
	'lease_fence.command_timeout_ms = 300', 'lease_fence.cleanup_timeout_ms = 300');
my $sock = $redis->socket_path;

{
	my $proxy = $redis->proxy(hold_ms => 1500);
	set_redis_conf($node,
		redis_socket => '',
		redis_host => '127.0.0.1',
		redis_port => $proxy->port);

	my $x = session($node);
	my $w = acquire($x, 'r-proxy-warm', 30000);
	is($w->{status}, 'acquired', 'through the proxy (TCP): acquired');
	release($x, 'r-proxy-warm', $w->{identity});
	$proxy->connections >= 1
	  or die "harness: the requests did not go through the proxy";

	# only the session's connection is held; the cleanup's fresh one is not
	$proxy->hold('first');
	my $r = acquire($x, 'r-proxy-1', 30000);
	is($r->{status}, 'unknown', 'applied, reply lost: acquire is unknown');
	is(tf($r->{acquired}), 'NULL', 'applied, reply lost: acquired IS NULL');
	like($r->{identity} // '', $hex32, 'applied, reply lost: identity returned');
	is($redis->cli('GET', gkey('r-proxy-1')), $r->{generation},
		'applied, reply lost: Redis did apply the acquire (its :gen key holds the generation)');
	is($redis->cli('EXISTS', lkey('r-proxy-1')), '0',
		'applied, reply lost: the bounded cleanup on a fresh connection deleted the key');
	my $v = lease_view($x, $r->{identity} // '');
	ok(!defined $v || $v->{state} eq 'released',
		'applied, reply lost: the confirmed cleanup leaves the lease released (state '
		  . ($v ? $v->{state} : 'none') . ')');
	$proxy->hold('off');

	# every reply held: the cleanup cannot be confirmed either
	$r = acquire($x, 'r-proxy-2', 30000);
	is($r->{status}, 'acquired', 'proxy passes replies again');
	release($x, 'r-proxy-2', $r->{identity});
	$proxy->hold('all');
	$r = acquire($x, 'r-proxy-2', 30000);
	is($r->{status}, 'unknown', 'all replies held: acquire is unknown');
	is($redis->cli('GET', gkey('r-proxy-2')), $r->{generation},
		'all replies held: Redis applied the acquire');
	$v = lease_view($x, $r->{identity} // '');
	is($v && $v->{state}, 'unconfirmed',
		'all replies held: the unconfirmed cleanup leaves the lease unconfirmed');
	my $cur = $redis->cli('GET', lkey('r-proxy-2'));
	ok($cur eq '' || $cur eq $r->{identity}, 'all replies held: the key is ours or absent');
	$proxy->hold('off');
	sleep($proxy->hold_ms / 1000);
	my $rel = release($x, 'r-proxy-2', $r->{identity});
	ok($rel->{status} eq 'released' || $rel->{status} eq 'not_held',
		"a later release with the same identity is definite ($rel->{status})");
	is($redis->cli('EXISTS', lkey('r-proxy-2')), '0', 'and the key is gone');
	$x->quit;

	set_redis_conf($node, redis_socket => $sock, redis_host => undef, redis_port => undef);
	$proxy->stop;
	is(acquire($node, 'r-back', 30000)->{status}, 'acquired', 'back on the unix socket');
}

generations_increase();

$node->stop;
$redis->stop;
done_testing();

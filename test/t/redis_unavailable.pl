# redis_unavailable.pl — Redis is down: "unavailable", a definite no, never
# "unknown"; then Redis restarts without persistence (docs/guides/leases.md, "Statuses").
#
# Every call on a stopped Redis is unavailable: from a session with a cached
# connection, and from a new one.  After the restart the next call
# reconnects, no generation repeats, and the old holder has lost the lease.
# Once over the unix socket, once over TCP: on a unix socket a write to a
# closed peer fails at once, but on TCP it succeeds and only the read fails,
# so there only the check of the cached connection *before* sending keeps a
# stopped Redis "unavailable" rather than "unknown".  That check is skipped
# on a connection that answered less than a second ago (a system call saved
# on every command): there a stopped Redis reads as "unknown", never as a
# success.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use List::Util qw(max);
use LeaseFenceRedis;
use LeaseFenceTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);

my $redis = LeaseFenceRedis->new;
my $node = $redis->node('unavailable');
my $sock = $redis->socket_path;

for my $transport ('unix socket', 'TCP')
{
	if ($transport eq 'TCP')
	{
		set_redis_conf($node,
			redis_socket => '',
			redis_host => '127.0.0.1',
			redis_port => $redis->port);
	}
	my $t = "($transport)";
	my $u = session($node);
	my $before = acquire($u, 'r-restart', 60000);
	is($before->{status}, 'acquired', "before the restart $t: acquired (cached connection)");
	my $w = session($node);
	my $wl = acquire($w, 'r-window', 60000);
	is($wl->{status}, 'acquired', "before the restart $t: a second session acquired");
	my $max_before = max(generations());

	$redis->stop;

	# A connection that answered less than a second ago is used without a
	# look at its socket first: the stopped Redis is found by the command
	# itself, as unknown where the request may have been sent (TCP) -- never
	# as acquired.  (The second may be over by now on a slow machine: then
	# it is unavailable, as below.)
	my $r = acquire($w, 'r-window-2', 30000);
	like($r->{status}, qr/^(unavailable|unknown)$/,
		"right after the stop $t: acquire on a connection that just answered is unavailable or unknown");
	ok(!defined $r->{acquired} || tf($r->{acquired}) eq 'false',
		"right after the stop $t: acquired is false or NULL, never true");
	$w->quit;

	# idle for more than a second: the look before sending finds it closed
	sleep(1.1);
	$r = acquire($u, 'r-unavail', 30000);
	is($r->{status}, 'unavailable',
		"unavailable $t: acquire on a cached connection to a stopped Redis is unavailable, not unknown");
	is(tf($r->{acquired}), 'false', "unavailable $t: acquired is false");
	ok(!defined $r->{identity} && !defined $r->{generation},
		"unavailable $t: identity and generation are NULL");

	$r = acquire($node, 'r-unavail', 30000);
	is($r->{status}, 'unavailable', "unavailable $t: acquire from a new session");
	is(tf($r->{acquired}), 'false', "unavailable $t (new session): acquired is false");
	$r = renew($node, 'r-restart', $before->{identity}, 30000);
	is($r->{status}, 'unavailable', "unavailable $t: renew");
	is(tf($r->{renewed}), 'false', "unavailable $t: renewed is false");
	$r = release($node, 'r-restart', $before->{identity});
	is($r->{status}, 'unavailable', "unavailable $t: release");
	is(tf($r->{released}), 'false', "unavailable $t: released is false");
	$r = renew($u, 'r-restart', $before->{identity}, 30000);
	is($r->{status}, 'unavailable', "unavailable $t: renew in the session that held a connection");
	$r = release($u, 'r-restart', $before->{identity});
	is($r->{status}, 'unavailable', "unavailable $t: release in the session that held a connection");

	$redis->start;
	need($redis->cli('DBSIZE'), '0', "Redis restarted without its data $t");

	$r = acquire($u, 'r-restart', 60000);
	is($r->{status}, 'acquired', "after the restart $t: the session reconnects and acquires");
	ok($r->{generation} > $max_before,
		"after the restart $t: the generation is above every generation handed out before");
	is($redis->cli('GET', lkey('r-restart')), $r->{identity},
		"after the restart $t: the key holds the new identity");
	is($redis->cli('GET', gkey('r-restart')), $r->{generation},
		"after the restart $t: the :gen key holds it");
	my $old = renew($node, 'r-restart', $before->{identity}, 30000);
	is($old->{status}, 'lost', "after the restart $t: the old holder has lost the lease");
	release($u, 'r-restart', $r->{identity});

	# a restart while the session is idle: its cached connection is dead,
	# found so before sending once it has been idle for a second
	$redis->stop;
	$redis->start;
	sleep(1.1);
	$r = acquire($u, 'r-restart-idle', 30000);
	is($r->{status}, 'acquired',
		"after a restart while the session was idle $t: acquired on a new connection");
	release($u, 'r-restart-idle', $r->{identity}) if $r->{identity};

	$r = acquire($node, 'r-after-restart', 30000);
	is($r->{status}, 'acquired', "after the restart $t: a new session acquires too");
	release($node, 'r-after-restart', $r->{identity});
	$u->quit;

	set_redis_conf($node, redis_socket => $sock, redis_host => undef, redis_port => undef)
	  if $transport eq 'TCP';
}

generations_increase();

$node->stop;
$redis->stop;
done_testing();

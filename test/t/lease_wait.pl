# lease_wait.pl — acquire(..., wait_ms): a busy lease is waited for, without
# polling, interruptibly (docs/guides/keepalive-and-waiting.md, "Waiting for a busy lease").
#
#  - bad wait_ms / keepalive arguments: ERROR 22023, nothing sent;
#  - the deadline is reached: busy, after the whole wait, the holder's key
#    untouched, and wait/deadline counted;
#  - woken on release: the release script's message wakes the waiter, which
#    then acquires (wait/woken counted); the latency from the release to the
#    acquire is measured and reported, not asserted;
#  - woken on expiry: a holder that never releases lets the waiter in once
#    its TTL runs out (no message: wait/woken unchanged);
#  - pg_cancel_backend and statement_timeout during a wait: ERROR 57014,
#    the subscription is gone, and nothing is held.

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
use JSON::PP;
use Time::HiRes qw(time);

my $redis = LeaseFenceRedis->new;
my $node = $redis->node('wait', "shared_preload_libraries = 'lease_fence'");

sub counter
{
	my ($operation, $outcome) = @_;
	return sql_ok($node,
		"SELECT count FROM lease_fence.stats WHERE operation = '$operation' AND outcome = '$outcome'");
}

sub channel { return "lease_fence:{$_[0]}:released"; }

# how many connections are subscribed to the release channel of $resource
sub subscribers
{
	my ($resource) = @_;
	my @lines = split /\n/, $redis->cli('PUBSUB', 'NUMSUB', channel($resource));
	return $lines[1] // 0;
}

#
# Bad input: an ERROR before anything is sent
#
foreach my $case (
	[ 'wait_ms => NULL', 'wait_ms must not be NULL' ],
	[ 'wait_ms => -1', 'wait_ms must be between 0 and 2147483647' ],
	[ 'wait_ms => 2147483648', 'wait_ms must be between 0 and 2147483647' ],
	[ 'keepalive => NULL', 'keepalive must not be NULL' ],
	[ 'keepalive => true', 'keepalive needs a session- or transaction-scoped lease' ])
{
	my ($arg, $msg) = @$case;
	my (undef, $err) = run_sql($node, "SELECT * FROM lease_fence.acquire('w-bad', 1000, $arg)");
	is(sqlstate($err), '22023', "$arg: ERROR 22023");
	like($err, qr/\Q$msg\E/, "$arg: says \"$msg\"");
}
is($redis->cli('EXISTS', lkey('w-bad')), '0', 'bad input: no lease key was written');

my $holder = session($node);

#
# The deadline is reached: busy
#
{
	my $held = acquire($holder, 'w-dead', 60000);
	need($held->{status}, 'acquired', 'the holder acquires w-dead');
	my ($waited, $deadline) = (counter('wait', 'waited'), counter('wait', 'deadline'));
	my $t0 = time();
	my $r = call($node, "lease_fence.acquire('w-dead', 1000, wait_ms => 700)");
	my $elapsed = time() - $t0;
	is($r->{status}, 'busy', 'deadline reached: status busy');
	is(tf($r->{acquired}), 'false', 'deadline reached: acquired is false');
	ok(!defined $r->{identity}, 'deadline reached: no identity');
	ok($elapsed >= 0.7, sprintf('deadline reached: it waited the whole wait_ms (%.0f ms)', $elapsed * 1000));
	is(counter('wait', 'waited'), $waited + 1, 'deadline reached: wait/waited counted once');
	is(counter('wait', 'deadline'), $deadline + 1, 'deadline reached: wait/deadline counted once');
	is($redis->cli('GET', lkey('w-dead')), $held->{identity}, "deadline reached: the holder's key is untouched");
	is(subscribers('w-dead'), 0, 'deadline reached: the subscription ended with the wait');

	# wait_ms 0 is the old busy, at once, and no wait is counted
	$r = call($node, "lease_fence.acquire('w-dead', 1000, wait_ms => 0)");
	is($r->{status}, 'busy', 'wait_ms 0: busy');
	is(counter('wait', 'waited'), $waited + 1, 'wait_ms 0: no wait counted');
	release($holder, 'w-dead', $held->{identity});
}

#
# Woken on release
#
{
	my $waiter = session($node);
	my $held = acquire($holder, 'w-rel', 60000);
	need($held->{status}, 'acquired', 'the holder acquires w-rel');
	my $woken = counter('wait', 'woken');
	my $trips = acquire_round_trips($node);
	start_sql($waiter,
		"SELECT row_to_json(a) AS lease, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS t "
		  . "FROM lease_fence.acquire('w-rel', 10000, wait_ms => 30000) a;");
	# subscribed, and its attempt after subscribing answered busy
	wait_until_waiting($node, $trips, sub { subscribers('w-rel') == 1 }, 'the waiter of w-rel');
	my $rel = sql_ok($holder,
		"SELECT r.status || ' ' || (extract(epoch FROM clock_timestamp()) * 1000000)::bigint "
		  . "FROM lease_fence.release('w-rel', " . lit($held->{identity}) . ") r");
	my ($status, $released_at) = split / /, $rel;
	need($status, 'released', 'the holder releases w-rel');
	my $out = sql_ok($waiter, "SELECT 'lf-after'");
	my ($line) = grep { /^\{/ } split /\n/, $out;
	my ($json, $acquired_at) = ($line // '') =~ /^(\{.*\})\|(\d+)$/;
	my $r = defined $json ? JSON::PP->new->decode($json) : {};
	is($r->{status}, 'acquired', 'woken on release: the waiter acquires');
	ok(defined $r->{generation} && $r->{generation} > $held->{generation},
		"woken on release: with a generation above the holder's");
	is($redis->cli('GET', lkey('w-rel')), $r->{identity} // '', "woken on release: the key holds the waiter's identity");
	is(counter('wait', 'woken'), $woken + 1, "woken on release: woken by the release's message (wait/woken)");
	is(subscribers('w-rel'), 0, 'woken on release: the subscription ended with the wait');
	diag(sprintf("release to acquire: %.2f ms", ($acquired_at - $released_at) / 1000)) if defined $acquired_at;
	release($waiter, 'w-rel', $r->{identity}) if $r->{identity};
	$waiter->quit;
}

#
# Woken on expiry: the holder never releases
#
{
	# t0 is before the holder's key was set, so the key expires at
	# t0 + 1.5 s or later (Redis's clock is this machine's): a waiter that
	# has it before then took it before the holder's lease ran out.  No
	# race: a busy machine only makes the wait longer.
	my $t0 = time();
	my $held = acquire($holder, 'w-exp', 1500);
	need($held->{status}, 'acquired', 'the holder acquires w-exp');
	my $woken = counter('wait', 'woken');
	my $r = call($node, "lease_fence.acquire('w-exp', 10000, wait_ms => 20000)");
	my $elapsed = time() - $t0;
	is($r->{status}, 'acquired', "woken on expiry: acquired once the holder's TTL ran out");
	# (1 ms less: Redis stamps the key's expiry in whole milliseconds)
	ok($elapsed >= 1.499, sprintf("woken on expiry: not before the holder's lease had run out (%.0f ms after it was asked for)", $elapsed * 1000));
	is(counter('wait', 'woken'), $woken, 'woken on expiry: no release message was involved');
	is($redis->cli('GET', lkey('w-exp')), $r->{identity} // '', "woken on expiry: the key holds the waiter's identity");
	release($node, 'w-exp', $r->{identity}) if $r->{identity};
}

#
# Cancel and statement_timeout during a wait: 57014, nothing held
#
{
	my $held = acquire($holder, 'w-cancel', 60000);
	need($held->{status}, 'acquired', 'the holder acquires w-cancel');
	my $c = session($node);
	my $pid = sql_ok($c, 'SELECT pg_backend_pid()');
	my $trips = acquire_round_trips($node);
	start_sql($c, "SELECT * FROM lease_fence.acquire('w-cancel', 10000, wait_ms => 60000);");
	wait_until_waiting($node, $trips, sub { subscribers('w-cancel') == 1 }, 'the waiter of w-cancel');
	my $t0 = time();
	need($node->safe_psql('postgres', "SELECT pg_cancel_backend($pid)"), 't', 'pg_cancel_backend');
	my (undef, $err) = run_sql($c, "SELECT 'lf-after'");
	my $took = time() - $t0;
	is(sqlstate($err), '57014', 'cancel during a wait: ERROR 57014');
	diag(sprintf('cancel to error: %d ms', $took * 1000));
	is(subscribers('w-cancel'), 0, 'cancel during a wait: the subscription is gone');
	is(sql_ok($c, "SELECT count(*) FROM lease_fence.leases WHERE resource = 'w-cancel' AND state = 'held'"),
		'0', 'cancel during a wait: the waiter holds nothing');
	is($redis->cli('GET', lkey('w-cancel')), $held->{identity}, "cancel during a wait: the holder's key is untouched");

	sql_ok($c, 'SET statement_timeout = 600');
	my $t1 = time();
	(undef, $err) = run_sql($c, "SELECT * FROM lease_fence.acquire('w-cancel', 10000, wait_ms => 60000)");
	my $t = time() - $t1;
	is(sqlstate($err), '57014', 'statement_timeout during a wait: ERROR 57014');
	ok($t >= 0.6, sprintf('statement_timeout during a wait: it waited until the timeout (%.0f ms)', $t * 1000));
	sql_ok($c, 'RESET statement_timeout');
	is(subscribers('w-cancel'), 0, 'statement_timeout during a wait: the subscription is gone');
	is(sql_ok($c, "SELECT count(*) FROM lease_fence.leases WHERE resource = 'w-cancel' AND state = 'held'"),
		'0', 'statement_timeout during a wait: the waiter holds nothing');

	# the session goes on: once the holder releases, a wait acquires
	release($holder, 'w-cancel', $held->{identity});
	my $r = call($c, "lease_fence.acquire('w-cancel', 10000, wait_ms => 5000)");
	is($r->{status}, 'acquired', 'after the interrupted waits the session acquires');
	release($c, 'w-cancel', $r->{identity}) if $r->{identity};
	$c->quit;
}

generations_increase();

$holder->quit;
$node->stop;
$redis->stop;
done_testing();

# redis_paused.pl — a Redis that stops answering mid-request: the outcome
# is unknown, never "no", and the wait ends on an interrupt (docs/guides/leases.md,
# "Statuses" and "Scopes").
#
# CLIENT PAUSE holds every command sent on the session's cached connection
# past command_timeout_ms (300 ms for the paused call, in a pause of 2 s).
# lease_fence closes the timed-out connection, so Redis drops the paused
# command: acquire, renew and release are unknown (NULL), acquire still
# returns identity and generation and runs a bounded cleanup, the key is
# ours or absent afterwards — never another identity — and it is never
# "busy".  statement_timeout and pg_cancel_backend end a wait
# for a paused Redis with 57014, and the interrupted acquire is recorded as
# unknown (or already cleaned up at the end of the failed transaction).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use JSON::PP;
use LeaseFenceRedis;
use LeaseFenceTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);

my $redis = LeaseFenceRedis->new;
# (a test of timeouts: 300 ms each, shorter than its pauses, not node()'s 2 s)
my $node = $redis->node('paused_redis',
	'lease_fence.command_timeout_ms = 300', 'lease_fence.cleanup_timeout_ms = 300');
my $json = JSON::PP->new;

#
# unknown, through CLIENT PAUSE
#
{
	my $p = session($node);
	# warm up: a cached connection, and every script loaded
	my $w = acquire($p, 'r-warm', 30000);
	renew($p, 'r-warm', $w->{identity}, 30000);
	release($p, 'r-warm', $w->{identity});

	# 300 ms is this node's value too; each paused call sets it itself, since
	# the 2 s pause must outlast it and the cleanup after it (300 ms)
	sql_ok($p, 'SET lease_fence.command_timeout_ms = 300');
	pause_redis($redis, 2000);
	my $r = acquire($p, 'r-pause', 30000);
	is($r->{status}, 'unknown', 'unknown (CLIENT PAUSE): acquire during a pause is unknown');
	is(tf($r->{acquired}), 'NULL', 'unknown (CLIENT PAUSE): acquired IS NULL');
	like($r->{reason} // '', qr/timed out/, 'unknown (CLIENT PAUSE): the reason column says why');
	like($r->{identity} // '', $hex32, 'unknown (CLIENT PAUSE): the identity is still returned');
	ok(defined $r->{generation} && $r->{generation} > 0,
		'unknown (CLIENT PAUSE): the generation is still returned');
	my $v = lease_view($p, $r->{identity} // '');
	ok($v && ($v->{state} eq 'unconfirmed' || $v->{state} eq 'released'),
		'unknown (CLIENT PAUSE): the bounded cleanup ran; the lease is not recorded as held (state '
		  . ($v ? $v->{state} : 'none') . ')');
	wait_pause_over($redis);
	sql_ok($p, 'RESET lease_fence.command_timeout_ms');
	my $cur = $redis->cli('GET', lkey('r-pause'));
	ok($cur eq '' || $cur eq $r->{identity},
		'unknown (CLIENT PAUSE): afterwards the key is ours or absent, never another identity');
	$redis->cli('DEL', lkey('r-pause')) if $cur ne '';

	$r = acquire($p, 'r-pause-after', 30000);
	is($r->{status}, 'acquired', 'after the pause, the same session reconnects and acquires');
	ok(!defined $r->{reason}, 'a granted acquire has no reason');
	release($p, 'r-pause-after', $r->{identity});

	# renew during a pause
	$r = acquire($p, 'r-pause-renew', 30000);
	my $id = $r->{identity};
	sql_ok($p, 'SET lease_fence.command_timeout_ms = 300');
	pause_redis($redis, 2000);
	$r = renew($p, 'r-pause-renew', $id, 30000);
	is($r->{status}, 'unknown', 'unknown (CLIENT PAUSE): renew during a pause is unknown');
	is(tf($r->{renewed}), 'NULL', 'unknown (CLIENT PAUSE): renewed IS NULL');
	like($r->{reason} // '', qr/timed out/, 'unknown renew: the reason column says why');
	wait_pause_over($redis);
	sql_ok($p, 'RESET lease_fence.command_timeout_ms');
	is($redis->cli('GET', lkey('r-pause-renew')), $id,
		'unknown renew: the lease key still holds our identity');
	$r = release($p, 'r-pause-renew', $id);
	is($r->{status}, 'released', 'and it is released afterwards');
	ok(!defined $r->{reason}, 'a definite release has no reason');

	# release during a pause
	$r = acquire($p, 'r-pause-rel', 30000);
	$id = $r->{identity};
	sql_ok($p, 'SET lease_fence.command_timeout_ms = 300');
	pause_redis($redis, 2000);
	$r = release($p, 'r-pause-rel', $id);
	is($r->{status}, 'unknown', 'unknown (CLIENT PAUSE): release during a pause is unknown');
	is(tf($r->{released}), 'NULL', 'unknown (CLIENT PAUSE): released IS NULL');
	like($r->{reason} // '', qr/timed out/, 'unknown release: the reason column says why');
	wait_pause_over($redis);
	sql_ok($p, 'RESET lease_fence.command_timeout_ms');
	$cur = $redis->cli('GET', lkey('r-pause-rel'));
	ok($cur eq '' || $cur eq $id, 'unknown release: the key is ours or absent afterwards');
	$r = release($p, 'r-pause-rel', $id);
	ok($r->{status} eq 'released' || $r->{status} eq 'not_held',
		"a retried release with the same identity is definite ($r->{status})");
	is($redis->cli('EXISTS', lkey('r-pause-rel')), '0', 'and the key is gone');
	$p->quit;
}

#
# statement_timeout and pg_cancel_backend work during a Redis wait: the
# call fails with 57014 and the lease is recorded as unknown (or already
# cleaned up at the end of the failed transaction)
#
{
	my $c = session($node);
	my $pid = sql_ok($c, 'SELECT pg_backend_pid()');
	my $w = acquire($c, 'r-warm2', 30000);
	release($c, 'r-warm2', $w->{identity});
	# Redis waits longer than the pause: only the interrupt can end it.  The
	# pauses (2.5 s) outlast each interrupt and the cleanup after it (about
	# 1 s) with a margin for a slow scheduler.
	sql_ok($c, 'SET lease_fence.command_timeout_ms = 20000');

	sql_ok($c, 'SET statement_timeout = 500');
	pause_redis($redis, 2500);
	my (undef, $err) = run_sql($c, "SELECT * FROM lease_fence.acquire('r-stmt-timeout', 30000)");
	is(sqlstate($err), '57014', 'statement_timeout during a paused Redis: ERROR 57014');
	sql_ok($c, 'RESET statement_timeout');
	my $out = sql_ok($c,
		"SELECT row_to_json(l) FROM lease_fence.leases l WHERE resource = 'r-stmt-timeout'");
	my $v = $out eq '' ? undef : $json->decode($out);
	ok($v && $v->{state} =~ /^(unknown|unconfirmed|released)$/,
		'statement_timeout: the interrupted acquire is in lease_fence.leases, not held (state '
		  . ($v ? $v->{state} : 'none') . ')');
	wait_pause_over($redis);
	my $cur = $redis->cli('GET', lkey('r-stmt-timeout'));
	ok($v && ($cur eq '' || $cur eq $v->{identity}),
		'statement_timeout: afterwards the key is ours or absent');
	$redis->cli('DEL', lkey('r-stmt-timeout'));

	# the timed-out connection was dropped: open a new one (and pass its
	# key_prefix owner check) first, so that the acquire below is what waits
	$w = acquire($c, 'r-warm3', 30000);
	release($c, 'r-warm3', $w->{identity});
	pause_redis($redis, 2500);
	$c->query_until(qr/started/,
		"\\echo started\nSELECT * FROM lease_fence.acquire('r-cancel', 30000);\n");
	$node->poll_query_until('postgres',
		"SELECT state = 'active' AND query LIKE '%r-cancel%' FROM pg_stat_activity WHERE pid = $pid")
	  or die 'the acquire did not start';
	sleep(0.3);    # let it reach the Redis wait
	need($node->safe_psql('postgres', "SELECT pg_cancel_backend($pid)"), 't', 'pg_cancel_backend');
	(undef, $err) = run_sql($c, "SELECT 'after cancel'");
	is(sqlstate($err), '57014', 'pg_cancel_backend during a paused Redis: ERROR 57014');
	$out = sql_ok($c, "SELECT row_to_json(l) FROM lease_fence.leases l WHERE resource = 'r-cancel'");
	$v = $out eq '' ? undef : $json->decode($out);
	ok($v && $v->{state} =~ /^(unknown|unconfirmed|released)$/,
		'cancel: the interrupted acquire is in lease_fence.leases, not held (state '
		  . ($v ? $v->{state} : 'none') . ')');
	wait_pause_over($redis);
	$cur = $redis->cli('GET', lkey('r-cancel'));
	ok($v && ($cur eq '' || $cur eq $v->{identity}), 'cancel: afterwards the key is ours or absent');
	$redis->cli('DEL', lkey('r-cancel'));
	$c->quit;
}

generations_increase();

$node->stop;
$redis->stop;
done_testing();

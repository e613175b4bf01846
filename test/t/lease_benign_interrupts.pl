# lease_benign_interrupts.pl — only a real cancel ends a wait for Redis
# (docs/guides/leases.md, "Statuses" and "Waiting for a busy lease").
#
# While a backend waits for Redis (a request in flight, or acquire(...,
# wait_ms) waiting for a busy lease), a cancel, a termination or a session
# timeout ends the wait; any other interrupt is served where the wait stands,
# and the wait goes on to Redis's answer or to its deadline:
#  1. the ProcSignalBarrier DROP DATABASE sends to every backend, at a
#     waiting acquire: DROP DATABASE returns while the acquire still waits,
#     which ends busy at its deadline, not with 57014;
#  2. the same barrier at an acquire whose request a CLIENT PAUSE holds: it
#     is acquired once Redis answers (the key holds its identity), not
#     57014 / unknown;
#  3. the idle-stats-update timeout: two quick statements that touch a table
#     arm it, the next statement's start does not disarm it, and it fires
#     10 s into a 12 s wait: busy.  The timeout came with PostgreSQL 15
#     (15.18's and 18.6's postgres.c arm it alike); on a major that disarmed
#     it when a statement starts this point would pass, but could not fail.
#     Its wait starts before 1 and is read after 1, before 2: it also
#     absorbs 1's DROP DATABASE barrier;
#  4. real interrupts still end waits: pg_cancel_backend and
#     statement_timeout give 57014, and the waiter holds nothing.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use JSON::PP;
use LeaseFenceRedis;
use LeaseFenceTest;
use LeaseFenceTopology;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $redis = LeaseFenceRedis->new;
my $node = $redis->node('benign');
sql_ok($node, 'CREATE TABLE touched (i int); INSERT INTO touched VALUES (1)');

# the end of what start_sql sent: (its row_to_json line as a hash, or {};
# the SQLSTATE of its error, or '')
sub finish
{
	my ($row, $err) = finish_row($_[0]);
	return ($row, sqlstate($err));
}

# a busy resource: its lease key holds another client's identity
sub make_busy
{
	need($redis->cli('SET', lkey($_[0]), 'another-client', 'PX', 120000), 'OK', "SET $_[0]'s lease key");
	return;
}

sub wait_subscribed
{
	my ($res) = @_;
	LeaseFenceTopology::wait_for("a subscriber to the release channel of $res", sub {
		((split /\n/, $redis->cli('PUBSUB', 'NUMSUB', "lease_fence:{$res}:released"))[1] // 0) == 1;
	});
	return;
}

# a backend's "state wait_event_type" once it waits in lease_fence
# ('active Extension') or its statement is over (state not active)
sub waiting
{
	my ($pid) = @_;
	my $row;
	LeaseFenceTopology::wait_for("backend $pid to wait or to finish", sub {
		$row = $node->safe_psql('postgres',
			"SELECT state || ' ' || coalesce(wait_event_type, '-') FROM pg_stat_activity WHERE pid = $pid");
		$row eq 'active Extension' || $row !~ /^active /;
	});
	return $row;
}

# DROP DATABASE returns once every backend has absorbed its barrier
my $drop_db = "CREATE DATABASE lf_benign;\nDROP DATABASE lf_benign;";

# 3. is started first, in a session of its own: its 12 s wait runs while 1
# does, and is read (and asserted) after 1, before 2 (whose CLIENT PAUSE
# would hold the wait's rechecks)
my $stats_session = session($node);
make_busy('b-stats');
start_sql($stats_session, "SELECT count(*) FROM touched;\nSELECT count(*) FROM touched;\n"
	  . "SELECT row_to_json(a) FROM lease_fence.acquire('b-stats', 10000, wait_ms => 12000) a;");

# 1. DROP DATABASE's barrier during a wait for a busy lease
{
	my $w = session($node);
	my $pid = sql_ok($w, 'SELECT pg_backend_pid()');
	make_busy('b-wait');
	# the wait (3 s) outlasts the subscription, CREATE and DROP DATABASE and
	# the look at pg_stat_activity (about 0.5 s) with a wide margin
	start_sql($w, "SELECT row_to_json(a) FROM lease_fence.acquire('b-wait', 10000, wait_ms => 3000) a;");
	wait_subscribed('b-wait');
	$node->safe_psql('postgres', $drop_db);
	is(waiting($pid), 'active Extension', 'busy wait: DROP DATABASE returns while the acquire still waits');
	my ($r, $state) = finish($w);
	is($state, '', 'busy wait: the barrier does not end the wait with an error (57014)');
	is($r->{status}, 'busy', 'busy wait: the acquire returns busy at its deadline');
	is($redis->cli('GET', lkey('b-wait')), 'another-client', "busy wait: the holder's key is untouched");
	$w->quit;
}

# 3. the idle-stats-update timeout (armed by the two counts) during a 12 s
# wait, started before 1
{
	my $s = $stats_session;
	my ($r, $state) = finish($s);
	is($state, '', 'idle-stats timeout: it does not end the wait with an error (57014)');
	is($r->{status}, 'busy', 'idle-stats timeout: the acquire returns busy at its deadline');
	$s->quit;
}

# 2. DROP DATABASE's barrier during a request in flight: the acquire waits
# before DROP DATABASE starts, and Redis answers it only after DROP DATABASE
# returned, at CLIENT UNPAUSE (a pause of WRITE holds every script, and not
# CLIENT UNPAUSE, as a pause of ALL would)
{
	my $s = session($node);
	my $pid = sql_ok($s, 'SELECT pg_backend_pid()');
	# warm up: a cached connection that passed its checks, the scripts loaded
	my $warm = acquire($s, 'b-warm', 30000);
	need($warm->{status}, 'acquired', 'warm-up acquire');
	release($s, 'b-warm', $warm->{identity});
	sql_ok($s, 'SET lease_fence.command_timeout_ms = 10000');
	need($redis->cli('CLIENT', 'PAUSE', 20000, 'WRITE'), 'OK', 'CLIENT PAUSE 20000 WRITE');
	start_sql($s, "SELECT row_to_json(a) FROM lease_fence.acquire('b-flight', 30000) a;");
	$node->poll_query_until('postgres',
		"SELECT state = 'active' AND wait_event_type = 'Extension' FROM pg_stat_activity WHERE pid = $pid")
	  or die 'the acquire did not wait for the paused Redis';
	$node->safe_psql('postgres', $drop_db);
	need($redis->cli('CLIENT', 'UNPAUSE'), 'OK', 'CLIENT UNPAUSE');
	my ($r, $state) = finish($s);
	is($state, '', 'in flight: the barrier does not end the request with an error (57014)');
	is($r->{status}, 'acquired', 'in flight: the acquire is acquired once Redis answers, not unknown');
	is($redis->cli('GET', lkey('b-flight')), $r->{identity} // '(none returned)', 'in flight: the key holds its identity');
	is((lease_view($s, $r->{identity} // '') // {})->{state}, 'held', 'in flight: lease_fence.leases says held');
	$s->quit;
}

# 4. a cancel and statement_timeout still end a wait
{
	my $c = session($node);
	my $pid = sql_ok($c, 'SELECT pg_backend_pid()');
	make_busy('b-cancel');
	start_sql($c, "SELECT row_to_json(a) FROM lease_fence.acquire('b-cancel', 10000, wait_ms => 60000) a;");
	wait_subscribed('b-cancel');
	need($node->safe_psql('postgres', "SELECT pg_cancel_backend($pid)"), 't', 'pg_cancel_backend');
	is((finish($c))[1], '57014', 'pg_cancel_backend during a wait: ERROR 57014');
	sql_ok($c, "SET statement_timeout = '500ms'");
	my (undef, $err) = run_sql($c, "SELECT * FROM lease_fence.acquire('b-cancel', 10000, wait_ms => 5000)");
	is(sqlstate($err), '57014', 'statement_timeout during a wait: ERROR 57014');
	sql_ok($c, 'RESET statement_timeout');
	is(sql_ok($c, "SELECT count(*) FROM lease_fence.leases WHERE resource = 'b-cancel' AND state = 'held'"),
		'0', 'cancel, statement_timeout: the interrupted waits hold nothing');
	is($redis->cli('GET', lkey('b-cancel')), 'another-client', "cancel, statement_timeout: the holder's key is untouched");
	$c->quit;
}

$node->stop;
$redis->stop;
done_testing();

# lease_election.pl — fenced leader election: campaign(), leader(), resign()
# (docs/guides/leader-election.md).
#
#  - bad input: ERROR 22023 before anything is sent;
#  - a win raises the election's resource fence to the term in the same
#    statement: a write of an older term that checks it is refused (LF001)
#    before the new leader writes anything;
#  - leader(): term, value, TTL, identity, pid and database of the leader;
#    a value is shown only while its campaign's identity leads;
#  - resign() hands on at once: a campaign waiting with wait_ms far below
#    the leader's TTL wins (it would answer busy otherwise); the win is
#    announced with NOTIFY lease_fence_leader '<term> <election>';
#  - the leader's backend exiting hands on at once, too;
#  - the frozen leader: its client process and the process that renews its
#    lease are stopped with SIGSTOP while its backend stays healthy; the
#    waiting campaign wins once the TTL has run out; woken, the old leader's
#    renew answers lost, its write checking the resource fence is LF001 and
#    its session's fenced write under the old term LF010; the new leader's
#    writes stand;
#  - a win whose transaction rolls back is released (nothing won), and the
#    fence it raised is undone with it;
#  - Redis down: unavailable (never busy, never a silent follower);
#  - counters: election / won.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use LeaseFenceRedis;
use LeaseFenceTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use JSON::PP;

my $redis = LeaseFenceRedis->new;
my $node = $redis->node('elect', "shared_preload_libraries = 'lease_fence'");
sql_ok($node, <<'SQL');
CREATE TABLE work (id int PRIMARY KEY, term bigint, who text);
SELECT lease_fence.protect('work');
SQL

sub counter
{
	my ($operation, $outcome) = @_;
	return sql_ok($node,
		"SELECT count FROM lease_fence.stats WHERE operation = '$operation' AND outcome = '$outcome'");
}

sub subscribers
{
	my ($election) = @_;
	my @lines = split /\n/, $redis->cli('PUBSUB', 'NUMSUB', "lease_fence:{$election}:released");
	return $lines[1] // 0;
}

sub campaign_sql
{
	my ($election, $ttl, %o) = @_;
	my @args = (lit($election), $ttl);
	push @args, "wait_ms => $o{wait_ms}" if exists $o{wait_ms};
	push @args, "value => " . lit($o{value}) if defined $o{value};
	push @args, "value => $o{value_sql}" if defined $o{value_sql};
	push @args, "scope => " . lit($o{scope}) if defined $o{scope};
	return "lease_fence.campaign(" . join(', ', @args) . ")";
}

sub leader { return call($node, "lease_fence.leader(" . lit($_[0]) . ")"); }

#
# Bad input: an ERROR before anything is sent
#
foreach my $case (
	[ "lease_fence.campaign(NULL, 1000)", 'resource must not be NULL' ],
	[ "lease_fence.campaign('', 1000)", 'resource must not be empty' ],
	[ "lease_fence.campaign('e-bad', 0)", 'ttl_ms must be positive' ],
	[ "lease_fence.campaign('e-bad', NULL)", 'ttl_ms must not be NULL' ],
	[ "lease_fence.campaign('e-bad', 1000, wait_ms => -1)", 'wait_ms must be between 0 and 2147483647, or NULL' ],
	[ "lease_fence.campaign('e-bad', 1000, value => repeat('x', 1025))", 'value is too long' ],
	[ "lease_fence.campaign('e-bad', 1000, value => repeat(U&'\\00E9', 513))", 'value is too long' ],
	[ "lease_fence.campaign('e-bad', 1000, scope => 'transaction')", "campaign() takes scope 'session' or 'explicit'" ],
	[ "lease_fence.campaign('e-bad', 1000, scope => 'forever')", 'unknown lease scope "forever"' ],
	[ "lease_fence.campaign('e-bad', 1000, scope => NULL)", 'scope must not be NULL' ],
	[ "lease_fence.leader(NULL)", 'resource must not be NULL' ],
	[ "lease_fence.resign('e-bad', 'nope')", 'identity is not one returned by lease_fence.acquire()' ])
{
	my ($fn, $msg) = @$case;
	my (undef, $err) = run_sql($node, "SELECT * FROM $fn");
	is(sqlstate($err), '22023', "$fn: ERROR 22023");
	like($err, qr/\Q$msg\E/, "$fn: says \"$msg\"");
}
is($redis->cli('EXISTS', lkey('e-bad')), '0', 'bad input: no lease key was written');
is(sql_ok($node, "SELECT count(*) FROM lease_fence.resource_fences WHERE resource = 'e-bad'"),
	'0', 'bad input: no resource fence was raised');
# a value of exactly 1024 bytes is taken (the bound is bytes, in the server encoding)
{
	my $r = call($node, campaign_sql('e-edge', 60000, wait_ms => 0, value => ('v' x 1024), scope => 'explicit'));
	is($r->{status}, 'acquired', 'a value of exactly 1024 bytes: acquired');
	is(length(leader('e-edge')->{value}), 1024, 'leader() shows the 1024 bytes');
	sql_ok($node, "SELECT * FROM lease_fence.resign('e-edge', " . lit($r->{identity}) . ")");
	# multibyte: 512 two-byte characters are 1024 bytes; they come back unchanged
	$r = call($node, campaign_sql('e-edge', 60000, wait_ms => 0, value_sql => "repeat(U&'\\00E9', 512)", scope => 'explicit'));
	is($r->{status}, 'acquired', 'a value of 512 two-byte characters (1024 bytes): acquired');
	is(sql_ok($node, "SELECT value = repeat(U&'\\00E9', 512) FROM lease_fence.leader('e-edge')"), 't',
		'leader() gives the multibyte value back unchanged');
	sql_ok($node, "SELECT * FROM lease_fence.resign('e-edge', " . lit($r->{identity}) . ")");
}

#
# A win raises the election's resource fence to the term
#
my $won = counter('election', 'won');
my $older = sql_ok($node, 'SELECT lease_fence.next_generation()');
my $s1 = session($node);
my $value = "host-a:5432\nline \"two\" 'three'";
my $c1 = call($s1, campaign_sql('sched', 600000, value => $value));
is($c1->{status}, 'acquired', 'the first campaign wins at once');
ok($c1->{term} > $older, 'its term is a new generation');
is(sql_ok($node, "SELECT generation FROM lease_fence.resource_fences WHERE resource = 'sched'"),
	$c1->{term}, "the win raised the election's resource fence to the term");
{
	my (undef, $err) = run_sql($node,
		"BEGIN; SELECT lease_fence.set_generation($older, 'sched'); COMMIT;");
	is(sqlstate($err), 'LF001',
		'a write of an older term checking the fence: LF001, before the leader wrote anything');
}
is(counter('election', 'won'), $won + 1, 'election / won counted');

#
# leader()
#
{
	my $pid1 = sql_ok($s1, 'SELECT pg_backend_pid()');
	my $l = leader('sched');
	is(tf($l->{held}), 'true', 'leader(): held');
	is($l->{term}, $c1->{term}, "leader(): the leader's term");
	is($l->{value}, $value, 'leader(): the value, byte for byte (newline, quotes)');
	ok($l->{ttl_ms} > 0 && $l->{ttl_ms} <= 600000, "leader(): the lease's TTL");
	is($l->{identity}, $c1->{identity}, "leader(): the identity, for a superuser");
	is($l->{pid}, $pid1, "leader(): the leader's backend");
	is($l->{database}, 'postgres', "leader(): its database");
	my $n = leader('nobody-leads');
	is(tf($n->{held}), 'false', 'leader() of an election nobody leads: not held');
	ok(!defined $n->{value} && !defined $n->{identity}, 'leader() of an election nobody leads: no value, no identity');
}

#
# A follower waits; resign() hands on at once, announced with NOTIFY
#
my $s2 = session($node);
my $listener = session($node);
sql_ok($listener, 'LISTEN lease_fence_leader');
my $c2;
{
	my $trips = acquire_round_trips($node);
	start_sql($s2, "SELECT row_to_json(c) FROM " . campaign_sql('sched', 600000, wait_ms => 30000) . " c;");
	wait_until_waiting($node, $trips, sub { subscribers('sched') == 1 }, 'the follower');
	my $r = call($s1, "lease_fence.resign('sched', " . lit($c1->{identity}) . ")");
	is($r->{status}, 'released', 'resign(): released');
	$c2 = finish_row($s2);
	is($c2->{status}, 'acquired',
		'the waiting campaign wins after resign(), long before the TTL (its wait_ms is 30 s, the TTL 600 s)');
	ok($c2->{term} > $c1->{term}, 'the new term is above the old one');
	my $l = leader('sched');
	is($l->{identity}, $c2->{identity}, 'leader(): the new leader');
	ok(!defined $l->{value}, "leader(): no value: the value key holds the old leader's, not this identity's");
	my $out = $listener->query_safe('SELECT 1');
	like($out . ($listener->{stderr} // ''), qr/lease_fence_leader.*\Q$c2->{term} sched\E/s,
		"NOTIFY lease_fence_leader '<term> sched' at the win's COMMIT");
	my (undef, $err) = run_sql($node,
		"BEGIN; SELECT lease_fence.set_generation($c1->{term}, 'sched'); COMMIT;");
	is(sqlstate($err), 'LF001', "the resigned leader's term is refused by the fence");
}

#
# The leader's backend exits: handed on at once
#
my $s3 = session($node);
{
	my $trips = acquire_round_trips($node);
	start_sql($s3, "SELECT row_to_json(c) FROM " . campaign_sql('sched', 600000, wait_ms => 30000) . " c;");
	wait_until_waiting($node, $trips, sub { subscribers('sched') == 1 }, 'the follower of the exiting leader');
	my $pid2 = sql_ok($s2, 'SELECT pg_backend_pid()');
	$s2->quit;
	wait_backend_gone($pid2);
	my $c3 = finish_row($s3);
	is($c3->{status}, 'acquired', "the leader's backend exited: the waiting campaign wins before the TTL");
	ok($c3->{term} > $c2->{term}, 'with a new term');
	sql_ok($s3, "SELECT * FROM lease_fence.resign('sched', " . lit($c3->{identity}) . ")");
}

#
# A win whose transaction rolls back holds nothing
#
{
	my $before = sql_ok($node, "SELECT generation FROM lease_fence.resource_fences WHERE resource = 'sched'");
	my $out = sql_ok($s3, "BEGIN; SELECT row_to_json(c) FROM " . campaign_sql('sched', 600000, wait_ms => 0) . " c; ROLLBACK;");
	like($out, qr/"status":"acquired"/, 'a campaign inside a transaction block wins');
	is($redis->cli('EXISTS', lkey('sched')), '0', 'its transaction rolled back: the won lease was released');
	is(sql_ok($node, "SELECT generation FROM lease_fence.resource_fences WHERE resource = 'sched'"),
		$before, 'and the fence it raised is undone');
}

#
# The frozen leader
#
# The application "front" is two processes: psql, which campaigned (its
# backend holds the session-scoped lease), and a loop renewing the lease
# every 300 ms (the heartbeat the client libraries run).  Both are stopped
# with SIGSTOP; the backend stays healthy and idle.
my $leader = session($node);
my $cl = call($leader, campaign_sql('front', 2000));
need($cl->{status}, 'acquired', 'the front leader campaigns');
my $psql_pid = $leader->{run}->{KIDS}->[0]->{PID};
ok($psql_pid && kill(0, $psql_pid), "the leader's psql process is known");
my $renew_sql = "SELECT renewed FROM lease_fence.renew('front', '$cl->{identity}', 2000)";
my $loop = IPC::Run::start(
	[ 'sh', '-c', "while psql -X -At -h '" . $node->host . "' -p " . $node->port
		  . " -d postgres -c \"$renew_sql\" >>'" . $node->basedir . "/heartbeat.log' 2>&1; do sleep 0.3; done" ]);
# the heartbeat runs: at least two renewals logged
{
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	until ((() = (slurp_file_or_empty($node->basedir . '/heartbeat.log') =~ /^t$/mg)) >= 2)
	{
		die 'harness: no heartbeat' if time() > $deadline;
		sleep(0.1);
	}
}
my $follower = session($node);
my $trips = acquire_round_trips($node);
start_sql($follower, "SELECT row_to_json(c) FROM " . campaign_sql('front', 2000, wait_ms => 120000) . " c;");
wait_until_waiting($node, $trips, sub { subscribers('front') == 1 }, 'the follower of the frozen leader');
# while the heartbeat runs, the follower keeps waiting: its lease is renewed
my $heartbeats = () = slurp_file_or_empty($node->basedir . '/heartbeat.log') =~ /^t$/mg;
{
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	until ((() = (slurp_file_or_empty($node->basedir . '/heartbeat.log') =~ /^t$/mg)) >= $heartbeats + 8)
	{
		die 'harness: the heartbeat stopped' if time() > $deadline;
		sleep(0.1);
	}
}
is(leader('front')->{identity}, $cl->{identity},
	'a healthy leader that renews keeps the election past several TTLs (8 renewals of a 2 s lease)');
kill('STOP', $psql_pid, $loop->{KIDS}->[0]->{PID}) == 2 or die "harness: SIGSTOP: $!";
my $cf = finish_row($follower);
is($cf->{status}, 'acquired', 'the leader frozen (SIGSTOP): the follower wins once its TTL ran out');
ok($cf->{term} > $cl->{term}, 'with a newer term');
sql_ok($follower, "BEGIN; SELECT lease_fence.set_generation($cf->{term}, 'front'); "
	  . "INSERT INTO work VALUES (1, $cf->{term}, 'new leader'); COMMIT;");
kill('CONT', $psql_pid, $loop->{KIDS}->[0]->{PID});
$loop->kill_kill;
{
	my $r = renew($leader, 'front', $cl->{identity}, 2000);
	is($r->{status}, 'lost', "woken, the old leader's renew answers lost");
	# its work on another connection (the libraries' fenced(): the term and the election's fence)
	my (undef, $err) = run_sql($node,
		"BEGIN; SELECT lease_fence.set_generation($cl->{term}, 'front'); INSERT INTO work VALUES (2, $cl->{term}, 'old'); COMMIT;");
	is(sqlstate($err), 'LF001', "the old leader's write on another connection, checking the election's fence: LF001");
	# on its own session, which learnt of the loss: LF010, with or without the fence
	($r, $err) = run_sql($leader,
		"BEGIN; SELECT lease_fence.set_generation($cl->{term}, 'front'); INSERT INTO work VALUES (3, $cl->{term}, 'old'); COMMIT;");
	is(sqlstate($err), 'LF010', "its session's write under the old term, checking the fence: LF010");
	($r, $err) = run_sql($leader,
		"BEGIN; SELECT lease_fence.set_generation($cl->{term}); INSERT INTO work VALUES (4, $cl->{term}, 'old'); COMMIT;");
	is(sqlstate($err), 'LF010', "its session's fenced write under the old term: LF010");
}
is(sql_ok($node, "SELECT string_agg(id || ':' || who, ',' ORDER BY id) FROM work"), '1:new leader',
	"the new leader's write stands, none of the old leader's");
sql_ok($follower, "SELECT * FROM lease_fence.resign('front', " . lit($cf->{identity}) . ")");

#
# Redis down: unavailable, never a follower
#
$redis->stop;
{
	my $r = call($node, campaign_sql('sched', 1000, wait_ms => 300));
	is($r->{status}, 'unavailable', 'Redis down: campaign answers unavailable after its wait, never busy');
	ok(!defined $r->{identity} && !defined $r->{term}, 'unavailable: no identity, no term');
	ok(defined $r->{reason}, 'unavailable: a reason');
}

done_testing();

sub slurp_file_or_empty
{
	my ($f) = @_;
	return -e $f ? slurp_file($f) : '';
}

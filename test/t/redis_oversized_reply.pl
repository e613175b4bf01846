# redis_oversized_reply.pl — a reply from Redis is bounded in memory and in
# time (docs/guides/redis-deployments.md, "What lease_fence reads from
# Redis").
#
# Against a fake Redis on loopback (test/perl/LeaseFenceFakeRedis.pm) that
# answers a lease script with an array announcing 2^31-1 elements, a string
# announcing 200 MB followed by bytes without end, or a million elements in
# arrays that are each small: the reply is refused as it arrives, the
# connection closed, the outcome unknown (unavailable when it was the
# answer to a set-up command), counted as connection/oversized_reply, with
# a WARNING that says "oversized reply", and the backend's memory does not
# grow (its VmPeak, read from /proc: a generous 32 MB).  A reply that
# drips in ends by the request's deadline, and pg_terminate_backend ends a
# backend waiting on one.
#
# Against a real Redis whose keys hold 64 MB values (the generation key, a
# lease key, the owner key): no script returns them (LFOVERSIZED: the
# acquire and holder() are refused as corrupt, XX001; the key_prefix check
# makes the acquire unavailable; claim_key_prefix() returns the first 256
# bytes of what it replaced), and the memory stays bounded all the same.
#
# And bytes from Redis become text as printable ASCII with \xNN for the
# rest: holder()'s identity and an error reply's words in a reason are valid
# UTF-8 in a UTF8 database.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use JSON::PP;
use LeaseFenceFakeRedis;
use LeaseFenceRedis;
use LeaseFenceTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);

my $limit_kb = 32 * 1024;

# the backend's peak of virtual memory, in kB (an array announced with 2^31
# elements is 16 GB of it, allocated or not)
sub vm_peak_kb
{
	my ($pid) = @_;
	my $status = slurp_file("/proc/$pid/status");
	$status =~ /^VmPeak:\s+(\d+) kB/m or die "no VmPeak in /proc/$pid/status";
	return $1;
}

my $redis = LeaseFenceRedis->new;
my $fake = LeaseFenceFakeRedis->new(dir => $redis->dir);

# (preloaded: the waiter below is followed through the cluster's latency
# counts; the counters read here are then the cluster's, read as deltas)
my $node = $redis->node('oversized', "shared_preload_libraries = 'lease_fence'",
	'lease_fence.command_timeout_ms = 2000');

#
# 1. The fake Redis: every reply beyond its bound
#
{
	my $s = session($node);
	my $pid = sql_ok($s, 'SELECT pg_backend_pid()');
	# a warm session: the library loaded, one Redis connection made and used
	need(acquire($s, 'warm', 30000)->{status}, 'acquired', 'warm-up acquire on the real Redis');
	sql_ok($s, "SET lease_fence.redis_socket = ''");
	sql_ok($s, "SET lease_fence.redis_host = '127.0.0.1'");
	sql_ok($s, "SET lease_fence.redis_port = " . $fake->port);
	my $counter = sub {
		return sql_ok($s,
			"SELECT count FROM lease_fence.stats WHERE operation = 'connection' AND outcome = 'oversized_reply'");
	};
	my $peak0 = vm_peak_kb($pid);

	my %what = (
		huge_array => 'an array announced with 2^31-1 elements',
		huge_bulk => 'a string announced with 200 MB, its bytes without end',
		wide => 'a million elements in arrays of a thousand');
	for my $mode ('huge_array', 'huge_bulk', 'wide')
	{
		$fake->mode($mode);
		my $before = $counter->();
		my ($out, $err) = run_sql($s,
			"SELECT row_to_json(a) FROM lease_fence.acquire('fake-$mode', 30000) a");
		my $r = $out eq '' ? {} : JSON::PP->new->decode($out);
		is($r->{status}, 'unknown', "$mode ($what{$mode}): the acquire is unknown");
		like($r->{reason} // '', qr/oversized reply from Redis/, "$mode: its reason says oversized reply");
		like($err, qr/WARNING:  01000: closed a Redis connection that sent an oversized reply/,
			"$mode: a WARNING says the connection was closed for an oversized reply");
		is($counter->() - $before, 2,
			"$mode: counted as connection/oversized_reply (the acquire's reply, and its cleanup's on a new connection)");
		cmp_ok(vm_peak_kb($pid) - $peak0, '<', $limit_kb,
			"$mode: the backend's memory did not grow by 32 MB or more");
	}

	# the answer to a set-up command: nothing of the lease was sent
	$fake->mode('ping_huge');
	{
		my $before = $counter->();
		my ($out, $err) = run_sql($s,
			"SELECT row_to_json(a) FROM lease_fence.acquire('fake-ping', 30000) a");
		my $r = $out eq '' ? {} : JSON::PP->new->decode($out);
		is($r->{status}, 'unavailable', 'ping_huge: an oversized answer to PING makes the acquire unavailable');
		like($r->{reason} // '', qr/oversized reply from Redis/, 'ping_huge: its reason says oversized reply');
		is($counter->(), $before + 1, 'ping_huge: counted as connection/oversized_reply');
		cmp_ok(vm_peak_kb($pid) - $peak0, '<', $limit_kb, 'ping_huge: the memory did not grow');
	}

	# a reply that drips in: the request ends by its deadline
	$fake->mode('drip');
	{
		sql_ok($s, 'SET lease_fence.command_timeout_ms = 500');
		my $r = call($s, "lease_fence.acquire('fake-drip', 30000)");
		is($r->{status}, 'unknown', 'drip: a reply that drips in leaves the acquire unknown');
		like($r->{reason} // '', qr/timed out waiting for Redis/, 'drip: by the request\'s deadline');
		sql_ok($s, 'RESET lease_fence.command_timeout_ms');
	}
	$s->quit;
}

#
# 2. Cancel and terminate are served while a reply drips in, whatever the
#    request's own deadline (60 s here)
#
$fake->mode('drip');
for my $how ('cancel', 'terminate')
{
	my $s = session($node);
	my $pid = sql_ok($s, 'SELECT pg_backend_pid()');
	sql_ok($s, "SET lease_fence.redis_socket = ''; SET lease_fence.redis_host = '127.0.0.1'; "
		  . "SET lease_fence.redis_port = " . $fake->port . "; SET lease_fence.command_timeout_ms = 60000");
	$s->query_until(qr/started/, "\\echo started\nSELECT lease_fence.acquire('fake-$how', 30000);\n");
	$node->poll_query_until('postgres',
		"SELECT wait_event_type = 'Extension' FROM pg_stat_activity WHERE pid = $pid")
	  or die 'the acquire did not wait for the fake Redis';
	if ($how eq 'cancel')
	{
		$node->safe_psql('postgres', "SELECT pg_cancel_backend($pid)");
		ok($node->poll_query_until('postgres',
				"SELECT state = 'idle' FROM pg_stat_activity WHERE pid = $pid"),
			'drip: pg_cancel_backend ends the acquire (it does not wait out the reply)');
		# (the cancelled statement's error arrives with the next one's output)
		my ($state, $err) = run_sql($s, "SELECT state FROM lease_fence.leases WHERE resource = 'fake-cancel'");
		is(sqlstate($err), '57014', 'drip: the acquire ended with 57014');
		like($state, qr/^(unconfirmed|released)$/,
			'drip: the cancelled acquire was recorded as unknown, then settled by a conditional release');
		$s->quit;
	}
	else
	{
		$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
		my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
		sleep(0.05) while kill(0, $pid) && time() < $deadline;
		ok(!kill(0, $pid), 'drip: pg_terminate_backend ends the backend (it does not wait out the reply)');
		eval { $s->quit };
	}
}

#
# 3. A real Redis whose keys hold 64 MB values
#
{
	my $big = 64 * 1024 * 1024;
	my $s = session($node);
	my $pid = sql_ok($s, 'SELECT pg_backend_pid()');
	need(acquire($s, 'warm2', 30000)->{status}, 'acquired', 'warm-up acquire');
	my $peak0 = vm_peak_kb($pid);

	# the generation key
	$redis->cli('SETRANGE', gkey('big-gen'), $big - 1, 'x');
	my ($out, $err) = run_sql($s, "SELECT * FROM lease_fence.acquire('big-gen', 30000)");
	is(sqlstate($err), 'XX001', '64 MB generation key: the acquire is refused as corrupt (XX001)');
	like($err, qr/holds more than 256 bytes/, '64 MB generation key: the error says it holds more than 256 bytes');
	(undef, $err) = run_sql($s, "SELECT * FROM lease_fence.holder('big-gen')");
	is(sqlstate($err), 'XX001', '64 MB generation key: holder() is refused as corrupt (XX001)');

	# a lease key
	$redis->cli('SETRANGE', lkey('big-lease'), $big - 1, 'x');
	is(acquire($s, 'big-lease', 30000)->{status}, 'busy', '64 MB lease key: the acquire is busy');
	is(release($s, 'big-lease', 'a' x 32)->{status}, 'not_held', '64 MB lease key: a release is not_held');
	(undef, $err) = run_sql($s, "SELECT * FROM lease_fence.holder('big-lease')");
	is(sqlstate($err), 'XX001', '64 MB lease key: holder() is refused as corrupt (XX001)');
	cmp_ok(vm_peak_kb($pid) - $peak0, '<', $limit_kb,
		'64 MB generation and lease keys: the backend\'s memory did not grow by 32 MB or more');

	# the owner key: the key_prefix check of every new connection reads it
	$redis->cli('SETRANGE', 'lease_fence:owner', $big - 1, 'x');
	$redis->cli('SETRANGE', 'lease_fence:owner', 0, 'o' x 300);
	my $s2 = session($node);
	my $pid2 = sql_ok($s2, 'SELECT pg_backend_pid()');
	sql_ok($s2, "SELECT lease_fence.next_generation()");    # the library loaded
	my $peak2 = vm_peak_kb($pid2);
	my $r = acquire($s2, 'after-owner', 30000);
	is($r->{status}, 'unavailable', '64 MB owner key: the acquire of a new connection is unavailable');
	like($r->{reason} // '', qr/LFOVERSIZED/, '64 MB owner key: the reason says the owner key is oversized');
	cmp_ok(vm_peak_kb($pid2) - $peak2, '<', $limit_kb, '64 MB owner key: the memory did not grow');
	my $old = sql_ok($s2, 'SELECT lease_fence.claim_key_prefix()');
	like($old, qr/^o{200,256}$/, 'claim_key_prefix() replaces it and returns at most its first 256 bytes');
	is(acquire($s2, 'after-owner', 30000)->{status}, 'acquired', 'then the acquire succeeds');
	cmp_ok(vm_peak_kb($pid2) - $peak2, '<', $limit_kb, 'claim_key_prefix(): the memory did not grow');
	$s->quit;
	$s2->quit;
}

#
# 3b. A message larger than the bound on a waiting acquire's subscription
#     (anyone may PUBLISH on the release channel): refused, counted, the
#     subscription given up, the wait goes on by polling and ends busy
#
{
	my $channel = lkey('sub-big') . ':released';
	$redis->cli('SET', lkey('sub-big'), 'f' x 32, 'PX', 600000);
	my $s = session($node);
	my $oversized = sub {
		return sql_ok($node,
			"SELECT count FROM lease_fence.stats WHERE operation = 'connection' AND outcome = 'oversized_reply'");
	};
	my $before = $oversized->();
	my $trips = acquire_round_trips($node);
	$s->query_until(qr/started/,
		"\\echo started\nSELECT row_to_json(a) FROM lease_fence.acquire('sub-big', 10000, wait_ms => 3000) a;\n");
	wait_until_waiting($node, $trips,
		sub { (split /\n/, $redis->cli('PUBSUB', 'NUMSUB', $channel))[1] // 0 }, 'the waiter of sub-big');
	$redis->cli('PUBLISH', $channel, 'x' x 100000);
	my ($out, $err) = run_sql($s, "SELECT 'after'");
	my ($line) = grep { /^\{/ } split /\n/, $out;
	my $r = defined $line ? JSON::PP->new->decode($line) : {};
	is($r->{status}, 'busy', 'a 100 kB message to a waiter: the wait goes on and ends busy (the key is still held)');
	like($err, qr/closed a Redis connection that sent an oversized reply/,
		'a 100 kB message to a waiter: a WARNING says oversized reply');
	is($oversized->() - $before, 1, 'a 100 kB message to a waiter: counted as connection/oversized_reply');
	$s->quit;
	$redis->cli('DEL', lkey('sub-big'));
}

#
# 4. Bytes from Redis become text only as printable ASCII (\xNN for the
#    rest), in a UTF8 database where invalid UTF-8 would otherwise be stored
#    and refused by a later conversion
#
{
	$node->safe_psql('postgres',
		"CREATE DATABASE u8 ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0");
	$node->safe_psql('postgres', "ALTER DATABASE u8 SET lease_fence.key_prefix = 'u8:'");
	$node->safe_psql('u8', 'CREATE EXTENSION lease_fence');
	$redis->cli('SET', 'u8:{utf}', "a\xffb\xc3\xa9", 'PX', 600000);
	my $id = $node->safe_psql('u8', "SELECT identity FROM lease_fence.holder('utf')");
	is($id, 'a\xffb\xc3\xa9', "holder(): a lease key's bytes that are not printable ASCII are shown as \\xNN");
	is($node->safe_psql('u8',
			"SELECT convert_from(convert_to(identity, 'UTF8'), 'UTF8') = identity FROM lease_fence.holder('utf')"),
		't', 'holder(): the identity is valid UTF-8 (a conversion takes it)');

	$fake->mode('bad_text');
	my $out = $node->safe_psql('u8', "SET lease_fence.redis_socket = ''; SET lease_fence.redis_host = '127.0.0.1'; "
		  . "SET lease_fence.redis_port = " . $fake->port . "; "
		  . "SELECT reason, convert_from(convert_to(reason, 'UTF8'), 'UTF8') = reason "
		  . "FROM lease_fence.acquire('fake-text', 30000)");
	is($out, 'Redis answered: ERR caf\xc3\xa9 \xff\xfe \x07end|t',
		"an error reply's bytes that are not printable ASCII are \\xNN in the reason, which is valid UTF-8");
}

done_testing();

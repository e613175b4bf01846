# ops_stats.pl — lease_fence.stats with lease_fence in shared_preload_libraries:
# cluster-wide counters in shared memory, one per outcome.
#
# Every counter is driven by a real operation against a private redis-server,
# and each phase starts from stats_reset() and checks every counter exactly
# (the ones it should have moved and the ones it should not).  Writes run in
# several sessions and are read from yet another one: the counters are the
# cluster's.  Rejected writes count although their transactions roll back.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use LeaseFenceRedis;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);

my $redis = LeaseFenceRedis->new;
my $sock = $redis->socket_path;

my $node = $redis->node('stats', "shared_preload_libraries = 'lease_fence'");
$node->safe_psql('postgres', q{
CREATE TABLE t (id int PRIMARY KEY, v int);
SELECT lease_fence.protect('t');
});

my @all = qw(
  acquire/acquired acquire/busy acquire/stale acquire/insufficient_validity
  acquire/unavailable acquire/unknown
  renew/renewed renew/lost renew/insufficient_validity renew/unavailable renew/unknown
  release/released release/not_held release/unavailable release/unknown
  cleanup/confirmed cleanup/unconfirmed
  commit_check/verified commit_check/LF010 commit_check/local_validity
  fence/accepted fence/LF001 fence/LF002 fence/LF003 fence/LF004
  repair/repaired
  resource_fence/accepted resource_fence/LF001 resource_fence/LF002 resource_fence/LF004);

# all counters, read from a session of their own
sub stats
{
	my %c;
	my $out = $node->safe_psql('postgres',
		q{SELECT operation || '/' || outcome, count, scope FROM lease_fence.stats});
	for my $line (split /\n/, $out)
	{
		my ($k, $v, $scope) = split /\|/, $line;
		$c{$k} = $v;
		$c{_scope} = $scope;
	}
	return \%c;
}

# check every counter: those named have the value given, all others are 0
sub counters_are
{
	my ($phase, %want) = @_;
	my $got = stats();
	for my $k (@all)
	{
		is($got->{$k}, $want{$k} // 0, "$phase: $k = " . ($want{$k} // 0));
	}
}

sub reset_stats { $node->safe_psql('postgres', 'SELECT lease_fence.stats_reset()'); }

# psql that may fail; returns (stdout, stderr)
sub try_sql
{
	my ($sql) = @_;
	my ($ret, $out, $err) = $node->psql('postgres', $sql,
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	return ($out, $err);
}

# Run SQL in a session of its own and wait until its backend has exited:
# the answer to a release sent after COMMIT without waiting is read (and
# counted) before the session's next Redis command, or at its exit.
sub sql_until_exit
{
	my ($sql) = @_;
	my $s = $node->background_psql('postgres', on_error_stop => 0);
	my $pid = $s->query_safe('SELECT pg_backend_pid()');
	my ($out) = $s->query($sql);
	my $err = $s->{stderr};
	$s->quit;
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	sleep(0.05) while kill(0, $pid) && time() < $deadline;
	return ($out, $err);
}

# wait until a CLIENT PAUSE is over (redis-cli blocks until then)
sub pause_over { $redis->cli('PING'); }

my $out = $node->safe_psql('postgres', q{SELECT DISTINCT scope FROM lease_fence.stats});
is($out, 'cluster', 'preloaded: the counters are cluster-wide');

#
# acquire: every status
#
reset_stats();
my $id1 = $node->safe_psql('postgres',
	q{SELECT identity FROM lease_fence.acquire('a1', 60000)});
$node->safe_psql('postgres', q{SELECT lease_fence.acquire('a1', 60000)});    # busy
$redis->cli('SET', 'lease_fence:{a2}:gen',
	$node->safe_psql('postgres', 'SELECT lease_fence.next_generation() + 1000'));
$node->safe_psql('postgres', q{SELECT lease_fence.acquire('a2', 60000)});    # stale
# granted with less than min_validity_ms left: released again (cleanup confirmed)
$node->safe_psql('postgres', q{SELECT lease_fence.acquire('a3', 1000, 999)});
counters_are('acquire',
	'acquire/acquired' => 1,
	'acquire/busy' => 1,
	'acquire/stale' => 1,
	'acquire/insufficient_validity' => 1,
	'cleanup/confirmed' => 1);

# unknown: Redis paused past command_timeout_ms; the bounded cleanup, also
# paused, is unconfirmed, and so is its retry when the session exits (the
# pause, 2500 ms, outlasts all three: 300 ms each, the values node() gives
# command_timeout_ms and cleanup_timeout_ms, set again in the paused session
# since the pause's margin rests on them).  The session's
# first acquire checks the key_prefix owner on its new connection, so a
# warm-up acquire does that before the pause, and the counters are reset
# after it.
($out) = try_sql(q{
SELECT identity AS warm FROM lease_fence.acquire('a4-warm', 60000) \gset
SELECT status FROM lease_fence.release('a4-warm', :'warm');
SELECT lease_fence.stats_reset();
SET lease_fence.command_timeout_ms = 300;
SET lease_fence.cleanup_timeout_ms = 300;
\! } . $LeaseFenceRedis::REDIS_CLI . q{ -s } . $sock . q{ CLIENT PAUSE 2500 ALL > /dev/null
SELECT status FROM lease_fence.acquire('a4', 60000);
});
die "warm-up failed: $out" unless $out =~ /\Areleased\n/;
$out =~ s/\A.*\n//s;
is($out, 'unknown', 'acquire during CLIENT PAUSE is unknown');
pause_over();
counters_are('acquire unknown',
	'acquire/unknown' => 1,
	'cleanup/unconfirmed' => 2);

#
# renew and release: every status but the unknown/unavailable ones
#
reset_stats();
$node->safe_psql('postgres', qq{SELECT lease_fence.renew('a1', '$id1', 60000)});           # renewed
$node->safe_psql('postgres', qq{SELECT lease_fence.renew('a1', '$id1', 60000, 60000)});    # insufficient_validity
$node->safe_psql('postgres', qq{SELECT lease_fence.renew('gone', '$id1', 60000)});         # lost
$node->safe_psql('postgres', qq{SELECT lease_fence.release('a1', '$id1')});                # released
$node->safe_psql('postgres', qq{SELECT lease_fence.release('a1', '$id1')});                # not_held
counters_are('renew/release',
	'renew/renewed' => 1,
	'renew/insufficient_validity' => 1,
	'renew/lost' => 1,
	'release/released' => 1,
	'release/not_held' => 1);

# unknown renew and release: a paused Redis.  An unknown renew leaves nothing
# to undo; an unknown release is retried at the end of its transaction, and
# again when its session exits, both within the pause: unconfirmed twice
# (the pause, 2000 ms, outlasts the three, 300 ms each, with
# command_timeout_ms and cleanup_timeout_ms set so, as above).
# Each in a session whose connection is made before the pause (a release of
# a lease nobody holds: not_held): a new connection's check (PING) would
# wait in the pause, and its request would be unavailable, not unknown
# (nothing of it sent); and a connection that timed out is never reused.
reset_stats();
my $id5 = $node->safe_psql('postgres',
	q{SELECT identity FROM lease_fence.acquire('a5', 60000)});
my $warm = "SELECT status FROM lease_fence.release('warm', repeat('a', 32)) \\g /dev/null\n"
  . "SET lease_fence.command_timeout_ms = 300;\nSET lease_fence.cleanup_timeout_ms = 300;\n"
  . "\\! $LeaseFenceRedis::REDIS_CLI -s '$sock' CLIENT PAUSE 2000 ALL >/dev/null\n";
($out) = try_sql($warm . qq{SELECT status FROM lease_fence.renew('a5', '$id5', 60000);});
is($out, 'unknown', 'renew during CLIENT PAUSE is unknown');
pause_over();
($out) = try_sql($warm . qq{SELECT status FROM lease_fence.release('a5', '$id5');});
is($out, 'unknown', 'release during CLIENT PAUSE is unknown');
pause_over();
counters_are('renew/release unknown',
	'acquire/acquired' => 1,
	'release/not_held' => 2,
	'renew/unknown' => 1,
	'release/unknown' => 1,
	'cleanup/unconfirmed' => 2);

# unavailable: Redis stopped
reset_stats();
$redis->stop;
($out) = try_sql(q{SELECT status FROM lease_fence.acquire('a6', 60000)});
is($out, 'unavailable', 'acquire with Redis stopped is unavailable');
try_sql(qq{SELECT lease_fence.renew('a6', '$id5', 60000)});
try_sql(qq{SELECT lease_fence.release('a6', '$id5')});
$redis->start;
counters_are('unavailable',
	'acquire/unavailable' => 1,
	'renew/unavailable' => 1,
	'release/unavailable' => 1);

#
# commit checks of transaction-scoped leases
#
reset_stats();
sql_until_exit(q{
SET lease_fence.commit_check = 'always';
BEGIN;
SELECT lease_fence.acquire('c1', 60000, 0, 'transaction');
COMMIT;
});
my ($cout, $cerr) = try_sql(q{
SET lease_fence.commit_check = 'always';
BEGIN;
SELECT 1 FROM lease_fence.acquire('c2', 60000, 0, 'transaction');
\! } . $LeaseFenceRedis::REDIS_CLI . q{ -s } . $sock . q{ DEL 'lease_fence:{c2}' > /dev/null
COMMIT;
});
like($cerr, qr/LF010/, 'a transaction-scoped lease deleted before COMMIT fails the commit with LF010');
counters_are('commit checks',
	'acquire/acquired' => 2,
	'commit_check/verified' => 1,
	'commit_check/LF010' => 1,
	# both leases are released at transaction end: c1 deleted, c2 already gone
	'cleanup/confirmed' => 2,
	# a transaction-scoped lease fences its resource
	'resource_fence/accepted' => 2);

# near_expiry (the default): a young lease is not asked about
reset_stats();
sql_until_exit(q{
BEGIN;
SELECT lease_fence.acquire('c3', 60000, 0, 'transaction');
COMMIT;
});
counters_are('commit checks (near_expiry)',
	'acquire/acquired' => 1,
	'commit_check/local_validity' => 1,
	'cleanup/confirmed' => 1,
	'resource_fence/accepted' => 1);

#
# fence writes, from two sessions at once; rejections roll back but count
#
reset_stats();
my $s1 = $node->background_psql('postgres');
my $s2 = $node->background_psql('postgres');
$s1->query_safe(q{BEGIN; SET LOCAL lease_fence.generation = 10;
	INSERT INTO t VALUES (1, 1), (2, 2);});
$s2->query_safe(q{BEGIN; SET LOCAL lease_fence.generation = 10;
	INSERT INTO t VALUES (3, 3);});
# an open transaction's accepted writes reach shared memory at its end
$s1->query_safe('COMMIT');
$s2->query_safe('COMMIT');
$s1->quit;
$s2->quit;
try_sql(q{BEGIN; SET LOCAL lease_fence.generation = 9; UPDATE t SET v = 0 WHERE id = 1; COMMIT;});
try_sql(q{UPDATE t SET fence = NULL WHERE id = 1});
try_sql(q{BEGIN; SET LOCAL lease_fence.generation = 10; UPDATE t SET fence = 12 WHERE id = 1; COMMIT;});
try_sql(q{TRUNCATE t});
try_sql(q{BEGIN; SET LOCAL lease_fence.generation = 9223372036854775807; UPDATE t SET v = 0 WHERE id = 1; COMMIT;});
counters_are('fence',
	'fence/accepted' => 3,
	'fence/LF001' => 1,
	'fence/LF002' => 2,
	'fence/LF003' => 1,
	'fence/LF004' => 1);

#
# resource fences, each from a session of its own; rejections count
#
reset_stats();
$node->safe_psql('postgres', q{BEGIN; SET LOCAL lease_fence.generation = 10;
	SELECT lease_fence.fence_resource('r1'); COMMIT;});
$node->safe_psql('postgres', q{BEGIN; SET LOCAL lease_fence.generation = 10;
	SELECT lease_fence.fence_resource('r2'); COMMIT;});
try_sql(q{BEGIN; SET LOCAL lease_fence.generation = 9; SELECT lease_fence.fence_resource('r1'); COMMIT;});
try_sql(q{SELECT lease_fence.fence_resource('r1')});
counters_are('resource fence',
	'resource_fence/accepted' => 2,
	'resource_fence/LF001' => 1,
	'resource_fence/LF002' => 1);

#
# reset: everything to zero, and the reset time moves
#
my $before = $node->safe_psql('postgres', q{SELECT DISTINCT reset_at FROM lease_fence.stats});
sleep 0.01;
reset_stats();
my $after = $node->safe_psql('postgres', q{SELECT DISTINCT reset_at FROM lease_fence.stats});
isnt($after, $before, 'stats_reset() moves reset_at');
counters_are('after reset');

$node->stop;
done_testing();

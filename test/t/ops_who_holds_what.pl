# ops_who_holds_what.pl — the three questions of docs/operations.md, "Who
# holds what", on a real Redis with lease_fence in shared_preload_libraries:
# lease_fence.all_leases (every lease of every backend, identity only for
# the holder's role, superusers and pg_read_all_stats), holder() (one round
# trip: held, identity, TTL, generation, and the holder's pid), latency (a
# histogram per operation), and the wait event of a backend waiting for
# Redis (LeaseFenceWait from 17 on, Extension before).
#
# Two application roles hold leases in sessions of their own; a monitoring
# role in pg_read_all_stats and a role with no privilege read them from
# sessions of their own.  The table has four slots
# (lease_fence.max_tracked_leases), any database or role may take all of
# them (max_tracked_leases_share = 100), so a fifth lease overflows:
# counted, not shown, and never refused.  Then, on a cluster with the
# defaults (1024 slots, half of them at most for one database or one
# role), one role that acquires without end in one statement cannot push
# another database's leases out.

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
my $node = $redis->node('who_holds_what', "shared_preload_libraries = 'lease_fence'",
	'lease_fence.max_tracked_leases = 4', 'lease_fence.max_tracked_leases_share = 100');
my $json = JSON::PP->new;
is($node->safe_psql('postgres', q{SELECT setting, context FROM pg_settings
	WHERE name = 'lease_fence.max_tracked_leases'}), '4|postmaster',
	'max_tracked_leases: set at server start (postmaster), here 4');
my $major = int($node->safe_psql('postgres', 'SHOW server_version_num') / 10000);

$node->safe_psql('postgres', q{
CREATE ROLE lf_a LOGIN;
CREATE ROLE lf_b LOGIN;
CREATE ROLE lf_nobody LOGIN;
CREATE ROLE lf_mon LOGIN IN ROLE pg_read_all_stats;
GRANT EXECUTE ON FUNCTION lease_fence.acquire(text, bigint, bigint, text, bigint, boolean, boolean),
                          lease_fence.renew(text, text, bigint, bigint),
                          lease_fence.release(text, text),
                          lease_fence.holder(text) TO lf_a, lf_b;
});

# a background session logged in as $user
sub session_as
{
	my ($user) = @_;
	return $node->background_psql(
		'postgres',
		on_error_stop => 0,
		extra_params => [ '-v', 'VERBOSITY=verbose', '-U', $user ]);
}

# the rows of all_leases for $resource, read by $user in a new session
sub rows_as
{
	my ($user, $resource) = @_;
	my $out = sql_ok($node,
		"SELECT row_to_json(l) FROM lease_fence.all_leases l WHERE resource = " . lit($resource),
		user => $user);
	return [ map { $json->decode($_) } grep { $_ ne '' } split /\n/, $out ];
}

sub holder_as
{
	my ($user, $resource) = @_;
	return call($node, "lease_fence.holder(" . lit($resource) . ")", user => $user);
}

my $a = session_as('lf_a');
my $b = session_as('lf_b');
my $pid_a = sql_ok($a, 'SELECT pg_backend_pid()');
my $pid_b = sql_ok($b, 'SELECT pg_backend_pid()');
my $la = acquire($a, 'job:42', 60000);
my $lb = acquire($b, 'job:43', 60000, 0, 'session');
need($la->{status}, 'acquired', 'A acquires job:42');
need($lb->{status}, 'acquired', 'B acquires job:43');

#
# all_leases: another backend's lease, with its pid and generation
#
{
	my $r = rows_as('lf_b', 'job:42');
	is(scalar(@$r), 1, 'all_leases: B\'s role sees A\'s lease on job:42 (one row)');
	is($r->[0]{pid}, $pid_a, 'all_leases: with the pid of A\'s backend');
	is($r->[0]{generation}, $la->{generation}, 'all_leases: with the generation A was granted');
	is($r->[0]{database}, 'postgres', 'all_leases: with its database');
	is($r->[0]{usename}, 'lf_a', 'all_leases: with the role that acquired it');
	is($r->[0]{scope}, 'explicit', 'all_leases: its scope');
	is($r->[0]{state}, 'held', 'all_leases: its state');
	is(tf($r->[0]{keepalive}), 'false', 'all_leases: not kept alive');
	ok(defined $r->[0]{expires_at}, 'all_leases: with its local expiry');
	is($r->[0]{identity}, undef, 'all_leases: a role without the privilege sees identity NULL');

	$r = rows_as('lf_b', 'job:43');
	is($r->[0]{identity}, $lb->{identity}, 'all_leases: B\'s role sees its own lease\'s identity');
	is($r->[0]{scope}, 'session', 'all_leases: a session-scoped lease shows as such');

	$r = rows_as('lf_nobody', 'job:42');
	is(scalar(@$r), 1, 'all_leases: a role with no grant at all sees the row');
	is($r->[0]{identity}, undef, 'all_leases: ... with identity NULL');
	$r = rows_as('lf_mon', 'job:42');
	is($r->[0]{identity}, $la->{identity}, 'all_leases: a member of pg_read_all_stats sees the identity');
	$r = rows_as($node->safe_psql('postgres', 'SELECT current_user'), 'job:42');
	is($r->[0]{identity}, $la->{identity}, 'all_leases: a superuser sees the identity');
}

#
# holder(): one round trip to Redis, and the holder's pid from the table
#
{
	my $h = holder_as('lf_a', 'job:42');
	is(tf($h->{held}), 'true', 'holder: job:42 is held');
	is($h->{identity}, $la->{identity}, 'holder: the holder\'s own role sees its identity');
	is($h->{pid}, $pid_a, 'holder: the pid of the backend that holds it');
	is($h->{database}, 'postgres', 'holder: its database');
	is($h->{generation}, $la->{generation}, 'holder: the highest generation granted for the resource');
	ok($h->{ttl_ms} > 0 && $h->{ttl_ms} <= 60000, "holder: ttl_ms is the key's PTTL ($h->{ttl_ms})");

	$h = holder_as('lf_b', 'job:42');
	is($h->{identity}, undef, 'holder: another role sees identity NULL');
	is($h->{pid}, $pid_a, 'holder: ... and the pid all the same');

	my (undef, $err) = run_sql($node, "SELECT lease_fence.holder('job:42')", user => 'lf_nobody');
	is(sqlstate($err), '42501', 'holder: EXECUTE is not PUBLIC\'s (42501)');

	# a key this cluster did not take: no pid, and identity only for the privileged
	$redis->cli('SET', lkey('job:outside'), 'f' x 32, 'PX', 60000);
	$h = holder_as('lf_a', 'job:outside');
	is(tf($h->{held}), 'true', 'holder: a lease taken outside this cluster is held');
	is($h->{pid}, undef, 'holder: ... with no pid');
	is($h->{identity}, undef, 'holder: ... and its identity NULL for an application role');
	$h = call($node, "lease_fence.holder('job:outside')");
	is($h->{identity}, 'f' x 32, 'holder: ... which a superuser sees');

	$h = holder_as('lf_a', 'job:never');
	is(tf($h->{held}), 'false', 'holder: a resource nobody holds is not held');
	is($h->{generation}, undef, 'holder: ... and has no generation yet');
	($err) = (run_sql($node, "SELECT lease_fence.holder('')", user => 'lf_a'))[1];
	is(sqlstate($err), '22023', 'holder: an empty resource is ERROR 22023');

	# a generation key that holds no generation: XX001, not an answer
	$redis->cli('SET', gkey('job:garbled'), 'not-a-generation');
	($err) = (run_sql($node, "SELECT lease_fence.holder('job:garbled')", user => 'lf_a'))[1];
	is(sqlstate($err), 'XX001', 'holder: a generation key holding no generation is ERROR XX001');
	like($err, qr/the generation key of resource "job:garbled" does not hold a generation/,
		'holder: ... which names the resource');
	$redis->cli('DEL', gkey('job:garbled'));
}

#
# release: the row leaves all_leases; holder() still knows the generation
#
{
	release($a, 'job:42', $la->{identity});
	is(scalar(@{ rows_as('lf_b', 'job:42') }), 0, 'all_leases: a released lease is gone');
	my $h = holder_as('lf_a', 'job:42');
	is(tf($h->{held}), 'false', 'holder: released, not held');
	is($h->{generation}, $la->{generation}, 'holder: the generation granted last is still reported');
}

#
# a transaction-scoped lease shows while its transaction runs
#
{
	sql_ok($a, 'BEGIN');
	my $t = acquire($a, 'job:tx', 60000, 0, 'transaction');
	my $r = rows_as('lf_b', 'job:tx');
	is($r->[0]{scope}, 'transaction', 'all_leases: a transaction-scoped lease shows during its transaction');
	sql_ok($a, 'COMMIT');
	sql_ok($a, 'SELECT 1');    # the release after COMMIT's reply is read
	is(scalar(@{ rows_as('lf_b', 'job:tx') }), 0, 'all_leases: ... and is gone after COMMIT');
}

#
# a kept-alive lease says so
#
{
	my $k = call($a, "lease_fence.acquire('job:kept', 30000, 0, 'session', keepalive => true)");
	need($k->{status}, 'acquired', 'A acquires job:kept, kept alive');
	my $r = rows_as('lf_b', 'job:kept');
	is(tf($r->[0]{keepalive}), 'true', 'all_leases: a kept-alive lease shows keepalive true');
	release($a, 'job:kept', $k->{identity});
}

#
# overflow: four slots; more leases are counted, not shown, never refused
#
{
	sql_ok($node, 'SELECT lease_fence.stats_reset()');
	my @ids;
	for my $i (1 .. 5)
	{
		my $r = acquire($a, "many:$i", 60000);
		is($r->{status}, 'acquired', "overflow: acquire many:$i is not refused");
		push @ids, $r->{identity};
	}
	my $shown = $node->safe_psql('postgres', 'SELECT count(*) FROM lease_fence.all_leases');
	is($shown, 4, 'overflow: all_leases shows max_tracked_leases rows (4)');
	my $over = $node->safe_psql('postgres',
		q{SELECT count FROM lease_fence.stats WHERE operation = 'all_leases' AND outcome = 'overflow'});
	is($over, 2, 'overflow: stats counts the two leases beyond the table (B holds one slot)');
	release($a, "many:$_", $ids[ $_ - 1 ]) for 1 .. 5;
}

#
# a backend's exit frees its slots
#
{
	$b->quit;
	wait_backend_gone($pid_b);
	is(scalar(@{ rows_as('lf_a', 'job:43') }), 0, 'all_leases: a backend that exited holds no row');
}

#
# latency: acquires, renews, releases were timed; stats_reset zeroes them
#
{
	sql_ok($node, 'SELECT lease_fence.stats_reset()');
	my $l = acquire($a, 'lat', 60000);
	renew($a, 'lat', $l->{identity}, 60000);
	release($a, 'lat', $l->{identity});
	my $out = $node->safe_psql('postgres',
		q{SELECT operation, count, bucket_count, sum_ms >= 0, scope FROM lease_fence.latency
		  WHERE le = 'Infinity' ORDER BY operation});
	is($out, join("\n",
		'acquire|1|1|t|cluster', 'commit_check|0|0|t|cluster', 'keepalive_renew|0|0|t|cluster',
		'release|1|1|t|cluster', 'renew|1|1|t|cluster'),
		'latency: one sample each for acquire, renew and release, read from another session');
	is($node->safe_psql('postgres',
			q{SELECT count(*), count(*) FILTER (WHERE bucket_count < prev OR bucket_count > count) FROM (
			    SELECT bucket_count, count,
			           lag(bucket_count, 1, 0::bigint) OVER (PARTITION BY operation ORDER BY le) AS prev
			    FROM lease_fence.latency) x}),
		'60|0', 'latency: 12 cumulative buckets per operation, none below the one before or above the count');
	sql_ok($node, 'SELECT lease_fence.stats_reset()');
	is($node->safe_psql('postgres', 'SELECT sum(count), sum(sum_ms) FROM lease_fence.latency'),
		'0|0', 'latency: stats_reset() zeroes it');

	# the keep-alive worker's renews (at a third of the TTL) are its own
	# operation, not the sessions' renew
	my $k = call($a, "lease_fence.acquire('lat:kept', 900, 0, 'session', keepalive => true)");
	need($k->{status}, 'acquired', 'A acquires lat:kept, kept alive');
	ok($node->poll_query_until('postgres',
			q{SELECT count >= 1 FROM lease_fence.latency WHERE operation = 'keepalive_renew' AND le = 'Infinity'}),
		'latency: the keep-alive worker renewed the lease: keepalive_renew counted it');
	release($a, 'lat:kept', $k->{identity});
	is($node->safe_psql('postgres',
			q{SELECT count FROM lease_fence.latency WHERE operation = 'renew' AND le = 'Infinity'}),
		'0', 'latency: none of the worker\'s renews counted as a session\'s renew');
	sql_ok($node, 'SELECT lease_fence.stats_reset()');
}

#
# the wait event of a backend waiting for Redis
#
{
	my $c = session($node);
	my $pid_c = sql_ok($c, 'SELECT pg_backend_pid()');
	my $w = acquire($c, 'warm', 30000);    # a connection, and the scripts loaded
	release($c, 'warm', $w->{identity});
	sql_ok($c, 'SET lease_fence.command_timeout_ms = 10000');
	pause_redis($redis, 3000);
	$c->query_until(qr/started/, "\\echo started\nSELECT status FROM lease_fence.acquire('waiting', 30000);\n");
	my $want = $major >= 17 ? 'LeaseFenceWait' : 'Extension';
	ok($node->poll_query_until('postgres',
			"SELECT wait_event_type || '/' || wait_event FROM pg_stat_activity WHERE pid = $pid_c",
			"Extension/$want"),
		"wait event: a backend waiting for Redis shows Extension/$want on PostgreSQL $major");
	wait_pause_over($redis);
	$c->quit;
}

$node->stop;

#
# the defaults: 1024 slots, of which one database or one role may take
# half.  A role with nothing but the acquire grant takes 1,100 session
# leases in one statement: every one acquired, 512 shown, the rest counted
# as capped; another database's leases, taken before and after, still show
# in all_leases, and holder() still finds their backend.
#
{
	# (a cluster of its own: a key_prefix of its own, as each database below)
	my $d = $redis->node('shares', "shared_preload_libraries = 'lease_fence'",
		"lease_fence.key_prefix = 'shares:'");
	is($d->safe_psql('postgres', q{SELECT string_agg(name || '=' || setting || '/' || context, ' ' ORDER BY name)
		FROM pg_settings WHERE name LIKE 'lease\_fence.max\_tracked\_leases%'}),
		'lease_fence.max_tracked_leases=1024/postmaster lease_fence.max_tracked_leases_share=50/sighup',
		'shares: the defaults, 1024 slots and half of them for one database or role (reload)');
	my $grant = q{GRANT EXECUTE ON FUNCTION lease_fence.acquire(text, bigint, bigint, text, bigint, boolean, boolean) TO lf_flood;};
	$d->safe_psql('postgres', qq{CREATE ROLE lf_flood LOGIN; $grant});
	# another database, with a key_prefix of its own
	$d->safe_psql('postgres', q{CREATE DATABASE other;
		ALTER DATABASE other SET lease_fence.key_prefix = 'other:';});
	$d->safe_psql('other', "CREATE EXTENSION lease_fence; $grant");

	my $victim = $d->background_psql('other', on_error_stop => 0);
	my $pid_v = sql_ok($victim, 'SELECT pg_backend_pid()');
	need(acquire($victim, 'victim:before', 600000, 0, 'session')->{status}, 'acquired',
		'the other database holds victim:before');

	my $flood = $d->background_psql('postgres', on_error_stop => 0,
		extra_params => [ '-U', 'lf_flood' ]);
	is(sql_ok($flood, q{SELECT count(*) FILTER (WHERE a.status = 'acquired') || '/' || count(*)
			FROM generate_series(1, 1100) i,
			LATERAL lease_fence.acquire('flood:' || i, 600000, 0, 'session') a}),
		'1100/1100', 'shares: 1,100 leases in one statement, every one acquired (none refused)');
	is($d->safe_psql('postgres', q{SELECT count(*) FROM lease_fence.all_leases WHERE usename = 'lf_flood'}),
		'512', 'shares: all_leases shows 512 of them, half the table');
	is($d->safe_psql('postgres', q{SELECT string_agg(outcome || '=' || count, ' ' ORDER BY outcome)
		FROM lease_fence.stats WHERE operation = 'all_leases'}),
		'capped=588 overflow=0', 'shares: the other 588 are counted as all_leases / capped');

	my $r = $d->safe_psql('postgres', q{SELECT pid || '/' || database FROM lease_fence.all_leases
		WHERE resource = 'victim:before'});
	is($r, "$pid_v/other", 'shares: the other database\'s earlier lease still shows');
	need(acquire($victim, 'victim:after', 600000, 0, 'session')->{status}, 'acquired',
		'the other database acquires victim:after');
	$r = $d->safe_psql('postgres', q{SELECT pid || '/' || database FROM lease_fence.all_leases
		WHERE resource = 'victim:after'});
	is($r, "$pid_v/other", 'shares: a lease the other database takes after the flood shows in all_leases');
	is($d->safe_psql('other', q{SELECT coalesce(pid::text, 'NULL') || '/' || coalesce(database, 'NULL')
		FROM lease_fence.holder('victim:after')}),
		"$pid_v/other", 'shares: holder() gives its pid and database');

	# the share is the role's too, whatever database it acquires in
	my $more = $d->background_psql('other', on_error_stop => 0, extra_params => [ '-U', 'lf_flood' ]);
	is(acquire($more, 'flood:elsewhere', 600000, 0, 'session')->{status}, 'acquired',
		'shares: the same role acquires in the other database');
	is($d->safe_psql('postgres', q{SELECT count(*) FILTER (WHERE resource = 'flood:elsewhere') || '/' || count(*)
		FROM lease_fence.all_leases WHERE usename = 'lf_flood'}),
		'0/512', 'shares: ... and it is not shown: the role has its half already');

	$more->quit;
	$flood->quit;
	$victim->quit;
	$d->stop;
}

#
# without shared_preload_libraries: the session's own leases only
#
{
	# a cluster of its own: a key_prefix of its own (the first one's is claimed)
	my $plain = $redis->node('not_preloaded', "lease_fence.key_prefix = 'np:'");
	my $s = session($plain);
	my $pid_s = sql_ok($s, 'SELECT pg_backend_pid()');
	my $l = acquire($s, 'own', 60000);
	my $out = sql_ok($s, "SELECT pid, resource, generation, identity FROM lease_fence.all_leases");
	is($out, "$pid_s|own|$l->{generation}|$l->{identity}",
		'not preloaded: all_leases shows the session\'s own lease, with its pid');
	is($plain->safe_psql('postgres', 'SELECT count(*) FROM lease_fence.all_leases'), '0',
		'not preloaded: another session sees none of it');
	my $h = call($plain, "lease_fence.holder('own')");
	is($h->{identity}, $l->{identity}, 'not preloaded: holder() still asks Redis');
	is($h->{pid}, undef, 'not preloaded: ... with no pid (no table to find it in)');
	release($s, 'own', $l->{identity});
	$s->quit;
	$plain->stop;
}

$redis->stop;
done_testing();

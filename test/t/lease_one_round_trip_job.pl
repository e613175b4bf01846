# lease_one_round_trip_job.pl — the fenced job in one round trip and two
# Redis commands, and its edges (docs/design.md, "The commit check").
#
#   BEGIN; SELECT ... FROM lease_fence.acquire(r, ttl, scope => 'transaction');
#   UPDATE ...; COMMIT
#
# sends the acquire and, after COMMIT, the release: under
# lease_fence.commit_check = near_expiry (the default) COMMIT asks Redis
# nothing while more than min_validity_ms + ttl_ms / 2 of the lease is left
# by the backend's own clock; 'always' asks every time.  Then, at the edges:
#   - a commit that fails after the point where the check would run (a
#     serialization failure at COMMIT): nothing is written, the lease is
#     released at abort, the next holder's generation is higher;
#   - a crash around the commit (the backend killed while COMMIT waits on
#     Redis in the commit check, or after a COMMIT whose release Redis has
#     not run yet): before the commit record nothing is written, after it
#     the write survives; either way the key expires by its TTL and the next
#     holder's generation is higher, and it sees whatever was committed;
#   - the release after COMMIT is sent without waiting for its answer, read
#     before the session's next Redis command; an unknown one leaves the
#     commit standing, the key to its TTL, and the next holder waits.
# A newer holder racing the commit is fence_resource_transaction_lease.pl.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use LeaseFenceRedis;
use LeaseFenceTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep time);

my $redis = LeaseFenceRedis->new;
my $node = $redis->node('job', 'restart_after_crash = on');
$node->safe_psql('postgres', q{
CREATE TABLE item (id int PRIMARY KEY, v bigint NOT NULL DEFAULT 0, fence bigint);
INSERT INTO item (id) SELECT generate_series(1, 10);
SELECT lease_fence.protect('item');
});

# Redis commands of each kind so far
sub calls
{
	my ($cmd) = @_;
	my $info = $redis->cli('INFO', 'commandstats');
	return $info =~ /^cmdstat_\Q$cmd\E:calls=(\d+),/m ? $1 : 0;
}

sub item
{
	my ($id) = @_;
	return $node->safe_psql('postgres', "SELECT v || ':' || coalesce(fence::text, '') FROM item WHERE id = $id");
}

# the job, in one session: BEGIN; acquire; UPDATE; COMMIT
sub job
{
	my ($s, $res, $id, $ttl, $min) = @_;
	sql_ok($s, 'BEGIN');
	my $r = acquire($s, $res, $ttl, $min // 0, 'transaction');
	sql_ok($s, "UPDATE item SET v = v + 1 WHERE id = $id");
	my (undef, $err) = run_sql($s, 'COMMIT');
	return ($r, $err);
}

#
# two Redis commands a job under near_expiry, three under 'always'
#
{
	my $s = session($node);
	# the connection, its owner check, and each script loaded once
	sql_ok($s, "SET lease_fence.commit_check = 'always'");
	job($s, 'warm', 1, 5000);
	sql_ok($s, 'RESET lease_fence.commit_check');
	my $before = calls('evalsha') + calls('eval');
	my ($r, $err) = job($s, 'job:1', 1, 5000);
	is($r->{status}, 'acquired', 'near_expiry: the job acquired');
	is($err, '', 'near_expiry: its COMMIT succeeded');
	is(calls('evalsha') + calls('eval') - $before, 2,
		'near_expiry: the job sent two scripts to Redis (acquire, release): no commit check');
	is(item(1), "2:$r->{generation}", "near_expiry: the job's write committed under its generation");
	is($redis->cli('EXISTS', lkey('job:1')), '0', 'near_expiry: the lease was released after COMMIT');

	sql_ok($s, "SET lease_fence.commit_check = 'always'");
	$before = calls('evalsha') + calls('eval');
	($r, $err) = job($s, 'job:1', 1, 5000);
	is($err, '', "always: the job's COMMIT succeeded");
	is(calls('evalsha') + calls('eval') - $before, 3,
		'always: the job sent three scripts to Redis (acquire, commit check, release)');
	sql_ok($s, 'RESET lease_fence.commit_check');

	# min_validity_ms close to the TTL: asked even when young
	$before = calls('evalsha') + calls('eval');
	($r, $err) = job($s, 'job:1', 1, 5000, 3000);
	is($err, '', 'near_expiry, min_validity_ms 3000 of 5000: COMMIT succeeded');
	is(calls('evalsha') + calls('eval') - $before, 3,
		'near_expiry, min_validity_ms 3000 of 5000: the commit check asked Redis (less than 3000 + 2500 left)');

	# the young lease whose key was deleted by hand commits (not detected);
	# the resource fence still orders the next holder after it
	# (fence_resource_transaction_lease.pl)
	sql_ok($s, 'BEGIN');
	$r = acquire($s, 'job:lost', 60000, 0, 'transaction');
	sql_ok($s, 'UPDATE item SET v = v + 1 WHERE id = 2');
	$redis->cli('DEL', lkey('job:lost'));
	(undef, $err) = run_sql($s, 'COMMIT');
	is($err, '', 'near_expiry: a young lease whose key was deleted by hand is not asked about: COMMIT succeeds');
	is(item(2), "1:$r->{generation}", 'near_expiry: that write committed under its generation');
	my $n = acquire($node, 'job:lost', 5000);
	cmp_ok($n->{generation}, '>', $r->{generation}, 'near_expiry: the next holder has a higher generation');
	$node->safe_psql('postgres',
		"BEGIN; SET LOCAL lease_fence.generation = $n->{generation}; UPDATE item SET v = v + 1 WHERE id = 2; COMMIT;");
	my ($ret, $out, $ferr) = $node->psql('postgres',
		"BEGIN; SET LOCAL lease_fence.generation = $r->{generation}; UPDATE item SET v = v + 1 WHERE id = 2; COMMIT;",
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	like($ferr, qr/LF001/, "once the next holder wrote the row, the old generation is refused (LF001)");
	release($node, 'job:lost', $n->{identity});
	$s->quit;
}

#
# a job whose acquire is busy writes nothing: its write names the fence as
# current_generation(), NULL without a lease (LF002)
#
{
	my $holder = acquire($node, 'job:busy', 60000);
	my $s = session($node);
	sql_ok($s, 'BEGIN');
	my $r = acquire($s, 'job:busy', 5000, 0, 'transaction');
	is($r->{status}, 'busy', 'busy job: the acquire answers busy');
	my (undef, $err) = run_sql($s,
		'UPDATE item SET v = v + 1, fence = lease_fence.current_generation() WHERE id = 8');
	is(sqlstate($err), 'LF002', 'busy job: its write, with no current generation, is refused (LF002)');
	run_sql($s, 'COMMIT');
	is(item(8), '0:', 'busy job: nothing was written');
	release($node, 'job:busy', $holder->{identity});
	$s->quit;
}

#
# a commit that fails late: a serialization failure at COMMIT, after the
# point where the commit check runs
#
{
	$node->safe_psql('postgres', 'CREATE TABLE acct (id int PRIMARY KEY, v int); INSERT INTO acct VALUES (1, 0), (2, 0)');
	my $t1 = session($node);
	my $t2 = session($node);
	sql_ok($t1, 'BEGIN ISOLATION LEVEL SERIALIZABLE');
	my $r = acquire($t1, 'job:late', 60000, 0, 'transaction');
	is($r->{status}, 'acquired', 'late failure: the job acquired');
	sql_ok($t1, 'SELECT sum(v) FROM acct WHERE id = 2');
	sql_ok($t2, 'BEGIN ISOLATION LEVEL SERIALIZABLE');
	sql_ok($t2, 'SELECT sum(v) FROM acct WHERE id = 1');
	sql_ok($t1, 'UPDATE acct SET v = v + 1 WHERE id = 1');
	sql_ok($t1, 'UPDATE item SET v = v + 1 WHERE id = 3');
	sql_ok($t2, 'UPDATE acct SET v = v + 1 WHERE id = 2');
	sql_ok($t2, 'COMMIT');
	my (undef, $err) = run_sql($t1, 'COMMIT');
	is(sqlstate($err), '40001', 'late failure: the job\'s COMMIT fails with a serialization failure');
	like($err, qr/during commit attempt/, 'late failure: found during the commit, after the commit check');
	is(item(3), '0:', "late failure: the job's write was not committed");
	is($redis->cli('EXISTS', lkey('job:late')), '0', 'late failure: the lease was released at abort');
	my $n = acquire($node, 'job:late', 5000);
	is($n->{status}, 'acquired', 'late failure: the next holder acquires at once');
	cmp_ok($n->{generation}, '>', $r->{generation}, 'late failure: with a higher generation');
	release($node, 'job:late', $n->{identity});
	$t1->quit;
	$t2->quit;
}

#
# a crash around the commit: the backend is killed while COMMIT waits on a
# paused Redis in the commit check ('always', before the commit record), or
# after a COMMIT whose release the paused Redis has not run (near_expiry)
#
for my $check ('always', 'near_expiry')
{
	my $res = "job:crash-$check";
	my $id = $check eq 'always' ? 4 : 5;
	my $s = session($node);
	my $pid = sql_ok($s, 'SELECT pg_backend_pid()');
	sql_ok($s, "SET lease_fence.commit_check = '$check'");
	sql_ok($s, 'SET lease_fence.command_timeout_ms = 20000');
	sql_ok($s, 'SET lease_fence.cleanup_timeout_ms = 20000');
	sql_ok($s, 'BEGIN');
	# Redis holds every script (a pause of WRITE: CLIENT UNPAUSE still gets
	# through) until the backend was killed and the server is back, however
	# long that takes on a loaded machine; the TTL outlasts it all, and is
	# cut short once the next holder has found the lease busy
	my $r = acquire($s, $res, 600000, 0, 'transaction');
	is($r->{status}, 'acquired', "crash ($check): the job acquired");
	sql_ok($s, "UPDATE item SET v = v + 1 WHERE id = $id");
	need($redis->cli('CLIENT', 'PAUSE', 600000, 'WRITE'), 'OK', 'CLIENT PAUSE WRITE');
	if ($check eq 'always')
	{
		$s->query_until(qr/lf-sent/, "\\echo lf-sent\nCOMMIT;\n");
		ok( $node->poll_query_until('postgres',
				"SELECT wait_event_type = 'Extension' FROM pg_stat_activity WHERE pid = $pid"),
			"crash ($check): COMMIT waits on Redis in the commit check");
	}
	else
	{
		# the release is sent, not waited for: Redis holds it while paused
		my (undef, $cerr) = run_sql($s, 'COMMIT');
		is($cerr, '', "crash ($check): COMMIT returns; its release waits in the paused Redis");
	}
	my $visible = $node->safe_psql('postgres', "SELECT v FROM item WHERE id = $id");
	is($visible, $check eq 'always' ? '0' : '1',
		"crash ($check): the write is " . ($check eq 'always' ? 'not yet committed (the commit check comes first)'
			: 'committed and visible (the release comes after the commit)'));
	kill 'KILL', $pid;
	eval { $s->quit; };
	# the server restarts after the crash
	ok($node->poll_query_until('postgres', 'SELECT 1', '1'), "crash ($check): the server is back");
	is($node->safe_psql('postgres', "SELECT v FROM item WHERE id = $id"), $check eq 'always' ? '0' : '1',
		"crash ($check): after recovery the write is " . ($check eq 'always' ? 'absent' : 'there'));
	need($redis->cli('CLIENT', 'UNPAUSE'), 'OK', 'CLIENT UNPAUSE');
	is($redis->cli('GET', lkey($res)), $r->{identity},
		"crash ($check): the key still holds the killed holder's identity");
	my $b = acquire($node, $res, 5000);
	is($b->{status}, 'busy', "crash ($check): the next holder finds it busy until its TTL");
	# the TTL runs out (cut short: the key's expiry is what the test needs)
	need($redis->cli('PEXPIRE', lkey($res), 1), '1', 'PEXPIRE 1');
	my $deadline = time() + 30;
	my $n;
	do { sleep(0.2); $n = acquire($node, $res, 5000); } while ($n->{status} eq 'busy' && time() < $deadline);
	is($n->{status}, 'acquired', "crash ($check): once the TTL is over the next holder acquires");
	cmp_ok($n->{generation}, '>', $r->{generation}, "crash ($check): with a higher generation");
	release($node, $res, $n->{identity});
}

#
# the release after COMMIT is sent without waiting for its answer, which is
# read before the session's next Redis command
#
{
	my $s = session($node);
	my $counter = sub {
		my ($outcome) = @_;
		return sql_ok($s, "SELECT count FROM lease_fence.stats WHERE operation = 'cleanup' AND outcome = '$outcome'");
	};
	job($s, 'warm', 1, 5000);
	my ($r, $err) = job($s, 'job:deferred', 7, 5000);
	is($err, '', 'deferred release: COMMIT succeeded');
	# read only now: the COMMIT did not wait for the answer
	my $confirmed = $counter->('confirmed');
	is($redis->cli('EXISTS', lkey('job:deferred')), '0', 'deferred release: Redis ran the release');
	is(lease_view($s, $r->{identity})->{state}, 'released', 'deferred release: the lease is released in lease_fence.leases');
	my $n = acquire($s, 'job:deferred-next', 5000);
	is($n->{status}, 'acquired', "deferred release: the session's next acquire is not confused by the answer before it");
	is($counter->('confirmed'), $confirmed + 1,
		"deferred release: its answer was read before the next command, and counted then as a confirmed cleanup");
	release($s, 'job:deferred-next', $n->{identity});

	# an unknown release after COMMIT: the commit stands
	my $unconfirmed = $counter->('unconfirmed');
	sql_ok($s, 'BEGIN');
	# a TTL far past the pause below, so that the key outlives it
	$r = acquire($s, 'job:unknown-release', 60000, 0, 'transaction');
	sql_ok($s, 'UPDATE item SET v = v + 1 WHERE id = 6');
	# (a pause far longer than the two statements below take on a busy
	# machine: the acquire must reach a Redis that is still paused)
	pause_redis($redis, 6000);
	(undef, $err) = run_sql($s, 'COMMIT');
	is($err, '', 'unknown release: COMMIT succeeds without waiting for the release');
	# the next command waits command_timeout_ms for the answer, in vain
	my ($out, $nerr) = run_sql($s, "SELECT status FROM lease_fence.acquire('job:after-pause', 1000)");
	is(item(6), "1:$r->{generation}", 'unknown release: the write committed under its generation');
	like($nerr, qr/could not confirm a lease release sent after an earlier COMMIT/,
		"unknown release: the session's next Redis command warns that the release was not confirmed");
	isnt($out, 'acquired', 'unknown release: that next acquire is not granted while Redis is paused');
	is($counter->('unconfirmed'), $unconfirmed + 1, 'unknown release: counted as an unconfirmed cleanup');
	wait_pause_over($redis);
	is($redis->cli('GET', lkey('job:unknown-release')), $r->{identity},
		'unknown release: the key still holds the identity (left to its TTL)');
	# its TTL, run out now
	$redis->cli('PEXPIRE', lkey('job:unknown-release'), 1);
	my $deadline = time() + 30;
	do { $n = acquire($node, 'job:unknown-release', 5000); sleep(0.2) if $n->{status} eq 'busy'; }
	  while ($n->{status} eq 'busy' && time() < $deadline);
	is($n->{status}, 'acquired', 'unknown release: the next holder acquires once the TTL is over');
	cmp_ok($n->{generation}, '>', $r->{generation}, 'unknown release: with a higher generation');
	release($node, 'job:unknown-release', $n->{identity});
	$s->quit;
}

generations_increase();
$node->stop;
done_testing();

# lease_release_in_transaction.pl — a transaction-scoped lease given up inside
# its own transaction leaves that transaction unable to COMMIT its fenced
# writes (LF010), whatever the release answered and whatever
# lease_fence.commit_check says (docs/guides/leases.md, "Releasing inside
# the transaction").
#
#   - release() answering released, not_held (after a renew found the lease
#     lost) or unavailable (Redis down: nothing was sent): COMMIT is LF010,
#     nothing of the transaction is written, and a fenced write made after
#     the release is LF010 at once;
#   - a renew interrupted inside a PL/pgSQL EXCEPTION block that catches the
#     cancel leaves the lease unknown: COMMIT is LF010 "could not be
#     verified";
#   - PREPARE TRANSACTION is refused too;
#   - the next transaction of the session is not affected.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use LeaseFenceRedis;
use LeaseFenceTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $redis = LeaseFenceRedis->new;
my $node = $redis->node('release_in_xact', 'max_prepared_transactions = 2',
	'lease_fence.command_timeout_ms = 2000');
$node->safe_psql('postgres', q{
CREATE TABLE t (id int PRIMARY KEY, who text);
INSERT INTO t VALUES (1, 'nobody'), (2, 'nobody');
SELECT lease_fence.protect('t');});

sub who { return $node->safe_psql('postgres', "SELECT who FROM t WHERE id = $_[0]"); }

my $s = session($node);

for my $check ('near_expiry', 'always')
{
	sql_ok($s, "SET lease_fence.commit_check = '$check'");

	# released: the release answered released
	sql_ok($s, 'BEGIN');
	my $r = acquire($s, "rel-$check", 30000, 0, 'transaction');
	need($r->{status}, 'acquired', 'acquire');
	sql_ok($s, "UPDATE t SET who = 'before the release' WHERE id = 1");
	is(release($s, "rel-$check", $r->{identity})->{status}, 'released',
		"$check: release() inside the transaction answers released");
	my (undef, $err) = run_sql($s, 'COMMIT');
	is(sqlstate($err), 'LF010', "$check: COMMIT after release() is LF010");
	like($err, qr/lease on resource "rel-$check" was released before commit/,
		"$check: the error says the lease was released before commit");
	is(who(1), 'nobody', "$check: nothing of the transaction was committed");

	# a fenced write after the release is refused at once
	sql_ok($s, 'BEGIN');
	$r = acquire($s, "rel2-$check", 30000, 0, 'transaction');
	need(release($s, "rel2-$check", $r->{identity})->{status}, 'released', 'release');
	(undef, $err) = run_sql($s, "UPDATE t SET who = 'after the release' WHERE id = 2");
	is(sqlstate($err), 'LF010', "$check: a fenced write after release() is LF010");
	run_sql($s, 'ROLLBACK');
	is(who(2), 'nobody', "$check: the write after the release was not made");

	# not_held: a renew found the lease lost, then release()
	sql_ok($s, 'BEGIN');
	$r = acquire($s, "lost-$check", 30000, 0, 'transaction');
	sql_ok($s, "UPDATE t SET who = 'before the loss' WHERE id = 1");
	$redis->cli('DEL', lkey("lost-$check"));
	need(renew($s, "lost-$check", $r->{identity}, 30000)->{status}, 'lost', 'renew');
	is(release($s, "lost-$check", $r->{identity})->{status}, 'not_held',
		"$check: release() of the lost lease answers not_held");
	(undef, $err) = run_sql($s, 'COMMIT');
	is(sqlstate($err), 'LF010', "$check: COMMIT after a lost lease was released is LF010");
	is(who(1), 'nobody', "$check: the writes before the loss were not committed");
	sql_ok($s, 'RESET lease_fence.commit_check');
}

# unavailable: Redis is down, the release was not even sent
{
	sql_ok($s, 'BEGIN');
	my $r = acquire($s, 'down', 30000, 0, 'transaction');
	need($r->{status}, 'acquired', 'acquire');
	sql_ok($s, "UPDATE t SET who = 'while Redis went down' WHERE id = 1");
	$redis->stop;
	like(release($s, 'down', $r->{identity})->{status}, qr/^(unavailable|unknown)$/,
		'Redis down: release() inside the transaction is not confirmed (unavailable, or unknown on a connection that answered just now)');
	my (undef, $err) = run_sql($s, 'COMMIT');
	is(sqlstate($err), 'LF010', 'Redis down: COMMIT after an unavailable release() is LF010 all the same');
	is(who(1), 'nobody', 'Redis down: nothing of the transaction was committed');
	$redis->start;
}

# a renew interrupted inside an EXCEPTION block: the lease is unknown
{
	sql_ok($s, "SET lease_fence.command_timeout_ms = 60000");
	sql_ok($s, 'BEGIN');
	my $r = acquire($s, 'interrupted', 30000, 0, 'transaction');
	need($r->{status}, 'acquired', 'acquire');
	sql_ok($s, "UPDATE t SET who = 'before the interrupted renew' WHERE id = 1");
	# Redis holds every script until the pause ends, long after the
	# statement_timeout has cancelled the renew's wait (a pause of WRITE,
	# not ALL: CLIENT UNPAUSE must still get through)
	need($redis->cli('CLIENT', 'PAUSE', 600000, 'WRITE'), 'OK', 'CLIENT PAUSE WRITE');
	sql_ok($s, "SET LOCAL statement_timeout = '200ms'");
	my ($out, $err) = run_sql($s, qq{DO \$\$
BEGIN
  PERFORM lease_fence.renew('interrupted', '$r->{identity}', 30000);
EXCEPTION WHEN query_canceled THEN
  RAISE NOTICE 'caught: %', SQLERRM;
END \$\$});
	like($err, qr/caught: .*(statement timeout|interrupted)/,
		'interrupted renew: the EXCEPTION block caught the cancel of its wait');
	need($redis->cli('CLIENT', 'UNPAUSE'), 'OK', 'CLIENT UNPAUSE');
	sql_ok($s, 'SET LOCAL statement_timeout = 0');
	is(lease_view($s, $r->{identity})->{state}, 'unknown', 'interrupted renew: the lease is unknown');
	(undef, $err) = run_sql($s, 'COMMIT');
	is(sqlstate($err), 'LF010', 'interrupted renew: COMMIT is LF010');
	like($err, qr/lease on resource "interrupted" could not be verified at commit/,
		'interrupted renew: the error says the lease could not be verified');
	is(who(1), 'nobody', 'interrupted renew: nothing of the transaction was committed');
	sql_ok($s, 'RESET lease_fence.command_timeout_ms');
}

# PREPARE TRANSACTION of a transaction that released its lease
{
	sql_ok($s, 'BEGIN');
	my $r = acquire($s, 'prep', 30000, 0, 'transaction');
	sql_ok($s, "UPDATE t SET who = 'prepared' WHERE id = 2");
	need(release($s, 'prep', $r->{identity})->{status}, 'released', 'release');
	my (undef, $err) = run_sql($s, "PREPARE TRANSACTION 'released_lease'");
	is(sqlstate($err), '0A000', 'PREPARE TRANSACTION after release() is refused');
	is($node->safe_psql('postgres', 'SELECT count(*) FROM pg_prepared_xacts'), '0',
		'nothing was prepared');
	run_sql($s, 'ROLLBACK');
}

# the next transaction of the session is a new start
{
	sql_ok($s, 'BEGIN');
	my $r = acquire($s, 'after', 30000, 0, 'transaction');
	sql_ok($s, "UPDATE t SET who = 'after' WHERE id = 2");
	my (undef, $err) = run_sql($s, 'COMMIT');
	is(sqlstate($err), '', 'the next transaction commits its fenced write');
	is(who(2), 'after', 'and its write stands');
	is($redis->cli('EXISTS', lkey('after')), '0', 'its lease was released by its COMMIT');
}

$s->quit;
done_testing();

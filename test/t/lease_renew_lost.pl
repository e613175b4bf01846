# lease_renew_lost.pl — a renew that answers "lost" or "insufficient_validity"
# never weakens the guarantee (docs/guides/leases.md, "Renewing").
#
# For a transaction- or session-scoped lease the session marks the lease
# lost: later fenced writes under its generation (rows and resource fences)
# fail with LF010, and a transaction that holds a lost transaction-scoped
# lease cannot COMMIT (LF010), whatever lease_fence.commit_check says.
# Releasing a lost session-scoped lease acknowledges the loss.  An
# explicit-scope lease is only shown as lost: nothing about it is automatic.

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
my $node = $redis->node('renew_lost');
$node->safe_psql('postgres', q{
CREATE TABLE t (id int PRIMARY KEY, who text);
INSERT INTO t VALUES (1, 'nobody'), (2, 'nobody'), (3, 'nobody');
SELECT lease_fence.protect('t');});

sub who { return $node->safe_psql('postgres', "SELECT who FROM t WHERE id = $_[0]"); }

my $s = session($node);

#
# The issue's case: a transaction-scoped lease, commit_check = always
#
for my $check ('always', 'near_expiry')
{
	sql_ok($s, "SET lease_fence.commit_check = '$check'");
	sql_ok($s, 'BEGIN');
	my $r = acquire($s, "tx-$check", 30000, 0, 'transaction');
	need($r->{status}, 'acquired', 'acquire');
	sql_ok($s, "UPDATE t SET who = 'A before loss' WHERE id = 1");
	$redis->cli('DEL', lkey("tx-$check"));
	is(renew($s, "tx-$check", $r->{identity}, 30000)->{status}, 'lost',
		"$check: renew answers lost once the key is gone");
	my $view = lease_view($s, $r->{identity});
	is($view->{state}, 'lost', "$check: lease_fence.leases shows it lost");
	ok(defined $view->{expires_at}, "$check: with its expires_at, as for a lost kept-alive lease");
	my (undef, $err) = run_sql($s, "UPDATE t SET who = 'A after loss' WHERE id = 2");
	is(sqlstate($err), 'LF010', "$check: a fenced write after the lost renew is LF010");
	run_sql($s, 'COMMIT');
	is(who(1) . '/' . who(2), 'nobody/nobody', "$check: nothing of the transaction was committed");

	# no write after the loss: COMMIT itself refuses
	sql_ok($s, 'BEGIN');
	$r = acquire($s, "tx2-$check", 30000, 0, 'transaction');
	sql_ok($s, "UPDATE t SET who = 'B before loss' WHERE id = 1");
	$redis->cli('DEL', lkey("tx2-$check"));
	need(renew($s, "tx2-$check", $r->{identity}, 30000)->{status}, 'lost', 'renew');
	(undef, $err) = run_sql($s, 'COMMIT');
	is(sqlstate($err), 'LF010', "$check: COMMIT of a transaction holding a lost lease is LF010");
	like($err, qr/lease on resource "tx2-$check" was lost before commit/, "$check: the error says so");
	is(who(1), 'nobody', "$check: the transaction was rolled back");
	sql_ok($s, 'RESET lease_fence.commit_check');
}

#
# insufficient_validity: the key is still ours, but may expire before the
# commit; the lease counts as lost, and is released at the abort
#
{
	sql_ok($s, 'BEGIN');
	my $r = acquire($s, 'tx-short', 30000, 0, 'transaction');
	sql_ok($s, "UPDATE t SET who = 'C' WHERE id = 1");
	is(renew($s, 'tx-short', $r->{identity}, 1000, 1000)->{status}, 'insufficient_validity',
		'insufficient_validity: a renewal with less than min_validity_ms left');
	my (undef, $err) = run_sql($s, 'COMMIT');
	is(sqlstate($err), 'LF010', 'insufficient_validity: COMMIT is LF010');
	is(who(1), 'nobody', 'insufficient_validity: the transaction was rolled back');
	is($redis->cli('EXISTS', lkey('tx-short')), '0', 'insufficient_validity: the key was released at the abort');
}

#
# A session-scoped lease: writes under its generation fail after the lost
# renew, rows and resource fences alike, until it is released
#
{
	my $r = acquire($s, 'sess', 60000, 0, 'session');
	$redis->cli('DEL', lkey('sess'));
	is(renew($s, 'sess', $r->{identity}, 60000)->{status}, 'lost', 'session scope: renew answers lost');
	sql_ok($s, "BEGIN; SELECT lease_fence.set_generation($r->{generation})");
	my (undef, $err) = run_sql($s, "UPDATE t SET who = 'D' WHERE id = 3");
	is(sqlstate($err), 'LF010', 'session scope: a fenced write under its generation is LF010');
	run_sql($s, 'ROLLBACK');
	sql_ok($s, "BEGIN; SELECT lease_fence.set_generation($r->{generation})");
	(undef, $err) = run_sql($s, "SELECT lease_fence.fence_resource('sess')");
	is(sqlstate($err), 'LF010', 'session scope: a resource fence under its generation is LF010');
	run_sql($s, 'ROLLBACK');
	sql_ok($s, "BEGIN; SELECT lease_fence.set_generation($r->{generation})");
	(undef, $err) = run_sql($s, q{SELECT lease_fence.checkpoint('sess', '{"step": 1}')});
	is(sqlstate($err), 'LF010', 'session scope: a checkpoint under its generation is LF010');
	run_sql($s, 'ROLLBACK');
	is(sql_ok($s, q{SELECT count(*) FROM lease_fence.last_checkpoint('sess')}), "0",
		'session scope: no checkpoint was stored');
	is(who(3), 'nobody', 'session scope: nothing was written');

	is(release($s, 'sess', $r->{identity})->{status}, 'not_held', 'session scope: released (not held)');
	sql_ok($s, "BEGIN; SELECT lease_fence.set_generation($r->{generation})");
	(undef, $err) = run_sql($s, "UPDATE t SET who = 'D' WHERE id = 3");
	is(sqlstate($err), '', 'session scope: once released, the loss is acknowledged and the fence alone decides');
	sql_ok($s, 'COMMIT');
}

#
# An explicit-scope lease is shown lost and nothing more (its writes may
# run on another backend than its renew)
#
{
	my $r = acquire($s, 'expl', 60000);
	$redis->cli('DEL', lkey('expl'));
	is(renew($s, 'expl', $r->{identity}, 60000)->{status}, 'lost', 'explicit scope: renew answers lost');
	is(lease_view($s, $r->{identity})->{state}, 'lost', 'explicit scope: lease_fence.leases shows it lost');
	sql_ok($s, "BEGIN; SELECT lease_fence.set_generation($r->{generation})");
	my (undef, $err) = run_sql($s, "UPDATE t SET who = 'E' WHERE id = 3");
	is(sqlstate($err), '', 'explicit scope: its writes are left to the fence');
	sql_ok($s, 'COMMIT');
}

$s->quit;
$node->stop;
$redis->stop;
done_testing();

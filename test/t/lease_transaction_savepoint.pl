# lease_transaction_savepoint.pl — a transaction-scoped lease keeps its
# generation as the transaction's current generation to the end of the
# top-level transaction: also after ROLLBACK TO SAVEPOINT and after a
# PL/pgSQL EXCEPTION block undid what the acquire did.  SHOW,
# current_setting() and pg_settings say it, as current_generation() does.
# While it is held, the current generation cannot be set to anything else
# (LF003), and when the transaction ends the lease is released and the
# generation gone.  A parallel query's workers see it too.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use LeaseFenceRedis;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $redis = LeaseFenceRedis->new;
my $node = $redis->node('savepoint');
$node->safe_psql('postgres', q{
CREATE TABLE st (id int PRIMARY KEY, v int NOT NULL);
INSERT INTO st VALUES (1, 0);
SELECT lease_fence.protect('st');
});

# one psql session, one transaction: returns the last statement's output
sub run_in_txn
{
	my ($sql) = @_;
	my ($out, $err);
	$node->psql('postgres', $sql, stdout => \$out, stderr => \$err,
		on_error_stop => 1);
	return ($out, $err);
}

# ROLLBACK TO SAVEPOINT: the lease is still held, so is its generation
my ($out, $err) = run_in_txn(q{
BEGIN;
SAVEPOINT s;
SELECT generation FROM lease_fence.acquire('sub', 5000, 0, 'transaction') \gset
SELECT current_setting('lease_fence.generation') = :'generation' AS shown;
ROLLBACK TO SAVEPOINT s;
SELECT lease_fence.current_generation() = :generation AS still_current,
       (SELECT state FROM lease_fence.leases WHERE resource = 'sub') AS state,
       current_setting('lease_fence.generation') = :'generation' AS still_shown;
SELECT setting = :'generation' AS pg_settings_says_it FROM pg_settings WHERE name = 'lease_fence.generation';
UPDATE st SET v = v + 1 WHERE id = 1;
SELECT fence = :generation AS fenced_with_lease FROM st WHERE id = 1;
COMMIT;
SELECT current_setting('lease_fence.generation') = '' AS none_shown_after;
});
is($out, "t\nt|held|t\nt\nt\nt", 'after ROLLBACK TO SAVEPOINT the lease generation is current, shown, and fences the write; none is shown after COMMIT');
is($redis->cli('EXISTS', 'lease_fence:{sub}'), '0', 'the transaction-scoped lease was released at commit');
is($node->safe_psql('postgres', 'SELECT lease_fence.current_generation() IS NULL'), 't',
	'no generation is left after the transaction');

# a PL/pgSQL EXCEPTION block that acquires and then fails
($out, $err) = run_in_txn(q{
BEGIN;
DO $$
BEGIN
	PERFORM lease_fence.acquire('blk', 5000, 0, 'transaction');
	RAISE EXCEPTION 'boom';
EXCEPTION WHEN others THEN
	NULL;
END $$;
SELECT l.generation = lease_fence.current_generation() AS current_is_lease
FROM lease_fence.leases l WHERE l.resource = 'blk' AND l.state = 'held';
COMMIT;
});
is($out, 't', 'after an EXCEPTION block the lease generation is still current');

# the current generation cannot be moved off the lease's while it is held
($out, $err) = run_in_txn(q{
BEGIN;
SELECT generation FROM lease_fence.acquire('pin', 5000, 0, 'transaction') \gset
\set ON_ERROR_STOP 0
SAVEPOINT a;
SET LOCAL lease_fence.generation = 1;
ROLLBACK TO SAVEPOINT a;
SELECT lease_fence.set_generation(:generation - 1);
ROLLBACK TO SAVEPOINT a;
SET lease_fence.generation = '';
ROLLBACK TO SAVEPOINT a;
SELECT lease_fence.set_generation(:generation) = :generation AS same_value_allowed;
SELECT lease_fence.current_generation() = :generation AS unchanged;
-- RESET restores the setting's default without a check; the lease's
-- generation stays current all the same
RESET lease_fence.generation;
SELECT lease_fence.current_generation() = :generation AS unchanged_by_reset;
COMMIT;
});
is($out, "t\nt\nt", 'the lease generation may be set again, and it stays current, RESET or not');
is(scalar(() = $err =~ /invalid value for parameter "lease_fence.generation"/g), 3,
	'SET LOCAL, set_generation() and SET to none are refused while the lease is held');
like($err, qr/transaction-scoped lease with generation \d+/, 'the refusal names the lease generation');

# the SQLSTATE is LF003 (conflicting generation)
($out, $err) = run_in_txn(q{
BEGIN;
SELECT 1 FROM lease_fence.acquire('code', 5000, 0, 'transaction');
\set ON_ERROR_STOP 0
SET LOCAL lease_fence.generation = 1;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
});
is($out, "1\nLF003", 'refusal SQLSTATE is LF003');

# after the transaction ends, the generation may be set freely again
is($node->safe_psql('postgres', q{
BEGIN;
SELECT status FROM lease_fence.acquire('after', 5000, 0, 'transaction');
ROLLBACK;
BEGIN;
SET LOCAL lease_fence.generation = 1;
SELECT lease_fence.current_generation();
COMMIT;
}), "acquired\n1", 'after ROLLBACK the generation is free again');

# two leases in one transaction: the newer (higher) generation is current
($out, $err) = run_in_txn(q{
BEGIN;
SELECT generation AS g1 FROM lease_fence.acquire('two_a', 5000, 0, 'transaction') \gset
SAVEPOINT s;
SELECT generation AS g2 FROM lease_fence.acquire('two_b', 5000, 0, 'transaction') \gset
ROLLBACK TO SAVEPOINT s;
SELECT :g2 > :g1 AND lease_fence.current_generation() = :g2 AS newest_current;
COMMIT;
});
is($out, 't', 'with two transaction-scoped leases the newest generation is current');

# A parallel query's workers see the lease's generation too: they get the
# leader's settings as values, not as SHOW says them
{
	my $force = $node->safe_psql('postgres',
		"SELECT CASE WHEN current_setting('server_version_num')::int >= 160000 "
		  . "THEN 'debug_parallel_query' ELSE 'force_parallel_mode' END");
	$node->safe_psql('postgres', 'CREATE TABLE par AS SELECT i FROM generate_series(1, 1000) i; ANALYZE par');
	my $setup = qq{
SET max_parallel_workers_per_gather = 2;
SET parallel_setup_cost = 0;
SET parallel_tuple_cost = 0;
SET min_parallel_table_scan_size = 0;
SET parallel_leader_participation = off;
SET $force = on;
BEGIN;
SELECT generation FROM lease_fence.acquire('par', 5000, 0, 'transaction') \\gset
};
	($out, $err) = run_in_txn($setup . q{
EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF)
  SELECT count(*) FROM par WHERE current_setting('lease_fence.generation') = :'generation';
COMMIT;
});
	like($out, qr/Workers Launched: [1-9]/,
		'parallel: the query ran in parallel workers (the leader scans no rows: parallel_leader_participation off)');
	($out, $err) = run_in_txn($setup . q{
SELECT count(*) AS seen_by_every_row FROM par
  WHERE current_setting('lease_fence.generation') = :'generation';
SELECT count(*) AS current_in_every_row FROM par WHERE lease_fence.current_generation() = :generation;
COMMIT;
});
	is($out, "1000\n1000",
		"parallel: current_setting('lease_fence.generation') says the lease's generation in the workers, and current_generation() agrees");
}

$node->stop;
done_testing();

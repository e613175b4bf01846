# lease_scopes.pl — when a lease ends, by scope (docs/guides/leases.md, "Scopes").
#
# transaction: outside a transaction block it is 25P01 before anything is
# sent; while held, its generation is the transaction's current generation;
# COMMIT checks that the lease is still ours with min_validity_ms left (else
# LF010, and the transaction rolls back) and releases it; ROLLBACK releases
# it, and the release at abort leaves someone else's key alone.
# session: released when the backend exits.  explicit: neither ROLLBACK nor
# disconnecting releases it; another session can, with the identity.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use LeaseFenceRedis;
use LeaseFenceTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);

my $redis = LeaseFenceRedis->new;
my $node = $redis->node('scopes');

#
# transaction scope
#
$node->safe_psql('postgres',
	"CREATE TABLE tx_t (id int PRIMARY KEY); SELECT lease_fence.protect('tx_t')");
{
	my (undef, $err) = run_sql($node,
		"SELECT lease_fence.acquire('r-tx0', 10000, 0, 'transaction')");
	is(sqlstate($err), '25P01', 'transaction scope outside a transaction block: ERROR 25P01');
	is($redis->cli('EXISTS', gkey('r-tx0')), '0', '25P01: nothing was sent to Redis');

	my $t = session($node);
	sql_ok($t, 'BEGIN');
	my $r = acquire($t, 'r-tx', 10000, 0, 'transaction');
	is($r->{status}, 'acquired', 'transaction scope: acquired');
	is(sql_ok($t, 'SELECT lease_fence.current_generation()'), $r->{generation},
		"transaction scope: the lease's generation is the transaction's current generation");
	is($redis->cli('GET', lkey('r-tx')), $r->{identity}, 'transaction scope: the key is held in the transaction');
	sql_ok($t, 'INSERT INTO tx_t VALUES (1)');
	my (undef, $cerr) = run_sql($t, 'COMMIT');
	is(sqlstate($cerr), '', 'transaction scope: COMMIT succeeds');
	is($redis->cli('EXISTS', lkey('r-tx')), '0', 'transaction scope: COMMIT released the key');
	is(sql_ok($t, 'SELECT lease_fence.current_generation() IS NULL'), 't',
		'transaction scope: no current generation after COMMIT');
	is(sql_ok($t, 'SELECT fence FROM tx_t WHERE id = 1'), $r->{generation},
		"transaction scope: a fenced INSERT carried the lease's generation");

	sql_ok($t, 'BEGIN');
	$r = acquire($t, 'r-tx-rb', 10000, 0, 'transaction');
	is($redis->cli('GET', lkey('r-tx-rb')), $r->{identity}, 'transaction scope: held before ROLLBACK');
	sql_ok($t, 'ROLLBACK');
	is($redis->cli('EXISTS', lkey('r-tx-rb')), '0', 'transaction scope: ROLLBACK released the key');

	# lost before COMMIT: an admin DELetes the key.  COMMIT asks Redis when
	# commit_check is 'always', or (the default, near_expiry) when less than
	# min_validity_ms + ttl_ms / 2 is left; lease_one_round_trip_job.pl tests
	# the young lease that is not asked about
	sql_ok($t, "SET lease_fence.commit_check = 'always'");
	sql_ok($t, 'BEGIN');
	$r = acquire($t, 'r-tx-lost', 10000, 0, 'transaction');
	is($r->{status}, 'acquired', 'LF010 (key deleted): acquired in the transaction');
	sql_ok($t, 'INSERT INTO tx_t VALUES (2)');
	$redis->cli('DEL', lkey('r-tx-lost'));
	(undef, $cerr) = run_sql($t, 'COMMIT');
	is(sqlstate($cerr), 'LF010', 'LF010: COMMIT fails when the lease was deleted before it');
	is(sql_ok($t, 'SELECT count(*) FROM tx_t WHERE id = 2'), '0',
		'LF010: the transaction was rolled back');
	is($redis->cli('EXISTS', lkey('r-tx-lost')), '0', 'LF010: the key was not recreated');

	# lost before COMMIT: the key now holds another identity
	sql_ok($t, 'BEGIN');
	$r = acquire($t, 'r-tx-other', 10000, 0, 'transaction');
	sql_ok($t, 'INSERT INTO tx_t VALUES (3)');
	my $other = 'abcdefabcdefabcdefabcdefabcdef00';
	$redis->cli('SET', lkey('r-tx-other'), $other, 'PX', 30000);
	(undef, $cerr) = run_sql($t, 'COMMIT');
	is(sqlstate($cerr), 'LF010', "LF010: COMMIT fails when the key is someone else's");
	is(sql_ok($t, 'SELECT count(*) FROM tx_t WHERE id = 3'), '0',
		"LF010 (someone else's): the transaction was rolled back");
	is($redis->cli('GET', lkey('r-tx-other')), $other,
		"LF010: the release at abort left someone else's key alone");
	$redis->cli('DEL', lkey('r-tx-other'));
	sql_ok($t, 'RESET lease_fence.commit_check');

	# the default asks too once half the TTL is gone: ttl 2000, 1.1 s later
	sql_ok($t, 'BEGIN');
	$r = acquire($t, 'r-tx-half', 2000, 0, 'transaction');
	is($r->{status}, 'acquired', 'LF010 (near expiry): acquired with ttl_ms 2000');
	sql_ok($t, 'INSERT INTO tx_t VALUES (5)');
	$redis->cli('DEL', lkey('r-tx-half'));
	sleep(1.1);
	(undef, $cerr) = run_sql($t, 'COMMIT');
	is(sqlstate($cerr), 'LF010',
		'LF010 (near expiry): with half the TTL gone, COMMIT asks Redis and finds the key deleted');
	is(sql_ok($t, 'SELECT count(*) FROM tx_t WHERE id = 5'), '0',
		'LF010 (near expiry): the transaction was rolled back');

	# too little validity left at COMMIT: ttl 3000, min 2000, 1.2 s later
	sql_ok($t, 'BEGIN');
	$r = acquire($t, 'r-tx-min', 3000, 2000, 'transaction');
	is($r->{status}, 'acquired', 'LF010 (validity): acquired with min_validity_ms 2000');
	sql_ok($t, 'INSERT INTO tx_t VALUES (4)');
	sleep(1.2);
	(undef, $cerr) = run_sql($t, 'COMMIT');
	is(sqlstate($cerr), 'LF010', 'LF010: COMMIT fails when less than min_validity_ms is left');
	is(sql_ok($t, 'SELECT count(*) FROM tx_t WHERE id = 4'), '0',
		'LF010 (validity): the transaction was rolled back');
	is($redis->cli('EXISTS', lkey('r-tx-min')), '0', 'LF010 (validity): the key was released at abort');

	# explicit scope inside a transaction: nothing automatic
	sql_ok($t, 'BEGIN');
	$r = acquire($t, 'r-tx-expl', 30000);
	sql_ok($t, 'ROLLBACK');
	is($redis->cli('GET', lkey('r-tx-expl')), $r->{identity},
		'explicit scope: ROLLBACK does not release the lease');
	is(release($t, 'r-tx-expl', $r->{identity})->{status}, 'released', 'explicit scope: released by hand');
	$t->quit;
}

#
# session scope: released at backend exit; explicit scope: not
#
{
	my $s = session($node);
	my $pid = sql_ok($s, 'SELECT pg_backend_pid()');
	my $rs = acquire($s, 'r-sess', 60000, 0, 'session');
	my $re = acquire($s, 'r-expl', 60000);
	is($rs->{status}, 'acquired', 'session scope: acquired');
	is($redis->cli('GET', lkey('r-sess')), $rs->{identity}, 'session scope: held while connected');
	sql_ok($s, 'SELECT 1');    # a transaction end must not release it
	is($redis->cli('GET', lkey('r-sess')), $rs->{identity}, 'session scope: still held after later transactions');
	$s->quit;
	wait_backend_gone($pid);
	is($redis->cli('EXISTS', lkey('r-sess')), '0', 'session scope: disconnecting released the key');
	is($redis->cli('GET', lkey('r-expl')), $re->{identity},
		'explicit scope: disconnecting did not release the key');
	is(release($node, 'r-expl', $re->{identity})->{status}, 'released',
		'explicit scope: another session releases it with the identity');
}

generations_increase();

$node->stop;
$redis->stop;
done_testing();

# keepalive_2pc_truncate.pl — what a kept-alive lease guards beyond row
# writes and COMMIT (docs/guides/keepalive-and-waiting.md, "Keep-alive" and "SQLSTATEs").
#
#  - PREPARE TRANSACTION after a fenced write under a kept-alive lease's
#    generation is refused (0A000) and nothing is prepared: COMMIT PREPARED
#    could come after the lease was lost, and nothing would refuse it then.
#    COMMIT instead commits; a transaction that wrote nothing under the
#    lease can still be prepared;
#  - TRUNCATE of a protected table under the generation of a kept-alive
#    lease of this session that was lost fails with LF010, the table keeps
#    its rows; after release acknowledges the loss it is an ordinary
#    generation again;
#  - a kept-alive lease's TTL is capped at keepalive_max_ms, its first grant
#    included: acquire(ttl 3600000, keepalive) with keepalive_max_ms 5000
#    sets a key of at most 5 s and says so in validity_ms (keepalive_max_ms
#    set in postgresql.conf, which applies from the server's start).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use LeaseFenceRedis;
use LeaseFenceTest;
use LeaseFenceTopology;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $redis = LeaseFenceRedis->new;
my $node = $redis->node('keepalive_2pc', "shared_preload_libraries = 'lease_fence'",
	'max_prepared_transactions = 2', 'lease_fence.keepalive_max_ms = 5000');
$node->safe_psql('postgres',
	"CREATE TABLE work (id serial PRIMARY KEY, what text); SELECT lease_fence.protect('work'); "
	  . 'CREATE TABLE plain (id int)');

# A server setting: postgresql.conf's value applies from the start (1.2
# reserved the lease_fence prefix before defining this setting, which
# dropped the value read at start until a reload).
is(sql_ok($node, 'SHOW lease_fence.keepalive_max_ms'), '5s',
	'keepalive_max_ms = 5000 in postgresql.conf applies from the start');

sub kacquire
{
	my ($who, $res, $ttl) = @_;
	return call($who, "lease_fence.acquire(" . lit($res) . ", $ttl, scope => 'session', keepalive => true)");
}

# run a transaction in session $s (ROLLBACK after an error): the error
sub tx
{
	my ($s, $sql) = @_;
	my (undef, $err) = run_sql($s, "BEGIN; $sql");
	run_sql($s, 'ROLLBACK') if $err =~ /ERROR/;
	return $err;
}

sub rows { return sql_ok($node, "SELECT count(*) FROM work WHERE what = " . lit($_[0])); }
sub prepared { return sql_ok($node, 'SELECT count(*) FROM pg_prepared_xacts'); }

#
# PREPARE TRANSACTION after a fenced write under a kept-alive lease
#
{
	my $s = session($node);
	sql_ok($s, 'SET lease_fence.keepalive_max_ms = 600000');
	my $r = kacquire($s, 'k-2pc', 3000);
	need($r->{status}, 'acquired', 'kept-alive acquire');
	my $g = $r->{generation};
	my $err = tx($s, "SET LOCAL lease_fence.generation = $g; INSERT INTO work (what) VALUES ('2pc'); "
		  . "PREPARE TRANSACTION 'lf-2pc';");
	is(sqlstate($err), '0A000', 'PREPARE after a fenced write under a live kept-alive lease: ERROR 0A000');
	like($err, qr/cannot PREPARE a transaction that wrote under a kept-alive lease/, 'PREPARE refused: says why');
	is(prepared(), '0', 'PREPARE refused: nothing is in pg_prepared_xacts');
	is(rows('2pc'), '0', 'PREPARE refused: nothing was written');
	# (the code before the fix prepared it: do not leave its locks behind)
	sql_ok($node, "ROLLBACK PREPARED 'lf-2pc'") if prepared() ne '0';

	$err = tx($s, "SET LOCAL lease_fence.generation = $g; INSERT INTO work (what) VALUES ('2pc'); COMMIT;");
	is($err =~ /ERROR/ ? $err : '', '', 'the same write with COMMIT: no error');
	is(rows('2pc'), '1', 'COMMIT: the write is committed');

	$err = tx($s, "INSERT INTO plain VALUES (1); PREPARE TRANSACTION 'lf-plain';");
	is($err =~ /ERROR/ ? $err : '', '', 'a transaction that wrote nothing under the lease is prepared');
	sql_ok($node, "COMMIT PREPARED 'lf-plain'") if prepared() ne '0';
	release($s, 'k-2pc', $r->{identity});
	$s->quit;
}

#
# TRUNCATE under a lost kept-alive lease's generation
#
{
	my $s = session($node);
	sql_ok($s, 'SET lease_fence.keepalive_max_ms = 600000');
	my $r = kacquire($s, 'k-trunc', 3000);
	need($r->{status}, 'acquired', 'kept-alive acquire');
	my $g = $r->{generation};
	need(tx($s, "SET LOCAL lease_fence.generation = $g; INSERT INTO work (what) VALUES ('trunc'); COMMIT;")
		  =~ /ERROR/ ? 'error' : 'ok', 'ok', 'fenced write under the live lease');
	my $before = sql_ok($node, 'SELECT count(*) FROM work');
	$redis->cli('SET', lkey('k-trunc'), 'f' x 32, 'PX', 60000);
	LeaseFenceTopology::wait_for('the worker to find it lost', sub {
		sql_ok($node, "SELECT lease_fence.keepalive_state(" . lit($r->{identity}) . ")") eq 'lost' });
	my $err = tx($s, "SET LOCAL lease_fence.generation = $g; TRUNCATE work; COMMIT;");
	is(sqlstate($err), 'LF010', 'TRUNCATE under a lost kept-alive lease: ERROR LF010');
	like($err, qr/no longer holds this lease's identity/, 'TRUNCATE refused: the DETAIL says why');
	like($err, qr/^SCHEMA NAME:  public\nTABLE NAME:  work\nCOLUMN NAME:  fence$/m,
		'TRUNCATE refused: LF010 names the schema, table and fence column');
	is(sql_ok($node, 'SELECT count(*) FROM work'), $before, 'TRUNCATE refused: the table keeps its rows');

	is(release($s, 'k-trunc', $r->{identity})->{status}, 'not_held', 'release acknowledges the loss: not_held');
	$err = tx($s, "SET LOCAL lease_fence.generation = $g; TRUNCATE work; COMMIT;");
	is($err =~ /ERROR/ ? $err : '', '', 'after the release the same TRUNCATE is an ordinary one: no error');
	is(sql_ok($node, 'SELECT count(*) FROM work'), '0', 'and it empties the table');
	$redis->cli('DEL', lkey('k-trunc'));
	$s->quit;
}

#
# keepalive_max_ms caps the first grant
#
{
	my $s = session($node);
	my $r = kacquire($s, 'k-cap', 3600000);
	is($r->{status}, 'acquired', 'ttl 3600000 with keepalive, keepalive_max_ms 5000: acquired');
	my $pttl = $redis->cli('PTTL', lkey('k-cap'));
	ok($pttl > 0 && $pttl <= 5000, "the key's TTL is capped at keepalive_max_ms (PTTL $pttl)");
	ok($r->{validity_ms} > 0 && $r->{validity_ms} <= 5000,
		"validity_ms says so ($r->{validity_ms})");
	my $p = acquire($s, 'k-nocap', 3600000, 0, 'session');
	need($p->{status}, 'acquired', 'acquire without keepalive');
	$pttl = $redis->cli('PTTL', lkey('k-nocap'));
	ok($pttl > 5000, "without keepalive the TTL is not capped (PTTL $pttl)");
	$s->quit;
}

$node->stop;
$redis->stop;
done_testing();

# fence_logical_replication.pl — fenced tables on both ends of a logical
# replication subscription.
#
# The fence is enforced where a write originates (docs/guides/fencing-tables.md, "Logical
# replication").  A row the publisher's fence accepted arrives at the
# subscriber already decided, so the subscriber's logical replication
# workers (table sync and apply) write it as given: no fence check, no fence
# rewrite, also in strict mode and for a replicated TRUNCATE.  Before that, a
# strict subscriber table stopped the subscription for good: the apply
# worker has no current generation, so every replicated change failed with
# LF002, again and again (and a replicated TRUNCATE did so on lenient tables
# too).  The subscriber's own sessions are still fenced as everywhere else.
#
# A publisher and a subscriber (PostgreSQL::Test::Cluster, wal_level =
# logical), each with a lenient table lt and a strict table st, protected on
# both sides.  The subscriber preloads lease_fence, so its fence counters are
# cluster-wide and show what its workers counted (nothing).  The waits for
# the subscription (wait_for_subscription_sync, wait_for_catchup) are
# harness steps: they die if the subscriber never catches up.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $pub = PostgreSQL::Test::Cluster->new('publisher');
$pub->init(allows_streaming => 'logical');
$pub->start;

my $sub = PostgreSQL::Test::Cluster->new('subscriber');
$sub->init;
$sub->append_conf('postgresql.conf', "shared_preload_libraries = 'lease_fence'\n");
$sub->start;

my $schema = q{
CREATE EXTENSION lease_fence;
CREATE TABLE lt (id int PRIMARY KEY, v text NOT NULL);
SELECT lease_fence.protect('lt');
CREATE TABLE st (id int PRIMARY KEY, v text NOT NULL);
SELECT lease_fence.protect('st', strict => true);
};
$pub->safe_psql('postgres', $schema);
$sub->safe_psql('postgres', $schema);
# the writers below use generations up to 100: issue them on both sides (a
# generation a database never issued is LF004 there)
for my $node ($pub, $sub)
{
	$node->safe_psql('postgres',
		'SELECT count(lease_fence.next_generation()) FROM generate_series(1, 100)');
}

# (stdout, stderr) of SQL that may fail; errors read "ERROR:  <SQLSTATE>: ..."
sub try_sql
{
	my ($node, $sql) = @_;
	my ($ret, $out, $err) = $node->psql('postgres', $sql,
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	return ($out, $err);
}

sub sqlstate
{
	my ($err) = @_;
	return $err =~ /ERROR:\s+([0-9A-Z]{5}):/ ? $1 : '';
}

# a table's rows with their fences, as one comparable string
sub rows
{
	my ($node, $table) = @_;
	return $node->safe_psql('postgres',
		"SELECT id, v, fence FROM $table ORDER BY id");
}

sub fence_counters
{
	my ($node) = @_;
	return $node->safe_psql('postgres',
		q{SELECT string_agg(outcome || '=' || count, ' ' ORDER BY outcome COLLATE "C")
		  FROM lease_fence.stats WHERE operation = 'fence'});
}

# both sides hold the same rows and fences, and they are the ones expected
sub same_rows
{
	my ($phase, %want) = @_;
	for my $table (sort keys %want)
	{
		is(rows($pub, $table), $want{$table},
			"$phase: publisher's $table has the rows and fences its writers supplied");
		is(rows($sub, $table), rows($pub, $table),
			"$phase: subscriber's $table equals the publisher's, fences included");
	}
}

#
# Initial table sync: rows that exist before the subscription is created
# are copied by a table sync worker (COPY through the subscriber's triggers)
#
$pub->safe_psql('postgres', q{
BEGIN;
SET LOCAL lease_fence.generation = 5;
INSERT INTO lt VALUES (1, 'a'), (2, 'b');
INSERT INTO st VALUES (1, 'a'), (2, 'b'), (3, 'c');
COMMIT;
INSERT INTO lt VALUES (3, 'unfenced');   -- lenient: the written fence (0) is kept
});

my $pub_connstr = $pub->connstr . ' dbname=postgres';
$pub->safe_psql('postgres', 'CREATE PUBLICATION pub FOR TABLE lt, st');
$sub->safe_psql('postgres', "CREATE SUBSCRIPTION sub CONNECTION '$pub_connstr' PUBLICATION pub");
$sub->wait_for_subscription_sync($pub, 'sub');

same_rows('initial sync',
	lt => "1|a|5\n2|b|5\n3|unfenced|0",
	st => "1|a|5\n2|b|5\n3|c|5");

#
# INSERT, UPDATE, DELETE under generations, applied by the apply worker
#
$pub->safe_psql('postgres', q{
BEGIN;
SET LOCAL lease_fence.generation = 10;
INSERT INTO st VALUES (4, 'd');
UPDATE st SET v = 'a10' WHERE id = 1;
UPDATE lt SET v = 'b10' WHERE id = 2;
COMMIT;
BEGIN;
SET LOCAL lease_fence.generation = 12;
DELETE FROM st WHERE id = 2;
DELETE FROM lt WHERE id = 3;
UPDATE st SET v = 'c12' WHERE id = 3;
COMMIT;
UPDATE lt SET v = 'a-unfenced' WHERE id = 1;   -- lenient: leaves the fence alone
});
$pub->wait_for_catchup('sub');

same_rows('insert/update/delete',
	lt => "1|a-unfenced|5\n2|b10|10",
	st => "1|a10|10\n3|c12|12\n4|d|10");

#
# A row the subscriber wrote itself under a higher generation, then changed
# on the publisher under a lower one: the publisher decided, and the
# subscriber applies its row as it is (no LF001, no stalled subscription)
#
$sub->safe_psql('postgres', q{
BEGIN;
SET LOCAL lease_fence.generation = 100;
UPDATE lt SET v = 'local100' WHERE id = 2;
COMMIT;
});
is(rows($sub, 'lt'), "1|a-unfenced|5\n2|local100|100",
	'a local write on the subscriber is fenced: the row takes its generation');
$pub->safe_psql('postgres', q{
BEGIN;
SET LOCAL lease_fence.generation = 30;
UPDATE lt SET v = 'b30' WHERE id = 2;
COMMIT;
});
$pub->wait_for_catchup('sub');
same_rows('publisher writes under a lower generation than the subscriber stored',
	lt => "1|a-unfenced|5\n2|b30|30");

#
# TRUNCATE under a generation, replicated (the subscriber's guard would
# refuse it without a generation, lenient or strict), then new rows
#
$pub->safe_psql('postgres', q{
BEGIN;
SET LOCAL lease_fence.generation = 40;
TRUNCATE lt, st;
INSERT INTO lt VALUES (7, 'g');
INSERT INTO st VALUES (8, 'h');
COMMIT;
});
$pub->wait_for_catchup('sub');
same_rows('truncate', lt => "7|g|40", st => "8|h|40");

# the workers' writes were not checked, so they count as nothing: the one
# accepted fence write is the subscriber's own local UPDATE above
is(fence_counters($sub), 'LF001=0 LF002=0 LF003=0 LF004=0 LF010=0 accepted=1',
	"subscriber: replicated rows are not counted by the fence");

#
# The subscriber's own sessions are still fenced
#
my ($out, $err) = try_sql($sub, q{
BEGIN;
SET LOCAL lease_fence.generation = 39;
UPDATE lt SET v = 'stale' WHERE id = 7;
COMMIT;
});
is(sqlstate($err), 'LF001', 'subscriber: a local write under a stale generation is LF001');
($out, $err) = try_sql($sub, q{INSERT INTO st VALUES (9, 'no generation')});
is(sqlstate($err), 'LF002', 'subscriber: a local write to a strict table without a generation is LF002');
($out, $err) = try_sql($sub, q{TRUNCATE st});
is(sqlstate($err), 'LF002', 'subscriber: a local TRUNCATE without a generation is LF002');
($out, $err) = try_sql($sub, q{
BEGIN;
SET LOCAL lease_fence.generation = 39;
TRUNCATE lt;
COMMIT;
});
is(sqlstate($err), 'LF001', 'subscriber: a local TRUNCATE under a stale generation is LF001');
same_rows('after the refused local writes', lt => "7|g|40", st => "8|h|40");
is(fence_counters($sub), 'LF001=2 LF002=2 LF003=0 LF004=0 LF010=0 accepted=1',
	'subscriber: the refused local writes are counted');

# and replication goes on after them
$pub->safe_psql('postgres', q{
BEGIN;
SET LOCAL lease_fence.generation = 41;
UPDATE st SET v = 'h41' WHERE id = 8;
COMMIT;
});
$pub->wait_for_catchup('sub');
same_rows('after the local refusals', st => "8|h41|41");

$sub->stop;
$pub->stop;
done_testing();

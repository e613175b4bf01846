# generation_dump_restore.pl — pg_dump and restore keep the generation space,
# the resource fences and the jobs' checkpoints (and the heal budget used,
# which travels with the generations it guards: lease_fence.heal_budget_seq
# is configuration too).
#
# A generation carries its epoch in the sequence value (docs/guides/failover-and-generations.md,
# "Generations across a failover"), and the resource fences live in a table
# of the extension: a dump that left either out would restore a database
# whose next_generation() starts again from 1, below the fences stored in
# its own tables, and whose resources are unfenced.  Both are marked as the
# extension's configuration, so pg_dump dumps them.  The restore goes into
# a new cluster (timeline 1) from one that was promoted (timeline 2, epoch
# 2): the epoch must survive, and the generations go on above.
#
# Checked by hand without the pg_extension_config_dump() calls of the 1.2
# script: the restored next_generation() starts again in epoch 0, no fence
# is there, and all four points after the restore fail.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# a cluster on timeline 2: a standby of a throwaway primary, promoted
my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->start;
$primary->safe_psql('postgres', 'CREATE EXTENSION lease_fence');
$primary->backup('b');
my $old = PostgreSQL::Test::Cluster->new('old');
$old->init_from_backup($primary, 'b', has_streaming => 1);
$old->start;
$primary->wait_for_catchup($old);
$primary->stop;
$old->promote;
$old->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'the standby did not leave recovery';

my $last = $old->safe_psql('postgres',
	'SELECT max(lease_fence.next_generation()) FROM generate_series(1, 300)');
die "no epoch 2 on the promoted cluster ($last)" unless ($last >> 40) == 2;
$old->safe_psql('postgres',
	"BEGIN; SET LOCAL lease_fence.generation = $last; SELECT lease_fence.fence_resource('job:1'); COMMIT;"
);
$old->safe_psql('postgres',
	"BEGIN; SET LOCAL lease_fence.generation = $last; SELECT lease_fence.checkpoint('job:2', '{\"next\": 7}'); COMMIT;"
);
# heals used part of the heal budget (as a heal's setval leaves it)
$old->safe_psql('postgres', "SELECT setval('lease_fence.heal_budget_seq', 12345)");

my $dump = $old->basedir . '/lf.dump';
$old->run_log([ 'pg_dump', '-Fc', '-f', $dump, '-d', $old->connstr('postgres') ])
  or die 'pg_dump failed';

my $new = PostgreSQL::Test::Cluster->new('new');
$new->init;
$new->start;
$new->safe_psql('postgres', 'CREATE DATABASE restored');
$new->run_log(
	[ 'pg_restore', '--exit-on-error', '-d', $new->connstr('restored'), $dump ])
  or die 'pg_restore failed';

my $next = $new->safe_psql('restored', 'SELECT lease_fence.next_generation()');
cmp_ok($next, '>', $last,
	'the restored database draws above every generation drawn before the dump');
is($next >> 40, 2, 'the epoch survives the dump, on a cluster of timeline 1');
is( $new->safe_psql(
		'restored',
		q{SELECT generation FROM lease_fence.resource_fences WHERE resource = 'job:1'}),
	$last,
	'the resource fence survives the dump');
is( $new->safe_psql(
		'restored',
		q{SELECT state::text || ' ' || generation FROM lease_fence.last_checkpoint('job:2')}),
	qq({"next": 7} $last),
	'the checkpoint survives the dump, with its generation');
is($new->safe_psql('restored', 'SELECT last_value FROM lease_fence.heal_budget_seq'),
	12345, 'the heal budget used survives the dump, with the generations');
my ($ret, $out, $err) = $new->psql('restored',
	"BEGIN; SET LOCAL lease_fence.generation = " . ($last - 1)
	  . "; SELECT lease_fence.fence_resource('job:1'); COMMIT;");
like($err, qr/stale generation: resource fence rejected/,
	'and refuses a lower generation after the restore');

$old->stop;
$new->stop;
done_testing();

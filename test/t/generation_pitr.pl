# generation_pitr.pl — after a point-in-time recovery, next_generation()
# never hands out a generation the database handed out after that point.
#
# A point-in-time recovery replays the WAL up to a target and stops: the
# generation sequence is as it was then, although the original server went
# on drawing.  Those later values may already be in fence columns (or in
# Redis, or with a worker that still writes); a restored server that hands
# them out again lets two holders share a generation.  The recovery ends on
# a new timeline, which starts a new epoch (docs/guides/failover-and-generations.md, "Generations across a
# failover"), so the restored server draws above everything.
#
# Checked by hand with lease_fence 1.1's src/fence/generation.c: the original drew
# 1 to 100 before the target and 101 to 300 after it; the restored server
# drew 133 to 232, all 100 of them repeats, and all three points fail.

use strict;
use warnings;

use List::Util qw(min max);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

sub draw
{
	my ($node, $n) = @_;
	return split /\n/,
	  $node->safe_psql('postgres',
		"SELECT lease_fence.next_generation() FROM generate_series(1, $n)");
}

my $orig = PostgreSQL::Test::Cluster->new('orig');
$orig->init(has_archiving => 1, allows_streaming => 1);
$orig->start;
$orig->safe_psql('postgres', 'CREATE EXTENSION lease_fence');
$orig->backup('b');

my @before = draw($orig, 100);
# the point to recover to: a restore point, after the first 100 values
$orig->safe_psql('postgres', "SELECT pg_create_restore_point('lf_target')");
my @after_target = draw($orig, 200);
note "the original drew $before[0] to $before[-1] before the target, "
  . "$after_target[0] to $after_target[-1] after it";

# everything reaches the archive, then the original is gone
my $last = $orig->safe_psql('postgres',
	'SELECT pg_walfile_name(pg_switch_wal())');
$orig->poll_query_until('postgres',
	"SELECT last_archived_wal >= '$last' FROM pg_stat_archiver")
  or die 'the WAL did not reach the archive';
$orig->stop;

my $restored = PostgreSQL::Test::Cluster->new('restored');
$restored->init_from_backup($orig, 'b', has_restoring => 1, standby => 0);
$restored->append_conf(
	'postgresql.conf', q{
recovery_target_name = 'lf_target'
recovery_target_action = 'promote'
});
$restored->start;
$restored->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'the restored server did not finish recovery';

my @new = draw($restored, 100);
note "the restored server drew $new[0] to $new[-1]";

my %old = map { $_ => 1 } (@before, @after_target);
my @rep = grep { $old{$_} } @new;
is(scalar(@rep), 0,
	'the restored server repeats no generation of the original');
cmp_ok(min(@new), '>', max(@after_target),
	'it draws above every generation the original drew, also after the recovery target'
);
is(min(@new) >> 40, 2, 'it draws from epoch 2 (epoch 0, plus timeline 2)');

$restored->stop;
done_testing();

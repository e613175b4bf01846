# generation_failover.pl — a promoted standby never hands out a
# generation the old primary may have handed out.
#
# A streaming standby replays the generation sequence only as far as the WAL
# it received.  When shipping stops and the primary goes on drawing, then
# crashes, the standby is promoted with a sequence that lags behind what the
# primary returned: a plain sequence (and lease_fence 1.1) then hands out
# some of the same values again.  Promotion starts a new timeline, and
# lease_fence starts a new epoch on it (docs/guides/failover-and-generations.md, "Generations across a
# failover"): every value drawn on the new timeline is above every value the
# old one could have drawn.
#
# Two failovers in a row: primary (timeline 1) -> standby A (timeline 2) ->
# standby B (timeline 3).  B is cut off before A's first draw on timeline 2,
# so B never sees A start its epoch: B must still end up above it.
#
# Checked by hand with lease_fence 1.1's src/fence/generation.c (no epochs): the
# promoted A started again at 100, where the primary had reached 270, and
# 171 of the 200 values it drew repeated values of timeline 1; all 100 that
# B drew on timeline 3 repeated earlier ones.  Every point below but the
# first fails then.

use strict;
use warnings;

use List::Util qw(min max);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# Draw $n generations on $node in the ways a client does: single calls in
# autocommit, a batch in one statement, in transactions that roll back, and
# from a session whose transaction is still open when the caller crashes the
# node (returned as the second value, for the caller to quit).
sub draw
{
	my ($node, $n) = @_;
	my @v;
	push @v, $node->safe_psql('postgres', 'SELECT lease_fence.next_generation()')
	  for 1 .. 5;
	push @v,
	  split /\n/,
	  $node->safe_psql('postgres',
		"SELECT lease_fence.next_generation() FROM generate_series(1, $n)");
	push @v,
	  split /\n/,
	  $node->safe_psql('postgres',
		"BEGIN; SELECT lease_fence.next_generation() FROM generate_series(1, 40); ROLLBACK;"
	  );
	my $open = $node->background_psql('postgres');
	$open->query_safe('BEGIN');
	push @v, $open->query_safe('SELECT lease_fence.next_generation()') for 1 .. 5;
	return (\@v, $open);
}

sub strictly_increasing
{
	my @v = @_;
	for my $i (1 .. $#v)
	{
		return 0 unless $v[$i] > $v[ $i - 1 ];
	}
	return 1;
}

# values of @$a that are also in @$b
sub repeated
{
	my ($a, $b) = @_;
	my %seen = map { $_ => 1 } @$b;
	return grep { $seen{$_} } @$a;
}

# the timeline WAL is written on: the first 8 hex digits of its file name
sub timeline
{
	my ($node) = @_;
	return $node->safe_psql('postgres',
		q{SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int});
}

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->start;
$primary->safe_psql('postgres', 'CREATE EXTENSION lease_fence');

$primary->backup('b1');
my $a = PostgreSQL::Test::Cluster->new('standby_a');
$a->init_from_backup($primary, 'b1', has_streaming => 1);
$a->start;

# what A has replayed: drawn while it streams
my ($shipped, $s0) = draw($primary, 20);
$s0->quit;
$primary->wait_for_catchup($a);

# the cut: A stops receiving WAL; the primary goes on for 200 values more
$a->stop;
my ($unshipped, $s1) = draw($primary, 150);
my @old = (@$shipped, @$unshipped);
ok(strictly_increasing(@old), 'timeline 1: generations strictly increase');
note 'timeline 1 drew ' . scalar(@old) . " values, $old[0] to $old[-1]";

# the primary crashes; A is started and promoted
$primary->stop('immediate');
eval { $s1->quit };
$a->start;
my ($ret, $out, $err) =
  $a->psql('postgres', 'SELECT lease_fence.next_generation()');
like($err, qr/cannot execute lease_fence\.next_generation\(\) during recovery/,
	'a standby in recovery draws no generation');
$a->promote;
$a->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'standby A did not leave recovery';
die 'standby A is not on timeline 2' unless timeline($a) == 2;

# B follows A from before A's first draw on timeline 2 (B is a standby of
# A: A's checkpoint at promotion is on timeline 2 already)
$a->safe_psql('postgres', 'CHECKPOINT');
$a->backup('b2');
my $b = PostgreSQL::Test::Cluster->new('standby_b');
$b->init_from_backup($a, 'b2', has_streaming => 1);
$b->start;
$a->wait_for_catchup($b);
$b->stop;

my ($new, $s2) = draw($a, 150);
note 'timeline 2 drew ' . scalar(@$new) . " values, $new->[0] to $new->[-1]";
my @rep = repeated($new, \@old);
is(scalar(@rep), 0,
	'timeline 2 repeats no generation of timeline 1'
	  . (@rep ? ' (repeated: ' . join(', ', @rep[ 0 .. min(9, $#rep) ]) . ' ...)' : ''));
cmp_ok(min(@$new), '>', max(@old),
	'every generation of timeline 2 is above every generation of timeline 1');
ok(strictly_increasing(@$new), 'timeline 2: generations strictly increase');
is(min(@$new) >> 40, 2,
	'timeline 2 draws from epoch 2 (epoch 0 of timeline 1, plus timeline 2)');

# A crashes; B never received A's draws, not even the start of epoch 2
$a->stop('immediate');
eval { $s2->quit };
$b->start;
$b->promote;
$b->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'standby B did not leave recovery';
die 'standby B is not on timeline 3' unless timeline($b) == 3;

my ($newer, $s3) = draw($b, 50);
$s3->quit;
my @all_before = (@old, @$new);
@rep = repeated($newer, \@all_before);
is(scalar(@rep), 0, 'timeline 3 repeats no generation of timelines 1 and 2');
cmp_ok(min(@$newer), '>', max(@all_before),
	'every generation of timeline 3 is above every generation of timelines 1 and 2'
);
is(min(@$newer) >> 40, 3,
	'timeline 3 draws from epoch 3 (B replayed epoch 0, plus timeline 3)');

# a restart on the same timeline starts no new epoch
$b->restart;
my $after_restart =
  $b->safe_psql('postgres', 'SELECT lease_fence.next_generation()');
cmp_ok($after_restart, '>', max(@$newer),
	'after a restart the generations go on above');
is($after_restart >> 40, 3, 'a restart on the same timeline keeps the epoch');

$b->stop;
done_testing();

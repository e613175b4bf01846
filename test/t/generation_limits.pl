# generation_limits.pl — the limits of generation epochs are clear
# errors, never a generation that could repeat.
#
# A generation is epoch * 2^40 + counter (docs/guides/failover-and-generations.md, "Generations across a
# failover").  A counter that ran on into the next epoch would hand out
# values a later timeline's epoch may hand out again; a timeline number too
# large for the epoch's 23 bits cannot start one.  Both must be an ERROR
# (54000) that leaves the sequence where it is.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('limits');
$node->init;
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION lease_fence');

sub draw
{
	my ($ret, $out, $err) = $node->psql('postgres',
		'SELECT lease_fence.next_generation()',
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	return ($out, $err);
}

sub last_value
{
	return $node->safe_psql('postgres',
		'SELECT last_value FROM lease_fence.generation_seq');
}

# the counter of epoch 0 is two values short of its limit (2^40 - 2^24)
my $limit = (1 << 40) - (1 << 24);
$node->safe_psql('postgres',
	"SELECT setval('lease_fence.generation_seq', $limit - 2)");

my ($out, $err) = draw();
is($out, $limit - 1, 'the last value below the limit is handed out');
($out, $err) = draw();
is($out, '', 'the draw that reaches the limit returns no generation');
like($err, qr/54000: the generations of epoch 0 are exhausted/,
	'it is an ERROR 54000 naming the epoch');
is(last_value(), $limit, 'the sequence moved by that one value only');
($out, $err) = draw();
like($err, qr/54000: the generations of epoch 0 are exhausted/,
	'every later draw is refused too');
is(last_value(), $limit, 'and does not move the sequence: it never reaches the next epoch');

# a timeline number above 2^23 - 1 (pg_resetwal starts the next WAL on it)
$node->stop;
my $tli = sprintf('%08X', 1 << 23);
$node->run_log(
	[ 'pg_resetwal', '-l', "${tli}0000000000000010", $node->data_dir ])
  or die 'pg_resetwal failed';
$node->start;
die 'the cluster is not on timeline ' . (1 << 23)
  unless $node->safe_psql('postgres',
	q{SELECT substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8)}) eq $tli;
($out, $err) = draw();
is($out, '', 'no generation on a timeline too large for the epoch');
like($err, qr/54000: timeline 8388608 is too large for lease_fence generations/,
	'it is an ERROR 54000 naming the timeline');

$node->stop;
done_testing();

# generation_durable.pl — lease_fence.next_generation() survives a crash.
#
# docs/guides/failover-and-generations.md, "Generations": a generation is strictly greater than every one the
# database has ever returned, also across a crash at any instant, also when
# the transaction that drew it aborted, also with synchronous_commit = off.
# A plain sequence does not promise that: nextval() logs a batch of 32 values
# ahead and hands them out before that WAL record is written; a crash before
# some later commit writes it restarts the sequence below values already
# handed out.  next_generation() flushes the record before returning.
#
# Each round draws values in every way the README names — (i) autocommit,
# (ii) in transactions that roll back, (iii) with synchronous_commit = off,
# (iv) from three sessions interleaved, left open in their transactions —
# then crashes the server (immediate stop: no shutdown checkpoint, nothing
# more is written) and draws again after crash recovery.
#
# The server is set up so that nothing writes the WAL out behind the test's
# back: no checkpoint, no autovacuum, no background writer, and a WAL writer
# that writes (asynchronous commits and aborts, and completed WAL pages) only
# when its timer fires, every 10 s (the maximum).  Each round starts on a
# fresh WAL page and writes far less than a page, so only the test's own
# synchronous commits (and next_generation()'s flush) write WAL before the
# crash.
#
# The round is first run with a plain sequence as a CONTROL: it must repeat a
# value after the crash, or the round could not catch a next_generation()
# without its flush.  It does so whatever the timing: (iv) draws more than a
# batch after the last asynchronous commit or abort, and the WAL writer never
# writes past that.  The values of (ii) and (iii) repeat too unless the WAL
# writer's timer fires before the crash; the test notes which did.  (i)
# commits synchronously, which flushes: there a plain sequence is enough.
# Checked by hand: with the XLogFlush() removed from src/fence/generation.c, every
# cycle below fails for (ii), (iii) and (iv).
#
# fsync is off (Cluster.pm's default): an immediate stop loses what is still
# in PostgreSQL's WAL buffers, not what was written to the kernel, so this
# test checks that the value's WAL is written before it is returned.  That
# the same flush also fsyncs (with fsync = on) is PostgreSQL's XLogFlush.

use strict;
use warnings;

use List::Util qw(min max);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('generation');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
# Nothing but the test may write the WAL out before the crash.  The WAL
# writer writes asynchronous commits and full WAL pages when its timer fires:
# as seldom as it can (10 s is the maximum).
wal_writer_delay = 10s
wal_writer_flush_after = 1GB
checkpoint_timeout = 1d
max_wal_size = 10GB
autovacuum = off
bgwriter_lru_maxpages = 0
});
$node->start;

$node->safe_psql('postgres',
	'CREATE EXTENSION lease_fence; CREATE SEQUENCE ctl');

# the cases of one round, in the order they run
my @cases = (
	[ autocommit => '(i) in autocommit' ],
	[ rollback => '(ii) to transactions that then rolled back' ],
	[ async => '(iii) with synchronous_commit = off' ],
	[ 'session 1' => '(iv) to interleaved session 1, open at the crash' ],
	[ 'session 2' => '(iv) to interleaved session 2, open at the crash' ],
	[ 'session 3' => '(iv) to interleaved session 3, open at the crash' ],);

sub values_of
{
	my ($out) = @_;
	return split /\n/, $out;
}

# One statement on a background session, returning its output.  Like
# BackgroundPsql's query_safe, without its note of every query and result
# (thousands of lines here).  Dies if the statement fails.
sub query_quiet
{
	my ($session, $sql) = @_;
	my $out =
	  $session->query_until(qr/^lf-done$/m, "$sql;\n\\echo lf-done\n");
	$out =~ s/^lf-done\n\z//m
	  or die "statement failed: $sql\n$session->{stderr}";
	return $out;
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

# Draw values with the SQL expression $draw in every way the README names.
# Returns the values per case, all of them in the order drawn, and the
# sessions of (iv), still open in their transactions, for the crash.
sub draw_before_crash
{
	my ($draw) = @_;
	my (%got, @order);

	# All WAL so far is written, and the round starts on a fresh WAL page:
	# it writes far less than a page, so no page fills up and the WAL writer
	# gets no full page to write.
	$node->safe_psql('postgres', 'SELECT pg_switch_wal()');
	my $start_lsn =
	  $node->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()');

	# (i) autocommit, synchronous commit
	for (1 .. 3)
	{
		push @{ $got{autocommit} }, $node->safe_psql('postgres', "SELECT $draw");
	}

	my $s = $node->background_psql('postgres');

	# (ii) transactions that roll back
	for (1 .. 2)
	{
		query_quiet($s, 'BEGIN');
		push @{ $got{rollback} },
		  values_of(query_quiet($s, "SELECT $draw FROM generate_series(1, 20)"));
		query_quiet($s, 'ROLLBACK');
	}

	# (iii) synchronous_commit = off: each statement a transaction of its own
	query_quiet($s, 'SET synchronous_commit = off');
	for (1 .. 5)
	{
		push @{ $got{async} },
		  values_of(query_quiet($s, "SELECT $draw FROM generate_series(1, 8)"));
	}
	$s->quit;
	push @order, @{ $got{autocommit} }, @{ $got{rollback} }, @{ $got{async} };

	# (iv) three sessions take turns, one value at a time, in transactions
	# that are still open at the crash (more than a batch of 32 values, so
	# the sequence logs again after the last commit above)
	my @sessions = map { $node->background_psql('postgres') } 1 .. 3;
	query_quiet($_, 'BEGIN') for @sessions;
	for my $turn (1 .. 14)
	{
		for my $i (0 .. $#sessions)
		{
			my ($v) = values_of(query_quiet($sessions[$i], "SELECT $draw"));
			push @{ $got{ 'session ' . ($i + 1) } }, $v;
			push @order, $v;
		}
	}
	note "this round wrote "
	  . $node->safe_psql('postgres',
		"SELECT pg_current_wal_insert_lsn() - '$start_lsn'")
	  . " bytes of WAL (a page is 8192)";
	return (\%got, \@order, \@sessions);
}

# Crash: no shutdown checkpoint, WAL buffers not written.  Then recover.
sub crash_and_restart
{
	my ($sessions) = @_;
	$node->stop('immediate');
	$node->start;
	# their backends are gone; let the psql processes exit
	eval { $_->quit } for @$sessions;
	return;
}

# Draw again after the crash, in the same ways (the interleaved sessions
# are new ones).  Returns the values in the order drawn.
sub draw_after_crash
{
	my ($draw) = @_;
	my @after;
	push @after, $node->safe_psql('postgres', "SELECT $draw");
	push @after,
	  values_of($node->safe_psql('postgres',
		"BEGIN; SELECT $draw FROM generate_series(1, 3); ROLLBACK;"));
	push @after,
	  values_of($node->safe_psql('postgres',
		"SET synchronous_commit = off; SELECT $draw FROM generate_series(1, 3);"));
	return @after;
}

#
# CONTROL: the same round with a plain sequence
#
{
	my ($got, $order, $sessions) = draw_before_crash("nextval('ctl')");
	crash_and_restart($sessions);
	my ($first_after) = draw_after_crash("nextval('ctl')");

	note "control: nextval drew "
	  . scalar(@$order)
	  . " values ($order->[0] to $order->[-1]) before the crash, "
	  . "$first_after first after it";
	for my $case (@cases)
	{
		my ($key, $desc) = @$case;
		my @repeated = grep { $_ >= $first_after } @{ $got->{$key} };
		note "control: values returned $desc repeated after the crash: "
		  . (@repeated ? join(', ', @repeated) : 'none');
	}
	# a precondition, not a test point: without it the cycles below could
	# not catch a next_generation() that returns a value before its WAL is
	# flushed
	$first_after <= max(@$order)
	  or die "harness: control: plain nextval did not repeat a value after the crash "
	  . "(first after: $first_after, highest before: "
	  . max(@$order)
	  . "), so this test cannot detect a missing flush";
}

#
# next_generation(), through three crashes
#
my @all;
for my $cycle (1 .. 3)
{
	my ($got, $order, $sessions) =
	  draw_before_crash('lease_fence.next_generation()');

	ok(strictly_increasing(@$order),
		"cycle $cycle: generations strictly increase in the order drawn, within and across sessions"
	);
	ok( (grep { strictly_increasing(@{ $got->{"session $_"} }) } 1 .. 3) == 3,
		"cycle $cycle: each interleaved session sees strictly increasing generations"
	);

	crash_and_restart($sessions);
	my @after = draw_after_crash('lease_fence.next_generation()');

	ok(strictly_increasing(@after),
		"cycle $cycle: generations strictly increase after the crash");
	for my $case (@cases)
	{
		my ($key, $desc) = @$case;
		cmp_ok(max(@{ $got->{$key} }), '<', min(@after),
			"cycle $cycle: generations returned $desc are below every generation drawn after the crash"
		);
	}
	push @all, @$order, @after;
}

ok(strictly_increasing(@all),
	'the generations of all three cycles, in the order drawn, strictly increase'
);
my $last = $node->safe_psql('postgres', 'SELECT lease_fence.next_generation()');
cmp_ok($last, '>', max(@all),
	'next_generation still works after three crashes');

$node->stop;
done_testing();

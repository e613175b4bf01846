# generation_syncrep.pl — with a synchronous standby, next_generation()
# returns a value only once the standby has the WAL that makes it durable.
#
# A generation is handed to the caller inside its transaction, long before
# any commit would wait for the standby (a draw in BEGIN ... returns at
# once with lease_fence 1.1).  With synchronous_standby_names set it must
# wait as a commit waits.  A cancel during that wait makes PostgreSQL's
# commit wait return with a WARNING only ("already committed locally"): a
# generation must then not be returned at all, but an ERROR.
#
# The sequence logs a batch of values ahead, and a value whose batch the
# standby already confirmed needs no wait.  A CHECKPOINT makes the next draw
# log a new batch (the first change of a page after a checkpoint is logged),
# so that draw must wait.  The harness sees the wait as wait_event SyncRep in
# pg_stat_activity.
#
# Checked by hand with lease_fence 1.1's src/fence/generation.c: the draw in the
# open transaction returns at once, and the first point fails.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->start;
$primary->safe_psql('postgres', 'CREATE EXTENSION lease_fence');
$primary->backup('b');

my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'b', has_streaming => 1);
$standby->start;

$primary->safe_psql('postgres',
	"ALTER SYSTEM SET synchronous_standby_names = 'standby'; SELECT pg_reload_conf()");
$primary->poll_query_until('postgres',
	q{SELECT sync_state = 'sync' FROM pg_stat_replication WHERE application_name = 'standby'})
  or die 'the standby did not become synchronous';

my $first = $primary->safe_psql('postgres',
	'BEGIN; SELECT lease_fence.next_generation(); COMMIT;');

# Start a draw in an open transaction in its own session and return
# (session, pid) once psql has sent it.
sub start_draw
{
	my $s = $primary->background_psql('postgres', on_error_stop => 0);
	my $pid = $s->query_safe('SELECT pg_backend_pid()');
	$s->query_safe('BEGIN');
	$s->query_until(qr/lf-sent/,
		"\\echo lf-sent\nSELECT 'value:' || lease_fence.next_generation();\n");
	return ($s, $pid);
}

# wait until backend $pid waits for the synchronous standby: true, or
# false once poll_query_until gives up
sub waits_for_syncrep
{
	my ($pid) = @_;
	return $primary->poll_query_until('postgres',
		qq{SELECT wait_event = 'SyncRep' FROM pg_stat_activity WHERE pid = $pid});
}

#
# the standby is down: the draw waits, and returns once it is back
#
$standby->stop;
$primary->safe_psql('postgres', 'CHECKPOINT');
my ($s, $pid) = start_draw();
ok(waits_for_syncrep($pid),
	'with the synchronous standby down, next_generation() waits for it')
  or die 'the rest needs a draw that waits';
$s->{run}->pump_nb;
is($s->{stdout}, '', 'no generation has been returned while it waits');

$standby->start;
my $out = $s->query_until(qr/lf-done/, "\\echo lf-done\n");
like($out, qr/^value:(\d+)$/m,
	'next_generation() returns a generation once the standby is back');
my ($value) = $out =~ /^value:(\d+)$/m;
cmp_ok($value // 0, '>', $first, 'the generation is above the ones before');
$s->query_safe('COMMIT');
$s->quit;

#
# the standby is down and the waiting draw is cancelled: an ERROR, no value
#
$standby->stop;
$primary->safe_psql('postgres', 'CHECKPOINT');
($s, $pid) = start_draw();
waits_for_syncrep($pid) or die "backend $pid never waited for the synchronous standby";
$primary->safe_psql('postgres', "SELECT pg_cancel_backend($pid)");
$out = $s->query_until(qr/lf-done/, "\\echo lf-done\n");
unlike($out, qr/value:/, 'a cancelled wait returns no generation');
like(
	$s->{stderr},
	qr/ERROR:  canceling the wait for synchronous standbys: no generation is returned/,
	'a cancelled wait is an ERROR, not a WARNING with the value');
$s->{stderr} = '';
$s->query_safe('ROLLBACK');

# a statement_timeout is a cancel too
$s->query_safe('SET statement_timeout = 1000');
$out = $s->query_until(qr/lf-done/,
	"SELECT 'value:' || lease_fence.next_generation();\n\\echo lf-done\n");
unlike($out, qr/value:/, 'a wait ended by statement_timeout returns no generation');
like(
	$s->{stderr},
	qr/ERROR:  canceling the wait for synchronous standbys: no generation is returned/,
	'a wait ended by statement_timeout is an ERROR');
$s->quit;

# without synchronous standbys the same draw does not wait
$primary->safe_psql('postgres',
	"ALTER SYSTEM RESET synchronous_standby_names; SELECT pg_reload_conf()");
$primary->poll_query_until('postgres',
	q{SELECT current_setting('synchronous_standby_names') = ''})
  or die 'synchronous_standby_names was not reset';
$primary->safe_psql('postgres', 'CHECKPOINT');
my $free = $primary->safe_psql('postgres',
	'BEGIN; SELECT lease_fence.next_generation(); COMMIT;');
cmp_ok($free, '>', $value,
	'with synchronous_standby_names reset, next_generation() returns without the standby');

$primary->stop;
done_testing();

# generation_failover_fences.pl — what a PostgreSQL failover can undo of the
# fences (docs/guides/failover-and-generations.md, "What a PostgreSQL failover can undo").
#
# A fence is a committed row, as durable as its commit.  Two holders of one
# row: A with generation g1, then B with g2 > g1, whose fenced write is
# acknowledged by the primary; then the primary fails and its standby is
# promoted.
#  - With an asynchronous standby that did not have B's commit yet, the
#    promoted server has lost B's write and its fence: A, whose lease B
#    took, commits under g1 there.  That is the loss the README warns of;
#    this half pins it, so that the README's claim stays true.
#  - With a synchronous standby (synchronous_commit = on), B's commit was
#    acknowledged only once the standby had it: after the promotion B's
#    fence stands, A's write under g1 is refused with LF001, and so is A's
#    resource fence.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# a primary with one streaming standby; the fenced table and two generations
sub pair
{
	my ($name) = @_;
	my $primary = PostgreSQL::Test::Cluster->new("${name}_primary");
	$primary->init(allows_streaming => 1);
	$primary->start;
	$primary->safe_psql('postgres', q{
		CREATE EXTENSION lease_fence;
		CREATE TABLE account (id int PRIMARY KEY, owner text);
		INSERT INTO account VALUES (1, 'nobody');
		SELECT lease_fence.protect('account');
	});
	$primary->backup('b');
	my $standby = PostgreSQL::Test::Cluster->new("${name}_standby");
	$standby->init_from_backup($primary, 'b', has_streaming => 1);
	$standby->start;
	my $g1 = $primary->safe_psql('postgres', 'SELECT lease_fence.next_generation()');
	my $g2 = $primary->safe_psql('postgres', 'SELECT lease_fence.next_generation()');
	$primary->wait_for_catchup($standby);
	return ($primary, $standby, $g1, $g2);
}

# a fenced write of holder $who under generation $g, fencing the resource
# too; '' or the SQLSTATE of its error
sub fenced_write
{
	my ($node, $who, $g) = @_;
	my ($rc, $out, $err) = $node->psql('postgres', qq{
		BEGIN;
		SELECT lease_fence.set_generation($g);
		SELECT lease_fence.fence_resource('account:1');
		UPDATE account SET owner = '$who' WHERE id = 1;
		COMMIT;
	}, extra_params => [ '-v', 'ON_ERROR_STOP=1', '-v', 'VERBOSITY=verbose' ]);
	return $rc == 0 ? '' : ($err =~ /ERROR:\s+([0-9A-Z]{5}):/ ? $1 : $err);
}

#
# asynchronous: B's acknowledged write is lost at promotion, its fence too
#
{
	my ($primary, $standby, $g1, $g2) = pair('async');
	# the standby stops receiving; B's commit is acknowledged by the primary alone
	$standby->stop;
	is(fenced_write($primary, 'B', $g2), '', "async: B's fenced write under $g2 is acknowledged");
	$primary->stop('immediate');
	$standby->start;
	$standby->promote;
	is($standby->safe_psql('postgres', 'SELECT owner || \'/\' || fence FROM account WHERE id = 1'),
		'nobody/0', "async: after the promotion B's write and its fence are gone");
	is(fenced_write($standby, 'A', $g1), '',
		"async: so A, whose lease B had taken, commits under $g1 on the promoted server");
	$standby->stop;
}

#
# synchronous: B's acknowledged write survives the promotion, A is refused
#
{
	my ($primary, $standby, $g1, $g2) = pair('sync');
	$primary->safe_psql('postgres',
		"ALTER SYSTEM SET synchronous_standby_names = 'sync_standby'; SELECT pg_reload_conf()");
	$primary->poll_query_until('postgres',
		q{SELECT sync_state = 'sync' FROM pg_stat_replication WHERE application_name = 'sync_standby'})
	  or die 'the standby did not become synchronous';
	is(fenced_write($primary, 'B', $g2), '', "sync: B's fenced write under $g2 is acknowledged");
	$primary->stop('immediate');
	$standby->promote;
	is($standby->safe_psql('postgres', 'SELECT owner || \'/\' || fence FROM account WHERE id = 1'),
		"B/$g2", "sync: after the promotion B's write and its fence stand");
	is($standby->safe_psql('postgres',
			q{SELECT generation FROM lease_fence.resource_fences WHERE resource = 'account:1'}),
		$g2, "sync: and so does B's resource fence");
	is(fenced_write($standby, 'A', $g1), 'LF001',
		"sync: A's write under $g1 on the promoted server is refused with LF001");
	is($standby->safe_psql('postgres', 'SELECT owner FROM account WHERE id = 1'), 'B',
		"sync: B's row is unchanged");
	$standby->stop;
}

done_testing();

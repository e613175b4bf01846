# fence_resource_transaction_lease.pl — a transaction-scoped lease fences
# its resource: a stale holder's transaction never commits after a newer
# holder's transaction on that resource, whatever rows it wrote.
#
# Holder S takes a transaction-scoped lease on a resource and INSERTs a row
# nobody else will touch (no row fence can see that write).  Redis then
# loses S's grant (the key is deleted, as a failover or a restart without
# persistence would), and holder N's transaction-scoped acquire is granted.
# The commit check of S runs at S's COMMIT when lease_fence.commit_check is
# 'always' (LF010: S rolls back); under the default, near_expiry, S's young
# lease is not asked about and S commits.  Either way, between any check and
# the end of S's commit the lease alone cannot order S and N.  The resource
# fence does: N's acquire fences the resource too, and waits for S's
# transaction to end before it returns, so everything N does comes after S
# and N's next statement sees what S committed.  Once N has fenced it, S's
# generation is refused on that resource.
#
# Checked by hand without the fence in acquire(): N's acquire returns at
# once while S is still open, and the "waits" point fails.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use LeaseFenceRedis;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $redis = LeaseFenceRedis->new;
my $node = $redis->node('txfence');
$node->safe_psql('postgres',
	'CREATE TABLE job_log (job text, entry text, fence bigint NOT NULL DEFAULT 0)');

# One race, under each commit_check: S's COMMIT either asks Redis ('always':
# LF010, S rolls back) or trusts its young lease ('near_expiry', the
# default: S commits).  Either way N goes on only after S's transaction is
# over, and sees what S committed.
my $s = $node->background_psql('postgres', on_error_stop => 0);
my $n = $node->background_psql('postgres', on_error_stop => 0);
my $spid = $s->query_safe('SELECT pg_backend_pid()');
my $npid = $n->query_safe('SELECT pg_backend_pid()');
for my $check ('always', 'near_expiry')
{
	my $job = "job:$check";
	my $key = "lease_fence:{$job}";
	$s->query_safe("SET lease_fence.commit_check = '$check'");
	$s->query_safe('BEGIN');
	my $sgen = $s->query_safe(
		qq{SELECT generation FROM lease_fence.acquire('$job', 60000, 0, 'transaction') WHERE acquired});
	like($sgen, qr/^\d+$/, "$check: S acquires $job for its transaction");
	$s->query_safe(qq{INSERT INTO job_log VALUES ('$job', 'by S')});
	is($node->safe_psql('postgres',
			qq{SELECT generation FROM lease_fence.resource_fences WHERE resource = '$job'}),
		'', "$check: S's fence is not visible before S commits");

	# Redis loses S's grant; N is granted the lease and fences the resource:
	# it waits for S's transaction
	$redis->cli('DEL', $key);
	$n->query_safe('BEGIN');
	$n->query_until(qr/lf-sent/,
		"\\echo lf-sent\nSELECT 'acquire:' || status || ':' || generation "
		  . "FROM lease_fence.acquire('$job', 60000, 0, 'transaction');\n"
		  . "SELECT 'seen:' || count(*) FROM job_log WHERE job = '$job' AND entry = 'by S';\n");
	ok( $node->poll_query_until(
			'postgres',
			qq{SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $npid}),
		"$check: N's transaction-scoped acquire waits for S's transaction on the resource")
	  or die 'the rest needs an acquire that waits';
	is($redis->cli('EXISTS', $key), '1', "$check: while Redis has already granted N the lease");

	# S commits: with 'always' its check finds the lease lost (LF010); with
	# near_expiry nothing is asked and S's commit goes through
	$s->query('COMMIT');
	if ($check eq 'always')
	{
		like($s->{stderr}, qr/LF010|lost before commit/, "$check: S's commit check finds its lease lost");
	}
	else
	{
		is($s->{stderr}, '', "$check: S's young lease is not asked about: S commits");
	}
	$s->{stderr} = '';
	my $nout = $n->query_until(qr/lf-done/, "\\echo lf-done\n");
	my ($nstatus, $ngen) = $nout =~ /^acquire:(\w+):(\d+)$/m;
	is($nstatus, 'acquired', "$check: N's acquire returns acquired once S's transaction is over");
	cmp_ok($ngen // 0, '>', $sgen, "$check: N's generation is above S's");
	is($node->safe_psql('postgres',
			qq{SELECT count(*) FROM pg_stat_activity WHERE pid = $spid AND xact_start IS NOT NULL}),
		'0', "$check: S's transaction had ended when N's acquire returned");
	my ($seen) = $nout =~ /^seen:(\d+)$/m;
	is($seen, $check eq 'always' ? '0' : '1',
		"$check: N's next statement sees what S committed (" . ($check eq 'always' ? 'nothing' : "S's row") . ')');

	$n->query_safe(qq{INSERT INTO job_log VALUES ('$job', 'by N')});
	$n->query_safe('COMMIT');
	is($node->safe_psql('postgres',
			qq{SELECT string_agg(entry, ', ' ORDER BY entry) FROM job_log WHERE job = '$job'}),
		$check eq 'always' ? 'by N' : 'by N, by S',
		$check eq 'always' ? "$check: S's INSERT never committed; N's did" : "$check: S's INSERT committed before N's");
	is($node->safe_psql('postgres',
			qq{SELECT generation FROM lease_fence.resource_fences WHERE resource = '$job'}),
		$ngen, "$check: the resource's fence is N's generation");

	# S, still running with its old generation, is refused on the resource
	my ($ret, $out, $err) = $node->psql('postgres',
		"BEGIN; SET LOCAL lease_fence.generation = $sgen; SELECT lease_fence.fence_resource('$job'); COMMIT;",
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	like($err, qr/LF001.*stored generation $ngen, supplied generation $sgen/s,
		"$check: S's generation is stale on the resource now (LF001)");
}
$s->query_safe('RESET lease_fence.commit_check');

# a lease acquired in a subtransaction that rolls back fences again at commit
$s->query_safe('BEGIN');
$s->query_safe('SAVEPOINT sp');
my $g3 = $s->query_safe(
	q{SELECT generation FROM lease_fence.acquire('job:2', 60000, 0, 'transaction') WHERE acquired});
$s->query_safe('ROLLBACK TO SAVEPOINT sp');
$s->query_safe('COMMIT');
is($node->safe_psql('postgres',
		q{SELECT generation FROM lease_fence.resource_fences WHERE resource = 'job:2'}),
	$g3, 'a fence rolled back with its subtransaction is made again at commit');

$s->quit;
$n->quit;
$node->stop;
done_testing();

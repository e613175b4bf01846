# lease_stale_validity.pl — a grant Redis refuses or that comes too late:
# stale and insufficient_validity (docs/guides/leases.md, "Statuses").
#
# stale: a generation >= ours already reached Redis; nothing is set, and the
# database's generations are moved past the stored one (durably, never
# backwards), so that the next acquire succeeds.  insufficient_validity: the
# grant came back with less validity than asked for; acquire releases it at
# once, renew leaves the key ours or gone, never anyone else's.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use LeaseFenceRedis;
use LeaseFenceTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $redis = LeaseFenceRedis->new;
my $node = $redis->node('stale');
my $s1 = session($node);

#
# stale, and the healing of the generation space
#
{
	# Redis remembers a generation this database has not issued yet, as
	# after a restore from a backup (within the margin a stale answer
	# heals: generation_poisoned_key.pl shows what is beyond it)
	my $huge = sql_ok($node, 'SELECT lease_fence.next_generation()') + 1000000;
	need($redis->cli('SET', gkey('r-stale'), $huge), 'OK', 'SET of the :gen key');
	my $r = acquire($s1, 'r-stale', 30000);
	is(tf($r->{acquired}), 'false', 'stale: acquired is false');
	is($r->{status}, 'stale', 'stale: status stale');
	ok(!defined $r->{identity}, 'stale: identity is NULL');
	ok(!defined $r->{generation}, 'stale: generation is NULL');
	is($redis->cli('EXISTS', lkey('r-stale')), '0', 'stale: nothing was set (no lease key)');
	is($redis->cli('GET', gkey('r-stale')), $huge, 'stale: the :gen key is unchanged');
	ok(sql_ok($node, 'SELECT lease_fence.next_generation()') > $huge,
		'stale: next_generation() was advanced past the stored maximum');

	$r = acquire($s1, 'r-stale', 30000);
	is($r->{status}, 'acquired', 'stale: the next acquire succeeds');
	ok($r->{generation} > $huge, "stale: with a generation above the stored maximum ($r->{generation})");
	is($redis->cli('GET', lkey('r-stale')), $r->{identity}, 'stale: the lease key holds the new identity');
	is($redis->cli('GET', gkey('r-stale')), $r->{generation}, 'stale: the :gen key holds the new generation');
	release($s1, 'r-stale', $r->{identity});
}

#
# insufficient_validity: the grant came back with less validity than asked
# for (ttl 1000, drift 1% + 2 ms = 12 ms, so at most 988 ms < 995)
#
{
	my $r = acquire($s1, 'r-short', 1000, 995);
	is(tf($r->{acquired}), 'false', 'insufficient_validity (acquire): acquired is false');
	is($r->{status}, 'insufficient_validity', 'insufficient_validity (acquire): status');
	like($redis->cli('GET', gkey('r-short')), qr/^[1-9][0-9]*$/,
		'insufficient_validity (acquire): Redis did grant it (the :gen key was stored)');
	is($redis->cli('EXISTS', lkey('r-short')), '0',
		'insufficient_validity (acquire): the lease was released again (no lease key)');

	$r = acquire($s1, 'r-renew-short', 30000);
	my $id = $r->{identity};
	$r = renew($s1, 'r-renew-short', $id, 1000, 995);
	is(tf($r->{renewed}), 'false', 'insufficient_validity (renew): renewed is false');
	is($r->{status}, 'insufficient_validity', 'insufficient_validity (renew): status');
	my $cur = $redis->cli('GET', lkey('r-renew-short'));
	ok($cur eq '' || $cur eq $id,
		'insufficient_validity (renew): the key is ours or gone, never anyone else\'s');
	release($s1, 'r-renew-short', $id);
}
$s1->quit;

generations_increase();

$node->stop;
$redis->stop;
done_testing();

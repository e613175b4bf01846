# lease_explicit.pl — the definite outcomes of an explicit-scope lease: acquired,
# busy, renewed, released, not_held and lost (docs/guides/leases.md, "Statuses"), and what
# Redis holds after each, read back with redis-cli.
#
# A lease's key is only ever touched by its holder: renew never recreates a
# lost key nor overwrites or extends someone else's, release never deletes
# someone else's.

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
my $node = $redis->node('explicit');

#
# acquired, busy, renewed, released, not_held
#
my $s1 = session($node);
my ($id1, $gen1);
{
	my $r = acquire($s1, 'r-basic', 30000);
	is(tf($r->{acquired}), 'true', 'acquired: acquired is true');
	is($r->{status}, 'acquired', 'acquired: status acquired');
	is($r->{resource}, 'r-basic', 'acquired: the resource is returned');
	like($r->{identity} // '', $hex32, 'acquired: identity is 128 random bits in hex');
	ok(defined $r->{generation} && $r->{generation} > 0, 'acquired: a positive generation');
	ok(defined $r->{validity_ms} && $r->{validity_ms} > 0 && $r->{validity_ms} <= 30000,
		'acquired: 0 < validity_ms <= ttl_ms');
	($id1, $gen1) = @$r{qw(identity generation)};

	is($redis->cli('GET', lkey('r-basic')), $id1, 'acquired: the lease key holds the identity');
	my $pttl = $redis->cli('PTTL', lkey('r-basic'));
	ok($pttl > 0 && $pttl <= 30000, "acquired: the lease key has the TTL (PTTL $pttl)");
	is($redis->cli('GET', gkey('r-basic')), $gen1,
		'acquired: the :gen key holds the generation granted');

	my $v = lease_view($s1, $id1);
	is($v && $v->{state}, 'held', 'leases view: the acquired lease is held');
	is($v && $v->{scope}, 'explicit', 'leases view: scope explicit');
	is($v && $v->{generation}, $gen1, 'leases view: its generation');
	is($v && $v->{resource}, 'r-basic', 'leases view: its resource');
	is(sql_ok($s1, "SELECT expires_at > acquired_at FROM lease_fence.leases WHERE identity = '$id1'"),
		't', 'leases view: expires_at after acquired_at');

	# a generation is never handed out twice: next_generation() is above it
	ok(sql_ok($node, 'SELECT lease_fence.next_generation()') > $gen1,
		'next_generation() is above the generation of the lease');
}
{
	my $r = acquire($node, 'r-basic', 30000);
	is(tf($r->{acquired}), 'false', 'busy: acquired is false');
	is($r->{status}, 'busy', 'busy: a second acquire of a held resource is busy');
	ok(!defined $r->{identity}, 'busy: identity is NULL');
	ok(!defined $r->{generation}, 'busy: generation is NULL');
	is($redis->cli('GET', lkey('r-basic')), $id1, 'busy: the lease key still holds the first identity');
	is($redis->cli('GET', gkey('r-basic')), $gen1, 'busy: the :gen key is unchanged');
}
{
	my $r = renew($s1, 'r-basic', $id1, 60000);
	is(tf($r->{renewed}), 'true', 'renewed: renewed is true');
	is($r->{status}, 'renewed', 'renewed: status renewed');
	ok(defined $r->{validity_ms} && $r->{validity_ms} > 30000 && $r->{validity_ms} <= 60000,
		'renewed: validity_ms is measured against the new ttl_ms');
	my $pttl = $redis->cli('PTTL', lkey('r-basic'));
	ok($pttl > 30000 && $pttl <= 60000, "renewed: the key's TTL was extended (PTTL $pttl)");
	is($redis->cli('GET', lkey('r-basic')), $id1, 'renewed: the key still holds the identity');
}
{
	my $r = release($s1, 'r-basic', $id1);
	is(tf($r->{released}), 'true', 'released: released is true');
	is($r->{status}, 'released', 'released: status released');
	is($redis->cli('EXISTS', lkey('r-basic')), '0', 'released: the lease key is gone');
	is($redis->cli('GET', gkey('r-basic')), $gen1,
		'released: the :gen key keeps the highest generation granted');
	my $v = lease_view($s1, $id1);
	ok(!defined $v || $v->{state} eq 'released',
		'leases view: a released lease is no longer held');

	$r = release($s1, 'r-basic', $id1);
	is(tf($r->{released}), 'false', 'not_held: released is false on a second release');
	is($r->{status}, 'not_held', 'not_held: releasing twice');

	$r = acquire($node, 'r-basic', 30000);
	is($r->{status}, 'acquired', 'after release the resource can be acquired again');
	ok($r->{generation} > $gen1, 'the new grant has a greater generation');
	is(release($node, 'r-basic', $r->{identity})->{status}, 'released', 'and released');
}
{
	my $r = acquire($s1, 'r-wrong', 30000);
	my $id = $r->{identity};
	my $other = 'f' x 32;
	$r = release($s1, 'r-wrong', $other);
	is(tf($r->{released}), 'false', 'not_held: release with a wrong identity: released is false');
	is($r->{status}, 'not_held', 'not_held: release with a wrong identity');
	is($redis->cli('GET', lkey('r-wrong')), $id,
		'not_held: a release with a wrong identity leaves the key intact');
	is(release($s1, 'r-wrong', $id)->{status}, 'released', 'the right identity releases it');
}

#
# lost: the key is gone, or someone else's; renew never recreates or
# overwrites it, release never deletes someone else's
#
{
	my $r = acquire($s1, 'r-lost-del', 30000);
	my $id = $r->{identity};
	# an admin DELetes the lease key
	need($redis->cli('DEL', lkey('r-lost-del')), '1', 'DEL of the lease key');
	$r = renew($s1, 'r-lost-del', $id, 30000);
	is(tf($r->{renewed}), 'false', 'lost (key gone): renewed is false');
	is($r->{status}, 'lost', 'lost (key gone): status lost');
	is($redis->cli('EXISTS', lkey('r-lost-del')), '0', 'lost (key gone): renew did not recreate the key');

	$r = acquire($s1, 'r-lost-other', 30000);
	$id = $r->{identity};
	my $other = '0123456789abcdef0123456789abcdef';
	# an admin gives the lease key to another identity
	need($redis->cli('SET', lkey('r-lost-other'), $other, 'PX', 30000), 'OK',
		'SET of the lease key to another identity');
	$r = renew($s1, 'r-lost-other', $id, 600000);
	is(tf($r->{renewed}), 'false', "lost (someone else's): renewed is false");
	is($r->{status}, 'lost', "lost (someone else's): status lost");
	is($redis->cli('GET', lkey('r-lost-other')), $other, "lost: renew did not overwrite the other identity");
	my $pttl = $redis->cli('PTTL', lkey('r-lost-other'));
	ok($pttl > 0 && $pttl <= 30000, "lost: renew did not extend someone else's TTL (PTTL $pttl)");
	$r = release($s1, 'r-lost-other', $id);
	is($r->{status}, 'not_held', "release of a lease that is someone else's: not_held");
	is($redis->cli('GET', lkey('r-lost-other')), $other, "release did not delete someone else's key");
	$redis->cli('DEL', lkey('r-lost-other'));
}
$s1->quit;

generations_increase();

$node->stop;
$redis->stop;
done_testing();

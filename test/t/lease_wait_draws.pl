# lease_wait_draws.pl — a waiting acquire draws one generation, however often
# it wakes (docs/guides/keepalive-and-waiting.md, "Waiting for a busy lease"): an attempt answered busy
# stored nothing, so the next attempt of the same wait tries the same
# generation again.
#
# The lease key is set with redis-cli, so its holder draws nothing.  A
# waiter's first attempt is busy, it subscribes and tries again (busy), then
# K release messages published by hand each wake it (wait/woken) into an
# attempt that finds the key still there.  Once the key is gone, it acquires
# with the generation right after a next_generation() taken before the wait:
# one draw for the whole wait, whatever the 1-second rechecks add.  (1.2 drew
# one per attempt: at least K + 2.)

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use JSON::PP;
use LeaseFenceRedis;
use LeaseFenceTest;
use LeaseFenceTopology;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $K = 5;
my $res = 'w-draws';
my $channel = "lease_fence:{$res}:released";

my $redis = LeaseFenceRedis->new;
my $node = $redis->node('wait_draws', "shared_preload_libraries = 'lease_fence'");

sub woken
{
	return sql_ok($node,
		"SELECT count FROM lease_fence.stats WHERE operation = 'wait' AND outcome = 'woken'");
}

sub subscribers
{
	my @lines = split /\n/, $redis->cli('PUBSUB', 'NUMSUB', $channel);
	return $lines[1] // 0;
}

# a holder that is not lease_fence: nothing drawn for it
need($redis->cli('SET', lkey($res), 'someone', 'PX', 60000), 'OK', 'SET of the lease key');

my $g0 = sql_ok($node, 'SELECT lease_fence.next_generation()');
my $woken0 = woken();

my $waiter = session($node);
$waiter->query_until(qr/lf-started/,
	"\\echo lf-started\nSELECT row_to_json(a) FROM lease_fence.acquire('$res', 30000, wait_ms => 20000) a;\n");
LeaseFenceTopology::wait_for('the waiter to subscribe', sub { subscribers() == 1 });

# K wake-ups, each one counted before the next message is sent
for my $i (1 .. $K)
{
	my $before = woken();
	need($redis->cli('PUBLISH', $channel, 'x'), '1', "PUBLISH $i reaches the waiter");
	LeaseFenceTopology::wait_for("wake-up $i", sub { woken() > $before });
}
is($redis->cli('GET', lkey($res)), 'someone', "after $K wake-ups the key is still the holder's");

# the key goes, and one more message lets the waiter in
need($redis->cli('DEL', lkey($res)), '1', 'DEL of the lease key');
$redis->cli('PUBLISH', $channel, 'x');    # (no subscriber if a wake-up's attempt acquired already)
my $out = sql_ok($waiter, "SELECT 'lf-after'");
my ($line) = grep { /^\{/ } split /\n/, $out;
my $r = defined $line ? JSON::PP->new->decode($line) : {};

is($r->{status}, 'acquired', 'the waiter acquires once the key is gone');
is($redis->cli('GET', lkey($res)), $r->{identity} // '', "the key holds the waiter's identity");
my $drawn = defined $r->{generation} ? $r->{generation} - $g0 : -1;
is($drawn, 1, "its generation is the one drawn right after the one before the wait: "
	  . "one draw for the first attempt, the one after subscribing and $K wake-ups");
is(sql_ok($node, 'SELECT lease_fence.next_generation()') - $g0, 2,
	'and the sequence moved by that one draw only (and this one)');
ok(woken() >= $woken0 + $K, "wait/woken counted at least the $K wake-ups");
is(subscribers(), 0, 'the subscription ended with the wait');

release($waiter, $res, $r->{identity}) if $r->{identity};
$waiter->quit;
$node->stop;
$redis->stop;
done_testing();

# lease_fair_failover.pl — fair waiting through a Sentinel failover
# (docs/guides/keepalive-and-waiting.md).  A master, two replicas, three redis-sentinels,
# and a node with lease_fence preloaded (the sentinel watch); a table
# protected by the fence, written by every holder under its generation and
# the resource's fence.
#
# R: a holder H and four fair waiters W1, W4, W2, W3 (queued in that
# order, the queue replicated; W1, W2 and W3 with fair_waiter_ttl_ms 60000,
# so that their places, and the queue key, whose TTL is its longest-lived
# waiter's, outlive the outage); the master is killed (kill -9), the
# sentinels held back until the test lets them; W4 is cancelled while
# there is no master (its leave cannot reach Redis: its place ends by its
# waiter key's TTL).  R2: a holder H2 and two fair waiters V1, V2, whose
# lease and queue the new master is made to lose after the failover (as
# when they had not reached a replica, or the queue's TTL ran out while
# there was no master).  Pinned:
#  - while there is no master the waiters wait on (never busy); W4's cancel
#    is 57014, with the WARNING that its place ends by the waiter TTL;
#  - the kept queue: after the failover queue() shows W1, W2, W3 in their
#    order (W4's dead place skipped), and H's release grants them in turn,
#    one per release (the others still waiting, the lease key the grantee's),
#    each generation above the one before, each fenced write accepted and
#    the one before's refused (LF001);
#  - the lost queue: V1 and V2 join again and each ends acquired in turn,
#    the first while H2 still thinks it holds: H2's fenced write is LF001,
#    its release not_held;
#  - nobody waits forever: no waiting row is left, both queues are empty.

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

my ($master, $replicas, $sentinels, $node) = LeaseFenceTopology::sentinel_group('fair_failover');
my @replicas = @$replicas;
my @sentinels = @$sentinels;

$node->safe_psql('postgres', q{
CREATE TABLE ledger (id int PRIMARY KEY, holder text, grants int);
SELECT lease_fence.protect('ledger');
INSERT INTO ledger VALUES (1, 'nobody', 0), (2, 'nobody', 0);
});

sub running
{
	my ($pid) = @_;
	return sql_ok($node, "SELECT state FROM pg_stat_activity WHERE pid = $pid") eq 'active';
}

# the live waiters of a resource, first to last: "pid pid ..."
sub queue_pids
{
	my ($resource) = @_;
	my ($out, $err) = run_sql($node,
		"SELECT coalesce(string_agg(coalesce(pid::text, '?'), ' ' ORDER BY position), '')"
		  . " FROM lease_fence.queue(" . lit($resource) . ") WHERE ttl_ms > 0");
	return $err =~ /ERROR:/ ? '(queue() failed)' : $out;
}

sub queue_identities
{
	my ($resource) = @_;
	return sql_ok($node, "SELECT string_agg(identity, ' ' ORDER BY position) FROM lease_fence.queue("
		  . lit($resource) . ")");
}

# a fenced write of row $id under generation $gen, checking resource
# $resource's fence: '' (committed) or its SQLSTATE
sub fenced_write
{
	my ($who, $id, $gen, $resource, $name) = @_;
	my (undef, $err) = run_sql($who,
		"BEGIN; SELECT lease_fence.set_generation($gen, " . lit($resource) . ");"
		  . " UPDATE ledger SET holder = " . lit($name) . ", grants = grants + 1 WHERE id = $id; COMMIT;");
	return sqlstate($err);
}

sub named
{
	my ($s) = @_;
	my (undef, $port) = split /\n/, $s->cli('SENTINEL', 'get-master-addr-by-name', 'lf');
	return $port;
}

# a fair waiter of $resource, started (and queued, $n-th) one after
# another; $ttl: its lease_fence.fair_waiter_ttl_ms (default: 3000)
sub start_waiter
{
	my ($resource, $n, $what, $ttl) = @_;
	my $s = session($node);
	my $pid = sql_ok($s, 'SELECT pg_backend_pid()');
	sql_ok($s, "SET lease_fence.fair_waiter_ttl_ms = $ttl") if $ttl;
	start_sql($s, "SELECT row_to_json(a) FROM lease_fence.acquire(" . lit($resource)
		  . ", 600000, wait_ms => 600000, fair => true) a;");
	LeaseFenceTopology::wait_for("$what to queue", sub {
		sql_ok($node, "SELECT count(*) FROM lease_fence.queue(" . lit($resource) . ")") == $n });
	return { s => $s, pid => $pid, name => $what };
}

#
# Before: R held by H, W1 W4 W2 W3 queued; R2 held by H2, V1 V2 queued;
# everything on both replicas
#
my $h = session($node);
my $held = acquire($h, 'R', 600000);
$held->{name} = 'H';
need($held->{status}, 'acquired', 'H acquires R');
need(fenced_write($h, 1, $held->{generation}, 'R', 'H'), '', "H's fenced write");
# (every waiter keeps its place for a minute, so that none of them has a
# renewal in flight when the master is killed -- that one's outcome would
# be unknown, and its wait end -- and the queue outlives the outage; W4's
# place is made to end on the new master, as if its key had expired)
my @w = map { start_waiter('R', $_ + 1, (qw(W1 W4 W2 W3))[$_], 60000) } 0 .. 3;
my ($w1, $w4, $w2, $w3) = @w;
my $h2 = session($node);
my $held2 = acquire($h2, 'R2', 600000);
need($held2->{status}, 'acquired', 'H2 acquires R2');
need(fenced_write($h2, 2, $held2->{generation}, 'R2', 'H2'), '', "H2's fenced write");
my @v = map { start_waiter('R2', $_ + 1, "V" . ($_ + 1), 60000) } 0 .. 1;

is(queue_pids('R'), join(' ', map { $_->{pid} } @w), 'queue(): W1, W4, W2, W3 wait for R in their order');
my $ids = queue_identities('R');
my $ids2 = queue_identities('R2');
LeaseFenceTopology::wait_for('both replicas to have both leases and both queues', sub {
	!grep {
		my $r = $_;
		$r->cli('GET', lkey('R')) ne $held->{identity}
		  || $r->cli('GET', lkey('R2')) ne $held2->{identity}
		  || join(' ', split /\n/, $r->cli('ZRANGE', lkey('R') . ':queue', 0, -1)) ne $ids
		  || join(' ', split /\n/, $r->cli('ZRANGE', lkey('R2') . ':queue', 0, -1)) ne $ids2
	} @replicas });

#
# The master dies; the sentinels wait until the test lets them
#
for my $s (@sentinels)
{
	need($s->cli('SENTINEL', 'SET', 'lf', 'down-after-milliseconds', '3600000'), 'OK',
		'the sentinel ' . $s->port . ' waits an hour before it calls the master down');
}
my $old_port = $master->port;
my $unavailable = sql_ok($node,
	"SELECT count FROM lease_fence.stats WHERE operation = 'acquire' AND outcome = 'unavailable'");
LeaseFenceTopology::kill9($master);

# W4 is cancelled while there is no master (once an attempt met the dead
# master, or a waiter returned)
LeaseFenceTopology::wait_for('an attempt to meet the dead master', sub {
	sql_ok($node, "SELECT count FROM lease_fence.stats WHERE operation = 'acquire' AND outcome = 'unavailable'")
	  > $unavailable || grep { !running($_->{pid}) } @w, @v });
ok(running($_->{pid}), "$_->{name} waits on while there is no master (never busy)") for @w, @v;
sql_ok($node, "SELECT pg_cancel_backend($w4->{pid})");
{
	my ($row, $err) = finish_row($w4->{s});
	is(sqlstate($err), '57014', 'W4, cancelled while there is no master: 57014');
	like($err, qr/could not confirm that this backend left the queue of resource "R".*fair_waiter_ttl_ms/s,
		'with the WARNING that its place ends by lease_fence.fair_waiter_ttl_ms');
}

for my $s (@sentinels)
{
	need($s->cli('SENTINEL', 'SET', 'lf', 'down-after-milliseconds', '3000'), 'OK',
		'the sentinel ' . $s->port . ' calls the master down after 3000 ms');
}
my $new;
LeaseFenceTopology::wait_for('the sentinels to agree on a new master', sub {
	my %ports = map { named($_) => 1 } @sentinels;
	my @ports = keys %ports;
	return 0 unless @ports == 1 && $ports[0] != $old_port;
	($new) = grep { $_->port == $ports[0] } @replicas;
	return $new && (split /\n/, $new->cli('ROLE'))[0] eq 'master'
	  && !grep { $_->cli('SENTINEL', 'master', 'lf') =~ /failover_in_progress|o_down|s_down/ } @sentinels;
});

# R2 lost its lease and its queue in the failover (as if they had not
# reached the replica): deleted on the new master
my @v_keys = map { lkey('R2') . ":queue:$_" } split / /, $ids2;
need($new->cli('DEL', lkey('R2'), lkey('R2') . ':queue', @v_keys) > 0 ? 'yes' : 'no', 'yes',
	"R2's lease and queue deleted on the new master");

# W4 was cancelled while there was no master, its leave unconfirmed: its
# place ends with its key (deleted here, as its TTL would)
{
	my $w4_identity = (split / /, $ids)[1];
	need($new->cli('DEL', lkey('R') . ":queue:$w4_identity"), '1', "W4's waiter key ends on the new master");
}

#
# The kept queue: W1, W2, W3 in turn
#
LeaseFenceTopology::wait_for('W1, W2, W3 to be the live waiters of R on the new master', sub {
	join(' ', sort split / /, queue_pids('R')) eq join(' ', sort map { $_->{pid} } $w1, $w2, $w3)
	  || grep { !running($_->{pid}) } $w1, $w2, $w3 });
is(queue_pids('R'), join(' ', map { $_->{pid} } $w1, $w2, $w3),
	'after the failover queue() shows W1, W2, W3 in their order, W4 skipped');
ok(running($_->{pid}), "$_->{name} still waits after the failover") for $w1, $w2, $w3;

my ($released, %tries);
LeaseFenceTopology::wait_for('H to release R on the new master', sub {
	$released = call($h, "lease_fence.release('R', " . lit($held->{identity}) . ")");
	$tries{ $released->{status} }++;
	$released->{status} ne 'unavailable';
});
is($released->{status}, 'released', 'H releases R after the failover ('
	  . join(', ', map { "$_ $tries{$_}" } sort keys %tries) . ')');
my $prev = $held;
my @turn = ($w1, $w2, $w3);
for my $i (0 .. $#turn)
{
	my $w = $turn[$i];
	my $done;
	LeaseFenceTopology::wait_for("a waiter of R to return after $prev->{name}'s release", sub {
		($done) = grep { !running($_->{pid}) } @turn[ $i .. $#turn ];
		defined $done });
	is($done->{name}, $w->{name}, "$w->{name} returns next (it came first of those left)");
	# (out of turn: the points below are about the one that returned)
	if ($done != $w)
	{
		my ($j) = grep { $turn[$_] == $done } $i .. $#turn;
		@turn[ $i, $j ] = @turn[ $j, $i ];
		$w = $done;
	}
	my ($got) = finish_row($w->{s});
	is($got->{status}, 'acquired', "$w->{name} is granted R");
	$got->{name} = $w->{name};
	cmp_ok($got->{generation} // 0, '>', $prev->{generation}, "$w->{name}: its generation is above the one before");
	is($new->cli('GET', lkey('R')), $got->{identity} // 'none', "$w->{name}: the lease key on the new master is its");
	ok(running($_->{pid}), "$_->{name} still waits: one grant per release") for @turn[ $i + 1 .. $#turn ];
	is(fenced_write($w->{s}, 1, $got->{generation} // 0, 'R', $w->{name}), '', "$w->{name}'s fenced write is accepted");
	my $before = $prev == $held ? $h : $turn[ $i - 1 ]{s};
	is(fenced_write($before, 1, $prev->{generation}, 'R', 'late'), 'LF001',
		"a write under the generation before $w->{name}'s: LF001");
	my $r = call($w->{s}, "lease_fence.release('R', " . lit($got->{identity} // '') . ")");
	is($r->{status}, 'released', "$w->{name} releases R");
	$prev = $got;
}
is(sql_ok($node, "SELECT holder || ' ' || grants || ' ' || fence FROM ledger WHERE id = 1"),
	"W3 4 $prev->{generation}", 'R: four fenced writes, the last W3\'s under its generation');

#
# The lost queue: V1 and V2 each end acquired, in turn
#
# which one is granted first is which one asked first after the loss
my ($v_first, $v_second);
LeaseFenceTopology::wait_for('V1 or V2 to return', sub {
	($v_first) = grep { !running($_->{pid}) } @v;
	defined $v_first });
($v_second) = grep { $_ != $v_first } @v;
{
	my ($a1) = finish_row($v_first->{s});
	is($a1->{status}, 'acquired', "R2 lost with its queue: a waiter ($v_first->{name}) is granted on the new master");
	cmp_ok($a1->{generation} // 0, '>', $held2->{generation}, "its generation is above H2's");
	ok(running($v_second->{pid}), "$v_second->{name} still waits: one holder at a time");
	is(fenced_write($v_first->{s}, 2, $a1->{generation} // 0, 'R2', $v_first->{name}), '',
		"$v_first->{name}'s fenced write is accepted");
	is(fenced_write($h2, 2, $held2->{generation}, 'R2', 'H2'), 'LF001',
		'H2, which still thinks it holds R2: its fenced write is LF001');
	is(call($h2, "lease_fence.release('R2', " . lit($held2->{identity}) . ")")->{status}, 'not_held',
		'and its release is not_held');
	is(call($v_first->{s}, "lease_fence.release('R2', " . lit($a1->{identity} // '') . ")")->{status},
		'released', "$v_first->{name} releases R2");
	my ($a2) = finish_row($v_second->{s});
	is($a2->{status}, 'acquired', "$v_second->{name} is granted R2 next");
	cmp_ok($a2->{generation} // 0, '>', $a1->{generation} // 0, 'its generation is above the one before');
	is(fenced_write($v_second->{s}, 2, $a2->{generation} // 0, 'R2', $v_second->{name}), '',
		"$v_second->{name}'s fenced write is accepted");
	call($v_second->{s}, "lease_fence.release('R2', " . lit($a2->{identity} // '') . ")");
}

is(sql_ok($node, "SELECT count(*) FROM lease_fence.all_leases WHERE state = 'waiting'"), '0',
	'nobody waits any more: no waiting row is left');
is(sql_ok($node, "SELECT count(*) FROM lease_fence.queue('R')") . ' '
	  . sql_ok($node, "SELECT count(*) FROM lease_fence.queue('R2')"), '0 0', 'both queues are empty');

$_->{s}->quit for @w, @v;
$_->quit for $h, $h2;
$node->stop;
done_testing();

# lease_election_failover.pl — an election through a Sentinel failover
# (docs/guides/leader-election.md; docs/reference.md, lease_fence.campaign:
# while Redis cannot be asked the wait goes on, and a wait that ends then is
# unavailable, never busy).
# A master, two replicas, three redis-sentinels, and a node with lease_fence preloaded (the sentinel
# watch).  A leader L holds election E (its key on both replicas); a
# follower F campaigns for E with a generous wait_ms; once F waits, the
# master is killed (kill -9).  Pinned:
#  - while the master is down (the sentinels are held back from calling it
#    down until the test lets them: then after 3000 ms), a campaign with a short wait_ms ends
#    unavailable (never busy, never a silent follower: no leader was seen);
#    a campaign with a generous wait_ms that started while the master was
#    down goes on through the unavailable attempts (the WARNINGs say so)
#    and wins on the new master once the sentinels promoted it; F waits on;
#  - F does not end busy while Redis fails over: once every sentinel names
#    the new master, F still waits, and leader() shows L (its term, value
#    and identity replicated to the new master);
#  - L resigns after the failover: F wins at once with a term above L's, its
#    key is on the new master, the election's resource fence is F's term,
#    and a write of L's term checking the fence is LF001.

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
use Time::HiRes qw(usleep);

my ($master, $replicas, $sentinels, $node) = LeaseFenceTopology::sentinel_group('elect_failover');
my @replicas = @$replicas;
my @sentinels = @$sentinels;

sub counter
{
	my ($op, $outcome) = @_;
	return sql_ok($node,
		"SELECT count FROM lease_fence.stats WHERE operation = '$op' AND outcome = '$outcome'");
}

sub campaign_sql
{
	my ($election, $ttl, %o) = @_;
	my $sql = "lease_fence.campaign(" . lit($election) . ", $ttl";
	$sql .= ", wait_ms => $o{wait_ms}" if defined $o{wait_ms};
	$sql .= ", value => " . lit($o{value}) if defined $o{value};
	return "$sql)";
}

# the port each sentinel names for lf
sub named
{
	my ($s) = @_;
	my (undef, $port) = split /\n/, $s->cli('SENTINEL', 'get-master-addr-by-name', 'lf');
	return $port;
}

# a backend is still running its statement (it has not returned)
sub running
{
	my ($pid) = @_;
	return sql_ok($node, "SELECT state FROM pg_stat_activity WHERE pid = $pid") eq 'active';
}

my $value = "leader-host:8080\n\"quoted\" 'term'";
my $leader = session($node);
my $cl = call($leader, campaign_sql('E', 600000, value => $value));
need($cl->{status}, 'acquired', 'L campaigns for E');
LeaseFenceTopology::wait_for("both replicas to have E's lease, generation and value", sub {
	!grep {
		$_->cli('GET', lkey('E')) ne $cl->{identity}
		  || $_->cli('GET', gkey('E')) ne $cl->{term}
		  || $_->cli('EXISTS', 'lease_fence:{E}:value') ne '1'
	} @replicas });

# F waits for E: subscribed on the master, its attempt after that busy
my $follower = session($node);
my $fpid = sql_ok($follower, 'SELECT pg_backend_pid()');
{
	my $trips = acquire_round_trips($node);
	start_sql($follower, "SELECT row_to_json(c) FROM " . campaign_sql('E', 600000, wait_ms => 600000) . " c;");
	wait_until_waiting($node, $trips,
		sub { (split /\n/, $master->cli('PUBSUB', 'NUMSUB', 'lease_fence:{E}:released'))[1] == 1 },
		'the follower F');
}

# The sentinels are told to wait before they call the master down, so
# that the master stays down, named by every sentinel, for as long as the
# campaigns below need; the failover starts when the setting is put back.
for my $s (@sentinels)
{
	need($s->cli('SENTINEL', 'SET', 'lf', 'down-after-milliseconds', '3600000'), 'OK',
		'the sentinel ' . $s->port . ' waits an hour before it calls the master down');
}
my $old_port = $master->port;
LeaseFenceTopology::kill9($master);

# While the master is down.  G campaigns for an election nobody leads, with
# a generous wait; then a campaign with a short wait, from a new session
# (it must connect: to a master that is gone).
my $g = session($node);
my $gpid = sql_ok($g, 'SELECT pg_backend_pid()');
my $unavailable = counter('acquire', 'unavailable');
start_sql($g, "SELECT row_to_json(c) FROM " . campaign_sql('G', 600000, wait_ms => 600000) . " c;");
my $short = call($node, campaign_sql('S', 600000, wait_ms => 300));
is($short->{status}, 'unavailable',
	'a campaign with a short wait_ms while the master is down: unavailable at its end, never busy');
ok(!defined $short->{identity} && !defined $short->{term}, 'unavailable: no identity, no term');
like($short->{reason} // '', qr/\S/, 'unavailable: with a reason');
# G's first attempt met the dead master: G is in its wait (between
# attempts), or has returned
LeaseFenceTopology::wait_for('G to wait between attempts, or to return', sub {
	sql_ok($node, "SELECT state || '/' || coalesce(wait_event_type, '') FROM pg_stat_activity WHERE pid = $gpid")
	  =~ m{^(active/Extension|idle/.*)$} });
cmp_ok(counter('acquire', 'unavailable'), '>', $unavailable, 'attempts were unavailable meanwhile (counted)');
ok(running($gpid), 'G, campaigning while the master is down, waits on through unavailable attempts');
ok(running($fpid), 'F waits on while the master is down: not busy, not unavailable');
need(scalar(grep { named($_) == $old_port } @sentinels), 3, 'every sentinel still names the dead master');

# Let them fail over: the dead master is called down after 3000 ms.  (Not
# the 1000 ms of the harness: on a loaded machine a sentinel has called the
# freshly promoted master down a second after the switch and failed over
# again, to the other replica, which had not yet synced what was written
# in between -- a second failover that this test is not about.)
for my $s (@sentinels)
{
	need($s->cli('SENTINEL', 'SET', 'lf', 'down-after-milliseconds', '3000'), 'OK',
		'the sentinel ' . $s->port . ' calls the master down after 3000 ms');
}

# the failover: every sentinel names the same replica, which says it is
# the master, and none reports a failover under way
my $new;
LeaseFenceTopology::wait_for('the sentinels to agree on a new master', sub {
	my %ports = map { named($_) => 1 } @sentinels;
	my @ports = keys %ports;
	return 0 unless @ports == 1 && $ports[0] != $old_port;
	($new) = grep { $_->port == $ports[0] } @replicas;
	return $new && (split /\n/, $new->cli('ROLE'))[0] eq 'master'
	  && !grep { $_->cli('SENTINEL', 'master', 'lf') =~ /failover_in_progress|o_down|s_down/ } @sentinels;
});

my $cg = finish_row($g);
is($cg->{status}, 'acquired', 'G, which campaigned while the master was down, wins after the failover');
is($new->cli('GET', lkey('G')), $cg->{identity} // 'none', "G's lease is on the new master");
is(sql_ok($node, "SELECT generation FROM lease_fence.resource_fences WHERE resource = 'G'"),
	$cg->{term} // 'none', "G's resource fence is its term");

# F: still a follower, waiting -- the failover did not end its wait busy
LeaseFenceTopology::wait_for("leader() to answer from the new master", sub {
	my (undef, $err) = run_sql($node, "SELECT * FROM lease_fence.leader('E')");
	sqlstate($err) eq '';
});
my $l = call($node, "lease_fence.leader('E')");
is(tf($l->{held}), 'true', 'after the failover leader() shows E held');
is($l->{identity}, $cl->{identity}, "by L: its lease was replicated to the new master");
is($l->{term}, $cl->{term}, "with L's term");
is($l->{value}, $value, "and L's value, byte for byte");
ok(running($fpid), 'F is still waiting after the failover: it did not end busy while Redis failed over');

# L resigns after the failover (its first tries may meet a watch that has
# not seen the switch yet: unavailable, which released nothing)
my ($resigned, %tries);
LeaseFenceTopology::wait_for('L to resign on the new master', sub {
	$resigned = call($leader, "lease_fence.resign('E', " . lit($cl->{identity}) . ")");
	$tries{ $resigned->{status} }++;
	$resigned->{status} ne 'unavailable';
});
is($resigned->{status}, 'released', 'L resigns after the failover: released ('
	  . join(', ', map { "$_ $tries{$_}" } sort keys %tries) . ')');
my $cf = finish_row($follower);
is($cf->{status}, 'acquired', 'F wins once L resigned');
cmp_ok($cf->{term}, '>', $cl->{term}, "F's term is above L's");
is($new->cli('GET', lkey('E')), $cf->{identity} // 'none', "F's lease is on the new master");
is(sql_ok($node, "SELECT generation FROM lease_fence.resource_fences WHERE resource = 'E'"),
	$cf->{term} // 'none', "E's resource fence is F's term");
{
	my (undef, $err) = run_sql($node,
		"BEGIN; SELECT lease_fence.set_generation($cl->{term}, 'E'); COMMIT;");
	is(sqlstate($err), 'LF001', "a write of L's term checking E's fence: LF001");
}
$l = call($node, "lease_fence.leader('E')");
is($l->{identity} . ' ' . $l->{term}, "$cf->{identity} $cf->{term}", 'leader(): F, with its term');
cmp_ok(counter('election', 'won'), '>=', 3, 'election / won counted (L, G, F)');

$_->quit for $leader, $follower, $g;
$node->stop;
done_testing();

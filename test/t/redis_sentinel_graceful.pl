# redis_sentinel_graceful.pl — a graceful SENTINEL FAILOVER: nothing of a
# lease lands on the old master, which stays up and writable for ~10 s
# after the switch (docs/guides/redis-deployments.md, "Sentinel").
# A master, two replicas, three redis-sentinels (quorum 2), and a node with
# lease_fence preloaded (the sentinel watch).  Pinned:
#  - while the failover runs, acquires of fresh resources are unavailable
#    or acquired, and every acquired key is on the new master, none on the
#    old one; the holder's renewals meanwhile are unavailable or renewed;
#  - once every sentinel names the new master (the old one still says ROLE
#    master), a lease taken before the failover is released on the new
#    master, acquired again there by another session, and renewed;
#  - the old master ran no lease script once the watch had seen the
#    failover (a probe refused as "not settled"; INFO commandstats since
#    CONFIG RESETSTAT, made then: a replica runs a script's effects, not
#    the script) and, until the sentinels make it a replica of the new
#    master, holds none of the keys of leases acquired since.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use LeaseFenceRedis;
use LeaseFenceTest;
use LeaseFenceTopology;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

# a master, two replicas, three sentinels, and the node that finds the
# master through them, all settled
my ($old, $replicas, $sentinels, $node) = LeaseFenceTopology::sentinel_group('graceful');
my @replicas = @$replicas;
my @sentinels = @$sentinels;

my ($h, $c, $w) = map { session($node) } 1 .. 3;
my $held = acquire($h, 'R', 60000);
need($held->{status}, 'acquired', 'H acquires R before the failover');
LeaseFenceTopology::wait_for('both replicas to have R', sub {
	!grep { $_->cli('GET', lkey('R')) ne $held->{identity} } @replicas });

# the address each sentinel names, and whether it reports the failover over
sub named
{
	my ($s) = @_;
	my (undef, $port) = split /\n/, $s->cli('SENTINEL', 'get-master-addr-by-name', 'lf');
	return $port;
}
sub failover_over
{
	return !grep {
		named($_) == $old->port || $_->cli('SENTINEL', 'master', 'lf') =~ /failover_in_progress|o_down/
	} @sentinels;
}

need($sentinels[0]->cli('SENTINEL', 'FAILOVER', 'lf'), 'OK', 'SENTINEL FAILOVER lf');
need($sentinels[0]->cli('SENTINEL', 'master', 'lf') =~ /failover_in_progress/ ? 1 : 0, 1,
	'the leader reports the failover');
# Until the Sentinel watch (which asks every 50 ms) has seen the failover, an
# acquire still goes to the old master, the master until the switch.  Probes
# of resources of their own, until one is refused unsent because the master
# is not settled: from then on nothing may reach the old master, whose
# counters start there.
my $probes = 0;
my $probe_deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
while (1)
{
	my $p = acquire($c, 'probe' . ++$probes, 60000);
	last if $p->{status} eq 'unavailable' && ($p->{reason} // '') =~ /is not settled/;
	die "harness: no acquire refused as not settled after $probes probes (last: $p->{status})"
	  if failover_over() || time() > $probe_deadline;
	usleep(20_000);
}
note "the watch refused probe $probes: the failover is seen";
need($old->cli('CONFIG', 'RESETSTAT'), 'OK', 'CONFIG RESETSTAT on the old master');

# acquire a fresh resource every 50 ms, and H renews R (a backend that used
# the old master a moment before the switch), until the failover is over
# and one more was acquired
my (%seen, %renewals, @granted, $over);
my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
for (my $i = 1; time() < $deadline; $i++)
{
	my $r = acquire($c, "fresh$i", 60000);
	$seen{ $r->{status} }++;
	push @granted, [ "fresh$i", $r->{identity} ] if $r->{status} eq 'acquired';
	$renewals{ renew($h, 'R', $held->{identity}, 60000)->{status} }++;
	$over ||= failover_over();
	last if $over && @granted;
	usleep(50_000);
}
my ($new) = grep { $_->port == named($sentinels[0]) } @replicas;
die 'harness: the sentinels name none of the replicas' unless $over && $new;

# Of the leases given ([resource, identity] each), those whose key the old
# master holds with that identity while it is not a replica of the new
# master.  The sentinels make it one some seconds after the switch (sooner
# or later than this test reads it, on a loaded machine); from then on it
# holds what replication sent it, the new master's keys, which proves
# nothing against it.  Its ROLE is read after each key.
sub on_old_master
{
	my @held;
	for my $l (@_)
	{
		next unless $old->cli('GET', lkey($l->[0])) eq ($l->[1] // 'none');
		my @role = split /\n/, $old->cli('ROLE');
		next if $role[0] eq 'slave' && $role[2] == $new->port;
		push @held, $l->[0];
	}
	return @held;
}
my $window = (split /\n/, $old->cli('ROLE'))[0] eq 'master';
note $window ? 'the old master still says ROLE master'
  : 'NOTE: the old master is already a replica: the window is over';

# the window: the sentinels name the new master, the old one is writable
is(release($h, 'R', $held->{identity})->{status}, 'released', 'H releases R after the switch: released');
is($new->cli('EXISTS', lkey('R')), '0', "R's key is gone from the new master");
my $got = acquire($w, 'R', 60000);
is($got->{status}, 'acquired', 'W acquires R: acquired');
is($new->cli('GET', lkey('R')), $got->{identity} // 'none', "W's key is on the new master");
is(join(',', on_old_master([ 'R', $got->{identity} ])), '',
	"W's key is not on the old master (unless it is a replica of the new one by now)");
is(renew($w, 'R', $got->{identity} // '0' x 32, 60000)->{status}, 'renewed', 'W renews R: renewed');

# while the failover ran
is(join(',', sort grep { $_ ne 'unavailable' && $_ ne 'acquired' } keys %seen), '',
	'during the failover every acquire was unavailable or acquired ('
	  . join(', ', map { "$_ $seen{$_}" } sort keys %seen) . ')');
ok($seen{unavailable}, 'some acquires were unavailable while the failover ran');
is(join(',', sort grep { $_ ne 'unavailable' && $_ ne 'renewed' } keys %renewals), '',
	"H's renewals meanwhile were unavailable or renewed ("
	  . join(', ', map { "$_ $renewals{$_}" } sort keys %renewals) . ')');
ok(scalar(@granted), 'acquires are granted again once the sentinels agree');
is(join(',', map { $_->[0] } grep { $new->cli('GET', lkey($_->[0])) ne $_->[1] } @granted), '',
	'every acquired key is on the new master');
is(join(',', on_old_master(@granted)), '',
	'none is on the old master (unless it is a replica of the new one by now)');

my $stats = $old->cli('INFO', 'commandstats');
is(join(',', $stats =~ /^cmdstat_((?:eval|evalsha|eval_ro|evalsha_ro|fcall|fcall_ro)):/mg), '',
	'the old master ran no lease script once the watch had seen the failover');
push @granted, [ 'R', $got->{identity} ] if $got->{identity};
is(join(',', on_old_master(@granted)), '',
	'it holds none of the keys of leases acquired since (unless it is a replica of the new one by now)');
note 'the old master ' . ((split /\n/, $old->cli('ROLE'))[0] eq 'master'
	? 'still says ROLE master at the end' : 'became a replica before the end');

$_->quit for $h, $c, $w;
$node->stop;
done_testing();

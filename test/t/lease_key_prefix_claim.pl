# lease_key_prefix_claim.pl — one key_prefix per database on one Redis.
#
# Two databases that share a key_prefix would push each other's generations
# up through "stale" without either being told.  The first acquire of a
# database claims the prefix (key <key_prefix>owner: system identifier and
# database OID); any other database is refused with "unavailable" and a
# WARNING that names both, before it draws a generation, and its holder()
# with an ERROR that says the same, before it shows anything.  A physical copy
# (a promoted standby) keeps both numbers and is the same owner; a
# superuser takes a prefix over with lease_fence.claim_key_prefix().
#
# One real redis-server; node a (databases postgres and second), node b (a
# cluster of its own) and a standby of a, promoted.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use LeaseFenceRedis;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $redis = LeaseFenceRedis->new;
my $node_a = $redis->node('a', 'wal_level = replica', 'max_wal_senders = 4');
my $node_b = $redis->node('b');
$node_a->safe_psql('postgres', 'CREATE DATABASE second');
$node_a->safe_psql('second', 'CREATE EXTENSION lease_fence');

my $owner_key = 'lease_fence:owner';

# (system identifier, database OID) of a node's database
sub ident
{
	my ($node, $db) = @_;
	my $out = $node->safe_psql($db, q{SELECT system_identifier,
		(SELECT oid FROM pg_database WHERE datname = current_database()) FROM pg_control_system()});
	return split /\|/, $out;
}

# acquire in a new session: (status, stderr)
sub acquire
{
	my ($node, $db, $res) = @_;
	my ($ret, $out, $err) = $node->psql($db,
		"SELECT status FROM lease_fence.acquire('$res', 600000)");
	die "acquire failed: $err" if $ret != 0;
	return ($out, $err);
}

sub last_value
{
	my ($node, $db) = @_;
	return $node->safe_psql($db,
		'SELECT last_value || \'/\' || is_called FROM lease_fence.generation_seq');
}

my ($sys_a, $oid_a) = ident($node_a, 'postgres');
my (undef, $oid_2) = ident($node_a, 'second');
my ($sys_b, $oid_b) = ident($node_b, 'postgres');
die "the two clusters have one system identifier" if $sys_a eq $sys_b;
die "the claim key exists before the first acquire" if $redis->cli('EXISTS', $owner_key) ne '0';

# what the WARNING says about a database
sub named { my ($db, $oid, $sys) = @_;
	return qr/database "$db" \(OID $oid\) of the cluster with system identifier $sys/; }

#
# The first acquire claims the prefix.  a's generations are far ahead, so
# without the claim b's acquire of the same resource would be "stale" and
# drag b's sequence up to them.
#
$node_a->safe_psql('postgres', q{SELECT setval('lease_fence.generation_seq', 5000000)});
my ($st) = acquire($node_a, 'postgres', 'shared');
is($st, 'acquired', 'first database: acquired');
is($redis->cli('GET', $owner_key), "$sys_a:$oid_a:postgres",
	'the first acquire claims the prefix: system identifier, database OID and name');
my $gen_a = $redis->cli('GET', 'lease_fence:{shared}:gen');
my $lease_a = $redis->cli('GET', 'lease_fence:{shared}');

#
# Another cluster's database on the same prefix is refused, loudly
#
{
	my $before = last_value($node_b, 'postgres');
	my ($status, $err) = acquire($node_b, 'postgres', 'shared');
	is($status, 'unavailable', 'other cluster: acquire is unavailable');
	like($err, qr/WARNING:  key_prefix "lease_fence:" on this Redis belongs to another database/,
		'other cluster: a WARNING says the prefix belongs to another database');
	like($err, qr/names ${\ named('postgres', $oid_a, $sys_a)}; this is ${\ named('postgres', $oid_b, $sys_b)}/,
		'other cluster: the WARNING names the owner and this database');
	like($err, qr/lease_fence\.claim_key_prefix\(\)/, 'other cluster: the HINT says how to take it over');
	is(last_value($node_b, 'postgres'), $before, 'other cluster: its sequence was not advanced');
	is($redis->cli('GET', 'lease_fence:{shared}:gen'), $gen_a, "other cluster: the :gen key is still a's");
	is($redis->cli('GET', 'lease_fence:{shared}'), $lease_a, "other cluster: the lease is still a's");

	my ($ret, $out) = $node_b->psql('postgres', q{
SELECT status FROM lease_fence.acquire('b-only', 600000);
SELECT count FROM lease_fence.stats WHERE operation = 'acquire' AND outcome = 'unavailable';});
	is($out, "unavailable\n1", 'other cluster: any resource is refused, and counted as acquire/unavailable');
	is($redis->cli('EXISTS', 'lease_fence:{b-only}:gen'), '0', 'other cluster: nothing of the lease was sent');
}

#
# Another database of the same cluster is refused too
#
{
	my $before = last_value($node_a, 'second');
	my ($status, $err) = acquire($node_a, 'second', 'shared');
	is($status, 'unavailable', 'same cluster, other database: unavailable');
	like($err, qr/names ${\ named('postgres', $oid_a, $sys_a)}; this is ${\ named('second', $oid_2, $sys_a)}/,
		'same cluster, other database: the WARNING names both databases');
	is(last_value($node_a, 'second'), $before, 'same cluster, other database: its sequence was not advanced');
}

#
# holder() is refused where acquire is: it shows nothing of the owner's
# leases (held, identity, TTL, generation, pid, database) to another
# database, and says why as acquire's WARNING does
#
sub holder
{
	my ($node, $db, $res) = @_;
	my ($ret, $out, $err) = $node->psql($db,
		"SELECT held, identity, ttl_ms > 0, generation FROM lease_fence.holder('$res')",
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	return ($ret, $out, $err);
}
{
	my ($ret, $out) = holder($node_a, 'postgres', 'shared');
	is($out, "t|$lease_a|t|$gen_a", 'the owner: holder() answers (held, identity, TTL, generation)');

	($ret, $out, my $err) = holder($node_b, 'postgres', 'shared');
	is($out, '', "other cluster: holder() shows nothing of a's lease");
	like($err, qr/ERROR:  55000: key_prefix "lease_fence:" on this Redis belongs to another database/,
		'other cluster: holder() is ERROR 55000, with the words of acquire\'s WARNING');
	like($err, qr/names ${\ named('postgres', $oid_a, $sys_a)}; this is ${\ named('postgres', $oid_b, $sys_b)}/,
		'other cluster: holder()\'s DETAIL names the owner and this database');
	like($err, qr/lease_fence\.claim_key_prefix\(\)/, 'other cluster: holder()\'s HINT says how to take it over');

	($ret, $out, $err) = holder($node_a, 'second', 'shared');
	is($out, '', 'same cluster, other database: holder() shows nothing');
	like($err, qr/ERROR:  55000: .*names ${\ named('postgres', $oid_a, $sys_a)}; this is ${\ named('second', $oid_2, $sys_a)}/s,
		'same cluster, other database: holder() is ERROR 55000, naming both databases');
	is($redis->cli('GET', $owner_key), "$sys_a:$oid_a:postgres", 'a refused holder() leaves the claim alone');
}

#
# The check costs one round trip per connection, not one per acquire (nor
# per holder())
#
{
	$redis->cli('CONFIG', 'RESETSTAT');
	my $n = $node_a->safe_psql('postgres', q{SELECT count(*) FROM generate_series(1, 5) i,
		LATERAL lease_fence.acquire('once-' || i, 600000) a WHERE a.status = 'acquired'});
	die "5 acquires did not succeed: $n" unless $n eq '5';
	my ($calls) = $redis->cli('INFO', 'commandstats') =~ /cmdstat_evalsha:calls=(\d+)/;
	is($calls, 6, 'five acquires on one new connection: one owner check and five acquire scripts');

	$redis->cli('CONFIG', 'RESETSTAT');
	$n = $node_a->safe_psql('postgres', q{SELECT count(*) FROM generate_series(1, 3) i,
		LATERAL lease_fence.holder('once-' || i) h WHERE h.held});
	die "holder() saw $n of 3 leases" unless $n eq '3';
	($calls) = $redis->cli('INFO', 'commandstats') =~ /cmdstat_evalsha:calls=(\d+)/;
	is($calls, 4, 'three holder() calls on one new connection: one owner check and three holder scripts');
}

#
# A physical copy keeps the identity: a standby of a, promoted, is a
#
{
	$node_a->backup('base');
	my $copy = PostgreSQL::Test::Cluster->new('copy');
	$copy->init_from_backup($node_a, 'base', has_streaming => 1);
	$copy->start;
	$node_a->wait_for_catchup($copy);
	$copy->promote;
	$copy->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
	  or die 'the copy was not promoted';
	my ($sys_c, $oid_c) = ident($copy, 'postgres');
	die "the copy has another identity" unless $sys_c eq $sys_a && $oid_c eq $oid_a;
	my ($status, $err) = acquire($copy, 'postgres', 'copy-r');
	is($status, 'acquired', 'a promoted standby of the owner acquires: the same owner');
	unlike($err, qr/key_prefix/, 'a promoted standby: no WARNING about the prefix');
	is($redis->cli('GET', $owner_key), "$sys_a:$oid_a:postgres", 'a promoted standby: the claim is unchanged');
	$copy->stop;
}

#
# Taking the prefix over: superusers only
#
$node_b->safe_psql('postgres', 'CREATE ROLE plain LOGIN');
{
	my ($ret, $out, $err) = $node_b->psql('postgres', 'SELECT lease_fence.claim_key_prefix()',
		extra_params => [ '-U', 'plain' ]);
	like($err, qr/permission denied for function claim_key_prefix/,
		'takeover: EXECUTE is not PUBLIC\'s');
	$node_b->safe_psql('postgres', 'GRANT EXECUTE ON FUNCTION lease_fence.claim_key_prefix() TO plain');
	($ret, $out, $err) = $node_b->psql('postgres', 'SELECT lease_fence.claim_key_prefix()',
		extra_params => [ '-U', 'plain', '-v', 'VERBOSITY=verbose' ]);
	like($err, qr/ERROR:  42501: permission denied to take over a lease_fence key_prefix/,
		'takeover: a non-superuser is refused with 42501 even with EXECUTE');
	is($redis->cli('GET', $owner_key), "$sys_a:$oid_a:postgres", 'takeover refused: the claim is unchanged');
}

# a session of a with a connection (and its checked claim) from before
my $bg = $node_a->background_psql('postgres');
die 'bg: no lease' unless $bg->query_safe(q{SELECT status FROM lease_fence.acquire('bg-1', 600000)}) eq 'acquired';

{
	my $offset = -s $node_b->logfile;
	my $old = $node_b->safe_psql('postgres', 'SELECT lease_fence.claim_key_prefix()');
	is($old, "$sys_a:$oid_a:postgres", 'takeover by a superuser returns the previous claim');
	is($redis->cli('GET', $owner_key), "$sys_b:$oid_b:postgres", 'takeover: the prefix is b\'s');
	my $log = slurp_file($node_b->logfile, $offset);
	like($log, qr/LOG:  key_prefix "lease_fence:" taken over by ${\ named('postgres', $oid_b, $sys_b)}/,
		'takeover: logged');
	like($log, qr/DETAIL:  It belonged to ${\ named('postgres', $oid_a, $sys_a)}\./,
		'takeover: the log names what it replaced');
	my ($status) = acquire($node_b, 'postgres', 'b-after');
	is($status, 'acquired', 'after the takeover the new owner acquires');

	my $err;
	($status, $err) = acquire($node_a, 'postgres', 'a-after');
	is($status, 'unavailable', 'the former owner is refused at its next new connection');
	like($err, qr/names ${\ named('postgres', $oid_b, $sys_b)}; this is ${\ named('postgres', $oid_a, $sys_a)}/,
		'the former owner: the WARNING names the new owner');
}

# the former owner's open connection keeps its answer until it is replaced
is($bg->query_safe(q{SELECT status FROM lease_fence.acquire('bg-2', 600000)}), 'acquired',
	'a connection checked before the takeover is not checked again (one check per connection)');
die 'CLIENT KILL closed no connection' if $redis->cli('CLIENT', 'KILL', 'TYPE', 'normal') eq '0';
is($bg->query(q{SELECT status FROM lease_fence.acquire('bg-3', 600000)}), 'unavailable',
	'once that connection is replaced, the same backend is refused');
$bg->quit;

#
# The claim key vanished (Redis restarted without persistence): the next
# new connection claims the prefix again
#
$redis->stop;
$redis->start;
die 'Redis kept its data' if $redis->cli('DBSIZE') ne '0';
{
	my $offset = -s $node_b->logfile;
	my ($status) = acquire($node_b, 'postgres', 'b-restart');
	is($status, 'acquired', 'after a Redis restart: acquired');
	is($redis->cli('GET', $owner_key), "$sys_b:$oid_b:postgres", 'after a Redis restart: the prefix is claimed again');
	like(slurp_file($node_b->logfile, $offset),
		qr/LOG:  key_prefix "lease_fence:" claimed for ${\ named('postgres', $oid_b, $sys_b)}/,
		'a new claim is logged');
	($status) = acquire($node_a, 'postgres', 'a-restart');
	is($status, 'unavailable', 'after a Redis restart: the other database is refused again');
}

#
# The claim is per prefix, and the answer is kept per prefix: switching
# back to a prefix that is another database's is checked again
#
{
	my ($ret, $out, $err) = $node_a->psql('postgres', q{
SET lease_fence.key_prefix = 'a2:';
SELECT status FROM lease_fence.acquire('p', 600000);
RESET lease_fence.key_prefix;
SELECT status FROM lease_fence.acquire('p', 600000);});
	is($out, "acquired\nunavailable", 'a prefix of its own is claimed; the shared one, in the same session, is refused');
	is($redis->cli('GET', 'a2:owner'), "$sys_a:$oid_a:postgres", 'the prefix a2: is a\'s');
}

$node_a->stop;
$node_b->stop;
done_testing();

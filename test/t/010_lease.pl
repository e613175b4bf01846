# 010_lease.pl — the Redis lease helper against a real, private redis-server.
#
# DESIGN §3: acquire / renew / release have three outcomes — yes, no and
# unknown — and "unknown" is never reported as "no".  This file pins down
# every status each function can return, what Redis holds afterwards (read
# back with redis-cli, never through the extension), and the behaviour
# around them: the stale path and its healing, the bounded cleanup after an
# unknown acquire (through CLIENT PAUSE, and through a proxy that lets Redis
# apply a command but holds its reply back: "applied, reply lost"),
# interruptible waits, a Redis restart without persistence, resource names
# full of quotes and Lua syntax, privileges, the password file, and the
# three lease scopes.
#
# Redis runs on a unix socket and a 127.0.0.1 port of its own
# (test/perl/LeaseFenceRedis.pm); nothing leaves the host.  Sleeps only let
# a TTL or a CLIENT PAUSE pass; no assertion is about how long anything took.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use File::Spec;
use JSON::PP;
use List::Util qw(max);
use LeaseFenceRedis;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);

my $redis = LeaseFenceRedis->new;

my $node = $redis->node('lease');
my $sock = $redis->socket_path;

my $json = JSON::PP->new;
my @generations;    # every generation handed out, in order

#
# Helpers
#

# the Redis keys of a resource (key_prefix is the default 'lease_fence:')
sub lkey { return "lease_fence:{$_[0]}"; }
sub gkey { return "lease_fence:{$_[0]}:gen"; }

# a SQL string literal (standard_conforming_strings is on)
sub lit { my $s = shift; $s =~ s/'/''/g; return "'$s'"; }

# true / false / NULL as a word, for is()
sub tf
{
	my $v = shift;
	return 'NULL' unless defined $v;
	return $v ? 'true' : 'false';
}

# Run SQL in a background session, or in a new session of $node (then
# with -v VERBOSITY=verbose, so errors read "ERROR:  <SQLSTATE>: ...").
# Returns (stdout, stderr).  %o: user => role for a new session.
sub run_sql
{
	my ($who, $sql, %o) = @_;
	if (ref($who) && $who->isa('PostgreSQL::Test::BackgroundPsql'))
	{
		$who->{stderr} = '';
		my $out = $who->query($sql);
		my $err = $who->{stderr};
		$who->{stderr} = '';
		return ($out, $err);
	}
	my ($out, $err) = ('', '');
	$node->psql(
		'postgres', $sql,
		stdout => \$out,
		stderr => \$err,
		on_error_stop => 1,
		extra_params => [
			'-v', 'VERBOSITY=verbose', defined $o{user} ? ('-U', $o{user}) : ()
		]);
	return ($out, $err);
}

# run_sql that must not fail; returns stdout
sub sql_ok
{
	my ($who, $sql, %o) = @_;
	my ($out, $err) = run_sql($who, $sql, %o);
	die "unexpected error from: $sql\n$err" if $err =~ /ERROR:/;
	return $out;
}

# the SQLSTATE of the first ERROR in stderr, or '' when there is none
sub sqlstate
{
	my ($err) = @_;
	return $err =~ /ERROR:\s+([0-9A-Z]{5}):/ ? $1 : '';
}

# Call a lease function (SQL text like "lease_fence.acquire('r', 1000)")
# and return its row as a hash (NULL is undef).
sub call
{
	my ($who, $fn, %o) = @_;
	my $out = sql_ok($who, "SELECT row_to_json(r) FROM $fn r", %o);
	my $row = $json->decode($out);
	push @generations, $row->{generation}
	  if exists $row->{generation} && defined $row->{generation};
	return $row;
}

sub acquire
{
	my ($who, $res, $ttl, $min, $scope) = @_;
	my $args = join(', ', lit($res), $ttl, $min // 0, lit($scope // 'explicit'));
	return call($who, "lease_fence.acquire($args)");
}

sub renew
{
	my ($who, $res, $id, $ttl, $min) = @_;
	return call($who, "lease_fence.renew(" . join(', ', lit($res), lit($id), $ttl, $min // 0) . ")");
}

sub release
{
	my ($who, $res, $id) = @_;
	return call($who, "lease_fence.release(" . lit($res) . ', ' . lit($id) . ")");
}

# this session's row of lease_fence.leases for an identity (undef: none)
sub lease_view
{
	my ($who, $id) = @_;
	my $out = sql_ok($who,
		"SELECT row_to_json(l) FROM lease_fence.leases l WHERE identity = " . lit($id));
	return $out eq '' ? undef : $json->decode($out);
}

sub session
{
	return $node->background_psql(
		'postgres',
		on_error_stop => 0,
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
}

# a CLIENT PAUSE: returns once it is over (redis-cli's own PING is paused
# with every other client until then)
sub pause_redis
{
	my ($ms) = @_;
	is($redis->cli('CLIENT', 'PAUSE', $ms, 'ALL'), 'OK', "CLIENT PAUSE $ms ALL");
	return;
}

sub wait_pause_over
{
	$redis->cli('PING');
	return;
}

# wait until a backend process is gone: every exit callback has then run
sub wait_backend_gone
{
	my ($pid) = @_;
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	while (kill(0, $pid))
	{
		die "backend $pid did not exit" if time() > $deadline;
		sleep(0.05);
	}
	return;
}

# point the server at another Redis endpoint (ALTER SYSTEM, reload), and wait
# until new sessions see it
sub set_redis_conf
{
	my (%set) = @_;
	my $sql = "LOAD 'lease_fence';\n";
	my @check;
	for my $name (sort keys %set)
	{
		if (defined $set{$name})
		{
			$sql .= "ALTER SYSTEM SET lease_fence.$name = " . lit($set{$name}) . ";\n";
			push @check, "current_setting('lease_fence.$name') = " . lit($set{$name});
		}
		else
		{
			$sql .= "ALTER SYSTEM RESET lease_fence.$name;\n";
		}
	}
	$sql .= "SELECT pg_reload_conf();\n";
	sql_ok($node, $sql);
	die "set_redis_conf: give at least one value to wait for" unless @check;
	# (a new session reads the setting from the configuration files; no
	# need to load the library for that)
	$node->poll_query_until('postgres', "SELECT " . join(' AND ', @check))
	  or die "configuration not reloaded";
	return;
}

my $hex32 = qr/^[0-9a-f]{32}$/;

is($node->safe_psql('postgres',
		"SELECT extversion FROM pg_extension WHERE extname = 'lease_fence'"),
	'1.1', 'CREATE EXTENSION installs version 1.1');

#
# Bad input is an ERROR (22023) before anything is sent
#
{
	my @bad = (
		[ "lease_fence.acquire('bad', 0)" => 'ttl_ms 0' ],
		[ "lease_fence.acquire('bad', -5)" => 'negative ttl_ms' ],
		[ "lease_fence.acquire(NULL, 1000)" => 'NULL resource' ],
		[ "lease_fence.acquire('', 1000)" => 'empty resource' ],
		[ "lease_fence.acquire(repeat('x', 100000), 1000)" => 'over-long resource' ],
		[ "lease_fence.acquire('bad', 1000, 0, 'forever')" => 'unknown scope' ],
		[ "lease_fence.renew('bad', repeat('a', 32), 0)" => 'renew with ttl_ms 0' ],
		[ "lease_fence.release(NULL, repeat('a', 32))" => 'release of a NULL resource' ],
	);
	for my $b (@bad)
	{
		my ($call, $what) = @$b;
		my (undef, $err) = run_sql($node, "SELECT $call");
		is(sqlstate($err), '22023', "bad input: $what is ERROR 22023");
	}
	is($redis->cli('DBSIZE'), '0', 'bad input: nothing reached Redis');
}

#
# acquired, busy, renewed, released, not_held (explicit scope)
#
my $s1 = session();
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
	is($redis->cli('DEL', lkey('r-lost-del')), '1', 'lost: an admin DELetes the lease key');
	$r = renew($s1, 'r-lost-del', $id, 30000);
	is(tf($r->{renewed}), 'false', 'lost (key gone): renewed is false');
	is($r->{status}, 'lost', 'lost (key gone): status lost');
	is($redis->cli('EXISTS', lkey('r-lost-del')), '0', 'lost (key gone): renew did not recreate the key');

	$r = acquire($s1, 'r-lost-other', 30000);
	$id = $r->{identity};
	my $other = '0123456789abcdef0123456789abcdef';
	is($redis->cli('SET', lkey('r-lost-other'), $other, 'PX', 30000), 'OK',
		'lost: an admin gives the lease key to another identity');
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

#
# stale: a generation >= ours already reached Redis; nothing is set, and the
# database's generations are advanced past it so the next acquire succeeds
#
{
	my $huge = 900000000000000;
	is($redis->cli('SET', gkey('r-stale'), $huge), 'OK', 'stale: an admin sets the :gen key to a huge number');
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

#
# A resource full of quotes and Lua syntax is just a key
#
{
	my $res = qq{a'"]]..)--{}:gen\n\\'); redis.call('FLUSHALL') --[[ %s \$1};
	$redis->cli('SET', 'sentinel', 'still here');
	my $r = acquire($s1, $res, 30000);
	is($r->{status}, 'acquired', 'odd resource: acquired');
	is($r->{resource}, $res, 'odd resource: returned unchanged');
	is($redis->cli('EXISTS', lkey($res)), '1', 'odd resource: redis-cli EXISTS on the exact key');
	is($redis->cli('GET', lkey($res)), $r->{identity}, 'odd resource: the exact key holds the identity');
	is($redis->cli('GET', gkey($res)), $r->{generation}, 'odd resource: the exact :gen key holds the generation');
	is($redis->cli('GET', 'sentinel'), 'still here', 'odd resource: nothing in it ran as Lua');
	my $v = lease_view($s1, $r->{identity});
	is($v && $v->{resource}, $res, 'odd resource: the leases view shows it unchanged');
	$r = release($s1, $res, $r->{identity});
	is($r->{status}, 'released', 'odd resource: released');
	is($redis->cli('EXISTS', lkey($res)), '0', 'odd resource: the exact key is gone');
}
$s1->quit;

#
# transaction scope
#
$node->safe_psql('postgres',
	"CREATE TABLE tx_t (id int PRIMARY KEY); SELECT lease_fence.protect('tx_t')");
{
	my (undef, $err) = run_sql($node,
		"SELECT lease_fence.acquire('r-tx0', 10000, 0, 'transaction')");
	is(sqlstate($err), '25P01', 'transaction scope outside a transaction block: ERROR 25P01');
	is($redis->cli('EXISTS', gkey('r-tx0')), '0', '25P01: nothing was sent to Redis');

	my $t = session();
	sql_ok($t, 'BEGIN');
	my $r = acquire($t, 'r-tx', 10000, 0, 'transaction');
	is($r->{status}, 'acquired', 'transaction scope: acquired');
	is(sql_ok($t, 'SELECT lease_fence.current_generation()'), $r->{generation},
		"transaction scope: the lease's generation is the transaction's current generation");
	is($redis->cli('GET', lkey('r-tx')), $r->{identity}, 'transaction scope: the key is held in the transaction');
	sql_ok($t, 'INSERT INTO tx_t VALUES (1)');
	my (undef, $cerr) = run_sql($t, 'COMMIT');
	is(sqlstate($cerr), '', 'transaction scope: COMMIT succeeds');
	is($redis->cli('EXISTS', lkey('r-tx')), '0', 'transaction scope: COMMIT released the key');
	is(sql_ok($t, 'SELECT lease_fence.current_generation() IS NULL'), 't',
		'transaction scope: no current generation after COMMIT');
	is(sql_ok($t, 'SELECT fence FROM tx_t WHERE id = 1'), $r->{generation},
		"transaction scope: a fenced INSERT carried the lease's generation");

	sql_ok($t, 'BEGIN');
	$r = acquire($t, 'r-tx-rb', 10000, 0, 'transaction');
	is($redis->cli('GET', lkey('r-tx-rb')), $r->{identity}, 'transaction scope: held before ROLLBACK');
	sql_ok($t, 'ROLLBACK');
	is($redis->cli('EXISTS', lkey('r-tx-rb')), '0', 'transaction scope: ROLLBACK released the key');

	# lost before COMMIT: an admin DELetes the key
	sql_ok($t, 'BEGIN');
	$r = acquire($t, 'r-tx-lost', 10000, 0, 'transaction');
	is($r->{status}, 'acquired', 'LF010 (key deleted): acquired in the transaction');
	sql_ok($t, 'INSERT INTO tx_t VALUES (2)');
	$redis->cli('DEL', lkey('r-tx-lost'));
	(undef, $cerr) = run_sql($t, 'COMMIT');
	is(sqlstate($cerr), 'LF010', 'LF010: COMMIT fails when the lease was deleted before it');
	is(sql_ok($t, 'SELECT count(*) FROM tx_t WHERE id = 2'), '0',
		'LF010: the transaction was rolled back');
	is($redis->cli('EXISTS', lkey('r-tx-lost')), '0', 'LF010: the key was not recreated');

	# lost before COMMIT: the key now holds another identity
	sql_ok($t, 'BEGIN');
	$r = acquire($t, 'r-tx-other', 10000, 0, 'transaction');
	sql_ok($t, 'INSERT INTO tx_t VALUES (3)');
	my $other = 'abcdefabcdefabcdefabcdefabcdef00';
	$redis->cli('SET', lkey('r-tx-other'), $other, 'PX', 30000);
	(undef, $cerr) = run_sql($t, 'COMMIT');
	is(sqlstate($cerr), 'LF010', "LF010: COMMIT fails when the key is someone else's");
	is(sql_ok($t, 'SELECT count(*) FROM tx_t WHERE id = 3'), '0',
		"LF010 (someone else's): the transaction was rolled back");
	is($redis->cli('GET', lkey('r-tx-other')), $other,
		"LF010: the release at abort left someone else's key alone");
	$redis->cli('DEL', lkey('r-tx-other'));

	# too little validity left at COMMIT: ttl 3000, min 2000, 1.2 s later
	sql_ok($t, 'BEGIN');
	$r = acquire($t, 'r-tx-min', 3000, 2000, 'transaction');
	is($r->{status}, 'acquired', 'LF010 (validity): acquired with min_validity_ms 2000');
	sql_ok($t, 'INSERT INTO tx_t VALUES (4)');
	sleep(1.2);
	(undef, $cerr) = run_sql($t, 'COMMIT');
	is(sqlstate($cerr), 'LF010', 'LF010: COMMIT fails when less than min_validity_ms is left');
	is(sql_ok($t, 'SELECT count(*) FROM tx_t WHERE id = 4'), '0',
		'LF010 (validity): the transaction was rolled back');
	is($redis->cli('EXISTS', lkey('r-tx-min')), '0', 'LF010 (validity): the key was released at abort');

	# explicit scope inside a transaction: nothing automatic
	sql_ok($t, 'BEGIN');
	$r = acquire($t, 'r-tx-expl', 30000);
	sql_ok($t, 'ROLLBACK');
	is($redis->cli('GET', lkey('r-tx-expl')), $r->{identity},
		'explicit scope: ROLLBACK does not release the lease');
	is(release($t, 'r-tx-expl', $r->{identity})->{status}, 'released', 'explicit scope: released by hand');
	$t->quit;
}

#
# session scope: released at backend exit; explicit scope: not
#
{
	my $s = session();
	my $pid = sql_ok($s, 'SELECT pg_backend_pid()');
	my $rs = acquire($s, 'r-sess', 60000, 0, 'session');
	my $re = acquire($s, 'r-expl', 60000);
	is($rs->{status}, 'acquired', 'session scope: acquired');
	is($redis->cli('GET', lkey('r-sess')), $rs->{identity}, 'session scope: held while connected');
	sql_ok($s, 'SELECT 1');    # a transaction end must not release it
	is($redis->cli('GET', lkey('r-sess')), $rs->{identity}, 'session scope: still held after later transactions');
	$s->quit;
	wait_backend_gone($pid);
	is($redis->cli('EXISTS', lkey('r-sess')), '0', 'session scope: disconnecting released the key');
	is($redis->cli('GET', lkey('r-expl')), $re->{identity},
		'explicit scope: disconnecting did not release the key');
	is(release($node, 'r-expl', $re->{identity})->{status}, 'released',
		'explicit scope: another session releases it with the identity');
}

#
# Privileges: where Redis lives is superuser-only; EXECUTE is not PUBLIC
#
$node->safe_psql('postgres', 'CREATE ROLE lf_app LOGIN');
{
	for my $fn ('acquire(text,bigint,bigint,text)', 'renew(text,text,bigint,bigint)',
		'release(text,text)')
	{
		is($node->safe_psql('postgres',
				"SELECT has_function_privilege('lf_app', 'lease_fence.$fn', 'EXECUTE')"),
			'f', "privileges: lf_app lacks EXECUTE on lease_fence.$fn");
	}
	my (undef, $err) = run_sql($node, "SELECT lease_fence.acquire('r-app', 30000)", user => 'lf_app');
	is(sqlstate($err), '42501', 'privileges: acquire without the GRANT is ERROR 42501');
	is($redis->cli('EXISTS', gkey('r-app')), '0', 'privileges: nothing reached Redis');

	my %try = (
		redis_host => '127.0.0.2',
		redis_port => '1',
		redis_socket => '/tmp/elsewhere.sock',
		key_prefix => 'evil:',
		redis_password_file => '/etc/passwd',
		redis_db => '3',
		redis_user => 'someone',);
	for my $name (sort keys %try)
	{
		# the library is loaded first (its functions are called), so the
		# GUC is defined when SET runs
		(undef, $err) = run_sql($node,
			"SELECT lease_fence.current_generation();\nSET lease_fence.$name = " . lit($try{$name}),
			user => 'lf_app');
		is(sqlstate($err), '42501', "privileges: a non-superuser cannot SET lease_fence.$name (42501)");
	}
	(undef, $err) = run_sql($node,
		"SELECT lease_fence.current_generation();\nSELECT set_config('lease_fence.redis_host', '127.0.0.2', false)",
		user => 'lf_app');
	is(sqlstate($err), '42501', 'privileges: nor through set_config()');

	my $out = sql_ok($node,
		"SELECT lease_fence.current_generation();\nSET lease_fence.command_timeout_ms = 500;\nSHOW lease_fence.command_timeout_ms",
		user => 'lf_app');
	is((split /\n/, $out)[-1], '500ms', 'privileges: timeouts are user-settable');

	$node->safe_psql('postgres', q{
		GRANT EXECUTE ON FUNCTION lease_fence.acquire(text, bigint, bigint, text) TO lf_app;
		GRANT EXECUTE ON FUNCTION lease_fence.renew(text, text, bigint, bigint) TO lf_app;
		GRANT EXECUTE ON FUNCTION lease_fence.release(text, text) TO lf_app;
	});
	my $r = call($node, "lease_fence.acquire('r-app', 30000)", user => 'lf_app');
	is($r->{status}, 'acquired', 'privileges: after GRANT EXECUTE, lf_app acquires');
	is(call($node, "lease_fence.renew('r-app', '$r->{identity}', 30000)", user => 'lf_app')->{status},
		'renewed', 'privileges: after GRANT EXECUTE, lf_app renews');
	is(call($node, "lease_fence.release('r-app', '$r->{identity}')", user => 'lf_app')->{status},
		'released', 'privileges: after GRANT EXECUTE, lf_app releases');

	# SET before the library is loaded only makes a placeholder; once the
	# library defines the GUC, a non-superuser's value must not take effect
	my ($o, $e) = run_sql($node,
		"SET lease_fence.redis_socket = '/nonexistent/redis.sock';\n"
		  . "SELECT row_to_json(r) FROM lease_fence.acquire('r-app-ph', 30000) r",
		user => 'lf_app');
	like($e, qr/WARNING:\s+42501:/,
		'privileges: a placeholder SET by a non-superuser before loading is refused at load');
	my ($line) = grep { /^\{/ } split /\n/, $o;
	$r = defined $line ? $json->decode($line) : {};
	is($r->{status}, 'acquired',
		'privileges: ... and the lease still goes to the configured Redis');
	release($node, 'r-app-ph', $r->{identity}) if $r->{identity};
}

#
# unknown, through CLIENT PAUSE: the request was sent on the session's
# cached connection and no reply came in time.  lease_fence closes the
# timed-out connection, so Redis drops the paused command: the key is ours
# or absent afterwards — never another identity — and it is never "busy".
#
{
	my $p = session();
	# warm up: a cached connection, and every script loaded
	my $w = acquire($p, 'r-warm', 30000);
	renew($p, 'r-warm', $w->{identity}, 30000);
	release($p, 'r-warm', $w->{identity});

	pause_redis(3000);
	my $r = acquire($p, 'r-pause', 30000);
	is($r->{status}, 'unknown', 'unknown (CLIENT PAUSE): acquire during a pause is unknown');
	is(tf($r->{acquired}), 'NULL', 'unknown (CLIENT PAUSE): acquired IS NULL');
	like($r->{identity} // '', $hex32, 'unknown (CLIENT PAUSE): the identity is still returned');
	ok(defined $r->{generation} && $r->{generation} > 0,
		'unknown (CLIENT PAUSE): the generation is still returned');
	my $v = lease_view($p, $r->{identity} // '');
	ok($v && ($v->{state} eq 'unconfirmed' || $v->{state} eq 'released'),
		'unknown (CLIENT PAUSE): the bounded cleanup ran; the lease is not recorded as held (state '
		  . ($v ? $v->{state} : 'none') . ')');
	wait_pause_over();
	my $cur = $redis->cli('GET', lkey('r-pause'));
	ok($cur eq '' || $cur eq $r->{identity},
		'unknown (CLIENT PAUSE): afterwards the key is ours or absent, never another identity');
	$redis->cli('DEL', lkey('r-pause')) if $cur ne '';

	$r = acquire($p, 'r-pause-after', 30000);
	is($r->{status}, 'acquired', 'after the pause, the same session reconnects and acquires');
	release($p, 'r-pause-after', $r->{identity});

	# renew during a pause
	$r = acquire($p, 'r-pause-renew', 30000);
	my $id = $r->{identity};
	pause_redis(3000);
	$r = renew($p, 'r-pause-renew', $id, 30000);
	is($r->{status}, 'unknown', 'unknown (CLIENT PAUSE): renew during a pause is unknown');
	is(tf($r->{renewed}), 'NULL', 'unknown (CLIENT PAUSE): renewed IS NULL');
	wait_pause_over();
	is($redis->cli('GET', lkey('r-pause-renew')), $id,
		'unknown renew: the lease key still holds our identity');
	is(release($p, 'r-pause-renew', $id)->{status}, 'released', 'and it is released afterwards');

	# release during a pause
	$r = acquire($p, 'r-pause-rel', 30000);
	$id = $r->{identity};
	pause_redis(3000);
	$r = release($p, 'r-pause-rel', $id);
	is($r->{status}, 'unknown', 'unknown (CLIENT PAUSE): release during a pause is unknown');
	is(tf($r->{released}), 'NULL', 'unknown (CLIENT PAUSE): released IS NULL');
	wait_pause_over();
	$cur = $redis->cli('GET', lkey('r-pause-rel'));
	ok($cur eq '' || $cur eq $id, 'unknown release: the key is ours or absent afterwards');
	$r = release($p, 'r-pause-rel', $id);
	ok($r->{status} eq 'released' || $r->{status} eq 'not_held',
		"a retried release with the same identity is definite ($r->{status})");
	is($redis->cli('EXISTS', lkey('r-pause-rel')), '0', 'and the key is gone');
	$p->quit;
}

#
# statement_timeout and pg_cancel_backend work during a Redis wait: the
# call fails with 57014 and the lease is recorded as unknown (or already
# cleaned up at the end of the failed transaction)
#
{
	my $c = session();
	my $pid = sql_ok($c, 'SELECT pg_backend_pid()');
	my $w = acquire($c, 'r-warm2', 30000);
	release($c, 'r-warm2', $w->{identity});
	# Redis waits longer than the pause: only the interrupt can end it
	sql_ok($c, 'SET lease_fence.command_timeout_ms = 20000');

	sql_ok($c, 'SET statement_timeout = 500');
	pause_redis(4000);
	my (undef, $err) = run_sql($c, "SELECT * FROM lease_fence.acquire('r-stmt-timeout', 30000)");
	is(sqlstate($err), '57014', 'statement_timeout during a paused Redis: ERROR 57014');
	sql_ok($c, 'RESET statement_timeout');
	my $out = sql_ok($c,
		"SELECT row_to_json(l) FROM lease_fence.leases l WHERE resource = 'r-stmt-timeout'");
	my $v = $out eq '' ? undef : $json->decode($out);
	ok($v && $v->{state} =~ /^(unknown|unconfirmed|released)$/,
		'statement_timeout: the interrupted acquire is in lease_fence.leases, not held (state '
		  . ($v ? $v->{state} : 'none') . ')');
	wait_pause_over();
	my $cur = $redis->cli('GET', lkey('r-stmt-timeout'));
	ok($v && ($cur eq '' || $cur eq $v->{identity}),
		'statement_timeout: afterwards the key is ours or absent');
	$redis->cli('DEL', lkey('r-stmt-timeout'));

	# the timed-out connection was dropped: open a new one (and pass its
	# key_prefix owner check) first, so that the acquire below is what waits
	$w = acquire($c, 'r-warm3', 30000);
	release($c, 'r-warm3', $w->{identity});
	pause_redis(4000);
	$c->query_until(qr/started/,
		"\\echo started\nSELECT * FROM lease_fence.acquire('r-cancel', 30000);\n");
	$node->poll_query_until('postgres',
		"SELECT state = 'active' AND query LIKE '%r-cancel%' FROM pg_stat_activity WHERE pid = $pid")
	  or die 'the acquire did not start';
	sleep(0.3);    # let it reach the Redis wait
	is($node->safe_psql('postgres', "SELECT pg_cancel_backend($pid)"), 't', 'pg_cancel_backend sent');
	(undef, $err) = run_sql($c, "SELECT 'after cancel'");
	is(sqlstate($err), '57014', 'pg_cancel_backend during a paused Redis: ERROR 57014');
	$out = sql_ok($c, "SELECT row_to_json(l) FROM lease_fence.leases l WHERE resource = 'r-cancel'");
	$v = $out eq '' ? undef : $json->decode($out);
	ok($v && $v->{state} =~ /^(unknown|unconfirmed|released)$/,
		'cancel: the interrupted acquire is in lease_fence.leases, not held (state '
		  . ($v ? $v->{state} : 'none') . ')');
	wait_pause_over();
	$cur = $redis->cli('GET', lkey('r-cancel'));
	ok($v && ($cur eq '' || $cur eq $v->{identity}), 'cancel: afterwards the key is ours or absent');
	$redis->cli('DEL', lkey('r-cancel'));
	$c->quit;
}

#
# unavailable: Redis is down.  Then Redis restarts without persistence:
# the next call reconnects, and no generation repeats.  Once over the unix
# socket, once over TCP: on a unix socket a write to a closed peer fails at
# once, but on TCP it succeeds and only the read fails, so there only the
# check of the cached connection *before* sending keeps a stopped Redis
# "unavailable" rather than "unknown".
#
for my $transport ('unix socket', 'TCP')
{
	if ($transport eq 'TCP')
	{
		set_redis_conf(
			redis_socket => '',
			redis_host => '127.0.0.1',
			redis_port => $redis->port);
	}
	my $t = "($transport)";
	my $u = session();
	my $before = acquire($u, 'r-restart', 60000);
	is($before->{status}, 'acquired', "before the restart $t: acquired (cached connection)");
	my $max_before = max(@generations);

	$redis->stop;

	my $r = acquire($u, 'r-unavail', 30000);
	is($r->{status}, 'unavailable',
		"unavailable $t: acquire on a cached connection to a stopped Redis is unavailable, not unknown");
	is(tf($r->{acquired}), 'false', "unavailable $t: acquired is false");
	ok(!defined $r->{identity} && !defined $r->{generation},
		"unavailable $t: identity and generation are NULL");

	$r = acquire($node, 'r-unavail', 30000);
	is($r->{status}, 'unavailable', "unavailable $t: acquire from a new session");
	is(tf($r->{acquired}), 'false', "unavailable $t (new session): acquired is false");
	$r = renew($node, 'r-restart', $before->{identity}, 30000);
	is($r->{status}, 'unavailable', "unavailable $t: renew");
	is(tf($r->{renewed}), 'false', "unavailable $t: renewed is false");
	$r = release($node, 'r-restart', $before->{identity});
	is($r->{status}, 'unavailable', "unavailable $t: release");
	is(tf($r->{released}), 'false', "unavailable $t: released is false");
	$r = renew($u, 'r-restart', $before->{identity}, 30000);
	is($r->{status}, 'unavailable', "unavailable $t: renew in the session that held a connection");
	$r = release($u, 'r-restart', $before->{identity});
	is($r->{status}, 'unavailable', "unavailable $t: release in the session that held a connection");

	$redis->start;
	is($redis->cli('DBSIZE'), '0', "Redis restarted without its data $t");

	$r = acquire($u, 'r-restart', 60000);
	is($r->{status}, 'acquired', "after the restart $t: the session reconnects and acquires");
	ok($r->{generation} > $max_before,
		"after the restart $t: the generation is above every generation handed out before");
	is($redis->cli('GET', lkey('r-restart')), $r->{identity},
		"after the restart $t: the key holds the new identity");
	is($redis->cli('GET', gkey('r-restart')), $r->{generation},
		"after the restart $t: the :gen key holds it");
	my $old = renew($node, 'r-restart', $before->{identity}, 30000);
	is($old->{status}, 'lost', "after the restart $t: the old holder has lost the lease");
	release($u, 'r-restart', $r->{identity});

	# a restart while the session is idle: its cached connection is dead
	$redis->stop;
	$redis->start;
	$r = acquire($u, 'r-restart-idle', 30000);
	is($r->{status}, 'acquired',
		"after a restart while the session was idle $t: acquired on a new connection");
	release($u, 'r-restart-idle', $r->{identity}) if $r->{identity};

	$r = acquire($node, 'r-after-restart', 30000);
	is($r->{status}, 'acquired', "after the restart $t: a new session acquires too");
	release($node, 'r-after-restart', $r->{identity});
	$u->quit;

	set_redis_conf(redis_socket => $sock, redis_host => undef, redis_port => undef)
	  if $transport eq 'TCP';
}

#
# unknown, "applied, reply lost": a proxy forwards every request to Redis at
# once and holds the replies back longer than command_timeout_ms
#
{
	my $proxy = $redis->proxy(hold_ms => 1500);
	set_redis_conf(
		redis_socket => '',
		redis_host => '127.0.0.1',
		redis_port => $proxy->port);

	my $x = session();
	my $w = acquire($x, 'r-proxy-warm', 30000);
	is($w->{status}, 'acquired', 'through the proxy (TCP): acquired');
	release($x, 'r-proxy-warm', $w->{identity});
	ok($proxy->connections >= 1, 'the requests went through the proxy');

	# only the session's connection is held; the cleanup's fresh one is not
	$proxy->hold('first');
	my $r = acquire($x, 'r-proxy-1', 30000);
	is($r->{status}, 'unknown', 'applied, reply lost: acquire is unknown');
	is(tf($r->{acquired}), 'NULL', 'applied, reply lost: acquired IS NULL');
	like($r->{identity} // '', $hex32, 'applied, reply lost: identity returned');
	is($redis->cli('GET', gkey('r-proxy-1')), $r->{generation},
		'applied, reply lost: Redis did apply the acquire (its :gen key holds the generation)');
	is($redis->cli('EXISTS', lkey('r-proxy-1')), '0',
		'applied, reply lost: the bounded cleanup on a fresh connection deleted the key');
	my $v = lease_view($x, $r->{identity} // '');
	ok(!defined $v || $v->{state} eq 'released',
		'applied, reply lost: the confirmed cleanup leaves the lease released (state '
		  . ($v ? $v->{state} : 'none') . ')');
	$proxy->hold('off');

	# every reply held: the cleanup cannot be confirmed either
	$r = acquire($x, 'r-proxy-2', 30000);
	is($r->{status}, 'acquired', 'proxy passes replies again');
	release($x, 'r-proxy-2', $r->{identity});
	$proxy->hold('all');
	$r = acquire($x, 'r-proxy-2', 30000);
	is($r->{status}, 'unknown', 'all replies held: acquire is unknown');
	is($redis->cli('GET', gkey('r-proxy-2')), $r->{generation},
		'all replies held: Redis applied the acquire');
	$v = lease_view($x, $r->{identity} // '');
	is($v && $v->{state}, 'unconfirmed',
		'all replies held: the unconfirmed cleanup leaves the lease unconfirmed');
	my $cur = $redis->cli('GET', lkey('r-proxy-2'));
	ok($cur eq '' || $cur eq $r->{identity}, 'all replies held: the key is ours or absent');
	$proxy->hold('off');
	sleep($proxy->hold_ms / 1000);
	my $rel = release($x, 'r-proxy-2', $r->{identity});
	ok($rel->{status} eq 'released' || $rel->{status} eq 'not_held',
		"a later release with the same identity is definite ($rel->{status})");
	is($redis->cli('EXISTS', lkey('r-proxy-2')), '0', 'and the key is gone');
	$x->quit;

	set_redis_conf(redis_socket => $sock, redis_host => undef, redis_port => undef);
	$proxy->stop;
	is(acquire($node, 'r-back', 30000)->{status}, 'acquired', 'back on the unix socket');
}

#
# requirepass and redis_password_file
#
{
	my $pw = 'pw-Zq8rT1-correct-horse';
	my $wrong = 'pw-WRONG-battery-staple';
	my $dir = File::Spec->rel2abs(PostgreSQL::Test::Utils::tempdir('pw'));
	my $good = "$dir/redis.pw";
	my $bad = "$dir/wrong.pw";
	my $open = "$dir/readable.pw";
	PostgreSQL::Test::Utils::append_to_file($good, "$pw\n");
	PostgreSQL::Test::Utils::append_to_file($bad, "$wrong\n");
	PostgreSQL::Test::Utils::append_to_file($open, "$pw\n");
	chmod 0600, $good, $bad;
	chmod 0644, $open;
	is((stat $good)[4], $>, 'password file is owned by the server OS user (the test runs as it)');

	$redis->cli('CONFIG', 'SET', 'requirepass', $pw);
	$redis->password($pw);

	my $r = acquire($node, 'r-noauth', 30000);
	is($r->{status}, 'unavailable', 'requirepass and no password file: unavailable');

	set_redis_conf(redis_password_file => $good);
	$r = acquire($node, 'r-auth', 30000);
	is($r->{status}, 'acquired', 'with redis_password_file (0600): acquired');
	is($redis->cli('GET', lkey('r-auth')), $r->{identity}, 'with the password: the key holds the identity');
	is(release($node, 'r-auth', $r->{identity})->{status}, 'released', 'with the password: released');

	# (the password must not appear in the SQL either: the test server logs
	# every statement, and the log is checked below)
	my $out = sql_ok($node, q{SELECT lease_fence.current_generation();
SELECT current_setting('lease_fence.redis_password_file');
SHOW lease_fence.redis_password_file;});
	my @lines = split /\n/, $out;
	is($lines[-2], $good, 'current_setting of the password file setting is the path');
	is($lines[-1], $good, 'SHOW of the password file setting is the path');
	$out = sql_ok($node, q{SELECT lease_fence.current_generation();
SELECT name, setting, reset_val, boot_val FROM pg_settings;
SELECT name, setting FROM pg_file_settings;});
	like($out, qr/lease_fence\.redis_password_file\|\Q$good\E/, 'pg_settings shows the path');
	unlike($out, qr/\Q$pw\E/, 'the password is in no pg_settings or pg_file_settings row');

	set_redis_conf(redis_password_file => $bad);
	my ($o, $err) = run_sql($node,
		"SELECT row_to_json(r) FROM lease_fence.acquire('r-auth', 30000) r");
	is(sqlstate($err), '', 'wrong password: no ERROR');
	$r = $o eq '' ? {} : $json->decode($o);
	is($r->{status}, 'unavailable', 'wrong password: unavailable');
	is(tf($r->{acquired}), 'false', 'wrong password: acquired is false');
	unlike($o . $err, qr/\Q$wrong\E|\Q$pw\E/, 'wrong password: the client sees no password');
	is($redis->cli('EXISTS', lkey('r-auth')), '0', 'wrong password: no lease key');

	set_redis_conf(redis_password_file => $open);
	($o, $err) = run_sql($node,
		"SELECT row_to_json(r) FROM lease_fence.acquire('r-auth', 30000) r");
	$r = $o eq '' ? {} : $json->decode($o);
	ok(sqlstate($err) ne '' || ($r->{status} // '') eq 'unavailable',
		'a password file readable by others is refused');
	is($redis->cli('EXISTS', lkey('r-auth')), '0', 'group/world-readable password file: no lease key');
	unlike($o . $err, qr/\Q$pw\E/, 'group/world-readable password file: the client sees no password');

	set_redis_conf(redis_password_file => '');
	$redis->cli('CONFIG', 'SET', 'requirepass', '');
	$redis->password(undef);
	is(acquire($node, 'r-noauth2', 30000)->{status}, 'acquired', 'requirepass off: acquired again');

	my $log = slurp_file($node->logfile);
	unlike($log, qr/\Q$pw\E/, 'the password never appears in the server log');
	unlike($log, qr/\Q$wrong\E/, 'the wrong password never appears in the server log');
}

#
# Over the whole run: generations handed out strictly increase
#
{
	my $increasing = 1;
	for my $i (1 .. $#generations)
	{
		$increasing = 0 unless $generations[$i] > $generations[ $i - 1 ];
	}
	ok($increasing, 'every generation handed out (' . scalar(@generations)
		  . ') is above the one before');
}

$node->stop;
$redis->stop;
done_testing();

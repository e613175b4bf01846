# fence_paused_backend.pl — the stale writer, end to end.
#
# The problem lease_fence exists for (README: its opening; and
# docs/guides/leases.md, "What the lease does not guarantee"): a client that stalls past its lease's TTL still
# runs, and still writes.  Here the client is a real PostgreSQL backend,
# stopped with SIGSTOP:
#
#   1. session A acquires the lease on a resource (ttl 1500 ms): generation gA;
#   2. A's backend is stopped past the TTL; the lease expires in Redis;
#   3. session B acquires the same resource — a greater generation gB — and
#      writes the protected row under gB;
#   4. A's backend continues and writes under gA, as if it still held the
#      lease: the fence rejects it with LF001, and B's row stands.
#
# A's lease calls after it wakes up must not disturb B either: renew is
# "lost" (never recreates or takes over the key), release is "not_held"
# (never deletes B's key).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use JSON::PP;
use LeaseFenceRedis;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);

my $redis = LeaseFenceRedis->new;

my $node = $redis->node('paused');
$node->safe_psql(
	'postgres', q{
CREATE TABLE acct (id int PRIMARY KEY, owner text NOT NULL);
SELECT lease_fence.protect('acct');
INSERT INTO acct (id, owner) VALUES (1, 'nobody');
});

my $json = JSON::PP->new;
my $key = 'lease_fence:{acct-1}';

# a stopped backend must not outlive a failed test: continue it first
# (this END runs before PostgreSQL::Test::Cluster's, which stops the node)
my $stopped_pid;
END
{
	kill 'CONT', $stopped_pid if $stopped_pid;
}

# Run SQL in a background session; returns (stdout, stderr).
sub run_sql
{
	my ($s, $sql) = @_;
	$s->{stderr} = '';
	my $out = $s->query($sql);
	my $err = $s->{stderr};
	$s->{stderr} = '';
	return ($out, $err);
}

sub sql_ok
{
	my ($s, $sql) = @_;
	my ($out, $err) = run_sql($s, $sql);
	die "unexpected error from: $sql\n$err" if $err =~ /ERROR:/;
	return $out;
}

sub call
{
	my ($s, $fn) = @_;
	return $json->decode(sql_ok($s, "SELECT row_to_json(r) FROM $fn r"));
}

sub sqlstate
{
	my ($err) = @_;
	return $err =~ /ERROR:\s+([0-9A-Z]{5}):/ ? $1 : '';
}

my %session_opts = (on_error_stop => 0, extra_params => [ '-v', 'VERBOSITY=verbose' ]);
my $sess_a = $node->background_psql('postgres', %session_opts);
my $sess_b = $node->background_psql('postgres', %session_opts);

# 1. A acquires
my $pid_a = sql_ok($sess_a, 'SELECT pg_backend_pid()');
my $la = call($sess_a, "lease_fence.acquire('acct-1', 1500)");
is($la->{status}, 'acquired', 'A acquires the lease (ttl 1500 ms)');
my ($id_a, $gen_a) = @$la{qw(identity generation)};
is($redis->cli('GET', $key), $id_a, "the lease key holds A's identity");

# 2. A's backend stalls past its TTL
kill('STOP', $pid_a) or die "harness: could not stop A's backend (pid $pid_a): $!";
$stopped_pid = $pid_a;
sleep(2);
is($redis->cli('EXISTS', $key), '0', "A's lease expired in Redis while A was stopped");

# 3. B takes over and writes
my $lb = call($sess_b, "lease_fence.acquire('acct-1', 30000)");
is($lb->{status}, 'acquired', 'B acquires the same resource');
my ($id_b, $gen_b) = @$lb{qw(identity generation)};
cmp_ok($gen_b, '>', $gen_a, "B's generation is greater than A's");
my (undef, $err) = run_sql($sess_b,
	"BEGIN; SET LOCAL lease_fence.generation = $gen_b; UPDATE acct SET owner = 'B' WHERE id = 1; COMMIT;");
is(sqlstate($err), '', 'B writes the row under its generation');

# 4. A wakes up and writes under its old generation
kill('CONT', $pid_a) or die "harness: could not continue A's backend (pid $pid_a): $!";
$stopped_pid = undef;

(undef, $err) = run_sql($sess_a,
	"BEGIN; SET LOCAL lease_fence.generation = $gen_a; UPDATE acct SET owner = 'A' WHERE id = 1;");
is(sqlstate($err), 'LF001', "A's UPDATE under its old generation is rejected with LF001");
like($err, qr/DETAIL:.*\b$gen_b\b/s, "LF001 DETAIL names the stored generation (B's)");
like($err, qr/DETAIL:.*\b$gen_a\b/s, "LF001 DETAIL names the supplied generation (A's)");
sql_ok($sess_a, 'ROLLBACK');

(undef, $err) = run_sql($sess_a,
	"BEGIN; SELECT lease_fence.set_generation($gen_a); DELETE FROM acct WHERE id = 1;");
is(sqlstate($err), 'LF001', "A's DELETE under its old generation is rejected with LF001");
sql_ok($sess_a, 'ROLLBACK');

is($node->safe_psql('postgres', 'SELECT owner, fence FROM acct WHERE id = 1'),
	"B|$gen_b", "B's row stands, fenced with B's generation");

# A's lease calls after waking do not disturb B's lease
my $r = call($sess_a, "lease_fence.renew('acct-1', '$id_a', 1500)");
is($r->{status}, 'lost', "A's renew after waking: lost");
is($redis->cli('GET', $key), $id_b, "A's renew did not take the key over: it holds B's identity");
my $pttl = $redis->cli('PTTL', $key);
ok($pttl > 1500, "A's renew did not shorten B's TTL (PTTL $pttl)");
$r = call($sess_a, "lease_fence.release('acct-1', '$id_a')");
is($r->{status}, 'not_held', "A's release after waking: not_held");
is($redis->cli('GET', $key), $id_b, "A's release did not delete B's key");

# B is done
is(call($sess_b, "lease_fence.release('acct-1', '$id_b')")->{status}, 'released', 'B releases its lease');
is($redis->cli('EXISTS', $key), '0', 'the lease key is gone');

$sess_a->quit;
$sess_b->quit;
$node->stop;
$redis->stop;
done_testing();

# generation_logical_switchover.pl — a switchover to a logical replica
# keeps the generations (docs/operations.md, "Moving a database").
#
# Logical replication copies rows, their fences, the resource fences and
# the checkpoints, but not the generation sequence.  Blue (the old primary,
# of LF_OLD_PG when the harness gives one: PostgreSQL 15 under an 18 run)
# publishes a lenient and a strict fenced table and lease_fence's resource
# fences and checkpoints; green (the run's PostgreSQL) subscribes.  Holders
# take Redis leases on blue and write there; then the switch, as the
# procedure says: blue's writers stop, green catches up,
# highest_issued() on blue, the subscription disabled, adopt_generations()
# and claim_key_prefix() on green.  Asserted:
#
#  - the refusals first, nothing moved: an old_highest_issued below a fence
#    green holds (22023), a role that is neither superuser nor the
#    extension's owner (42501);
#  - the adoption returns the first value of the epoch above blue's, logs
#    it, counts it (generation / adopted), records it;
#  - every holder of blue is refused on green with LF004 and the adoption's
#    message: rows of both tables, resource fences, checkpoints — also in a
#    session that read the (empty) adoption state before the adoption
#    (each backend's reading is dropped by it);
#  - a new holder acquires on green (acquired, not stale: above what Redis
#    holds), resumes from blue's checkpoint, and its writes stand;
#  - no generation green hands out equals one blue issued, also those blue
#    drew after its highest_issued() was read; blue's own acquires are
#    unavailable once green claimed the key prefix.
# Harness steps (catch-up waits, set-up SQL) die when they fail.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use LeaseFenceRedis;
use LeaseFenceTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $EPOCH = 1 << 40;
my $old = $ENV{LF_OLD_PG};
my $redis = LeaseFenceRedis->new;

sub server
{
	my ($name, $path, %init) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name, defined $path ? (install_path => $path) : ());
	$node->init(%init);
	# (a setting of 18 that the test modules write for every major)
	$node->adjust_conf('postgresql.conf', 'autovacuum_worker_slots', undef)
	  if defined $path && ($ENV{LF_OLD_PG_MAJOR} // 18) < 18;
	$node->append_conf('postgresql.conf', join("\n",
		"shared_preload_libraries = 'lease_fence'",
		"lease_fence.redis_socket = '" . $redis->socket_path . "'",
		"lease_fence.command_timeout_ms = $LeaseFenceRedis::TIMEOUT_MS",
		"lease_fence.cleanup_timeout_ms = $LeaseFenceRedis::TIMEOUT_MS") . "\n");
	$node->start;
	return $node;
}

my $blue = server('blue', $old, allows_streaming => 'logical');
my $green = server('green', undef);
note('blue: ' . $blue->safe_psql('postgres', 'SHOW server_version')
	  . ', green: ' . $green->safe_psql('postgres', 'SHOW server_version'));

my $schema = q{
CREATE EXTENSION lease_fence;
CREATE TABLE acct (id int PRIMARY KEY, balance int NOT NULL, fence bigint NOT NULL DEFAULT 0);
SELECT lease_fence.protect('acct');
CREATE TABLE jobs (id int PRIMARY KEY, state text NOT NULL, fence bigint);
SELECT lease_fence.protect('jobs', strict => true);
};
sql_ok($_, $schema) for ($blue, $green);
sql_ok($blue, 'CREATE PUBLICATION moving FOR TABLE acct, jobs, '
	  . 'lease_fence.resource_generation, lease_fence.resource_checkpoint');
sql_ok($green, "CREATE SUBSCRIPTION moving CONNECTION '"
	  . $blue->connstr . " dbname=postgres' PUBLICATION moving");
$green->wait_for_subscription_sync($blue, 'moving');

# A holder: a Redis lease on a node, and its fenced writes in one
# transaction (the balance, the job's state, the resource fence, a
# checkpoint).  Returns the generation.
sub hold_and_write
{
	my ($node, $res, $balance, $step) = @_;
	my $lease = acquire($node, $res, 60000);
	need($lease->{status}, 'acquired', "acquire of $res on " . $node->name);
	my $g = $lease->{generation};
	sql_ok($node, qq{
BEGIN;
SELECT lease_fence.set_generation($g, '$res');
INSERT INTO acct VALUES (1, $balance) ON CONFLICT (id) DO UPDATE SET balance = excluded.balance;
INSERT INTO jobs VALUES (1, 'step $step') ON CONFLICT (id) DO UPDATE SET state = excluded.state;
SELECT lease_fence.checkpoint('$res', '{"step": $step}');
COMMIT;});
	release($node, $res, $lease->{identity});
	return $g;
}

# holders A, then B, on blue; green receives their rows and fences
my $ga = hold_and_write($blue, 'acct:1', 100, 1);
my $gb = hold_and_write($blue, 'acct:1', 90, 2);
need($gb > $ga ? 1 : 0, 1, 'B holds a later generation than A');
# blue issued more than it wrote (draws that wrote nothing)
my @blue_draws = ($ga, $gb);
push @blue_draws, sql_ok($blue, 'SELECT lease_fence.next_generation()') for 1 .. 3;

# the switch: blue's writers have stopped; green has caught up
$blue->wait_for_catchup('moving');
my $blue_highest = sql_ok($blue, 'SELECT lease_fence.highest_issued()');
need($blue_highest, $blue_draws[-1], "blue's highest_issued() is its last draw");
sql_ok($green, 'ALTER SUBSCRIPTION moving DISABLE');
is(sql_ok($green, 'SELECT fence FROM acct WHERE id = 1') . '/'
	  . sql_ok($green, q{SELECT generation FROM lease_fence.resource_generation WHERE resource = 'acct:1'}),
	"$gb/$gb", "green received B's fence and resource fence");

# a session of green that read the adoption state before the adoption (a
# lenient write of generation 0 reads it, and keeps its reading)
my $early = session($green);
sql_ok($early, 'INSERT INTO acct (id, balance) VALUES (2, 0)');

# refusals, nothing moved
my $green_before = sql_ok($green, 'SELECT lease_fence.highest_issued()');
my ($out, $err) = run_sql($green, 'SELECT lease_fence.adopt_generations(' . ($gb - 1) . ')');
is(sqlstate($err), '22023', 'an old_highest_issued below a fence green holds is refused (22023)');
like($err, qr/below a fence this database holds.*holds generation $gb/s,
	'... naming the fence that shows it cannot be the old primary\'s');
sql_ok($green, 'CREATE ROLE ops LOGIN; GRANT USAGE ON SCHEMA lease_fence TO ops; '
	  . 'GRANT EXECUTE ON FUNCTION lease_fence.adopt_generations(bigint) TO ops');
($out, $err) = run_sql($green, "SELECT lease_fence.adopt_generations($blue_highest)", user => 'ops');
like($err, qr/42501: must be superuser or the owner of extension lease_fence/,
	'a role that is neither superuser nor the extension\'s owner may not adopt (42501)');
is(sql_ok($green, 'SELECT lease_fence.highest_issued() || \'/\' || count(*) FROM lease_fence.generation_adoption'),
	"$green_before/0", 'the refused adoptions moved nothing and recorded nothing');

# the adoption
my $refused = sql_ok($green, "SELECT lease_fence.adopt_generations($blue_highest)");
my $want = ((int($blue_highest / $EPOCH)) + 1) * $EPOCH;
is($refused, $want, 'adopt_generations() moves to the first value of the epoch above blue\'s');
is(sql_ok($green, q{SELECT refused_through || '/' || highest_fence || '/' || old_highest_issued
	FROM lease_fence.generation_adoption}), "$refused/$gb/$blue_highest",
	'the adoption is recorded: what it refused, the highest fence found, blue\'s highest issued');
is(sql_ok($green, q{SELECT count FROM lease_fence.stats WHERE operation = 'generation' AND outcome = 'adopted'}),
	'1', 'counted: generation / adopted');
ok($green->log_contains(qr/generations adopted: every generation up to $refused is refused from now on/),
	'logged');
sql_ok($green, 'SELECT lease_fence.claim_key_prefix()');

# every holder of blue is refused on green, saying why
my $why = qr/LF004: generation issued before lease_fence.adopt_generations\(\): write rejected by fence.*adopted the generations of the database it replaced/s;
for my $case (
	[ "A's write", $ga, "UPDATE acct SET balance = 1 WHERE id = 1" ],
	[ "B's write", $gb, "UPDATE acct SET balance = 1 WHERE id = 1" ],
	[ "B's strict write", $gb, "UPDATE jobs SET state = 'x' WHERE id = 1" ],
	[ "B's resource fence", $gb, "SELECT lease_fence.fence_resource('acct:1')" ],
	[ "B's checkpoint", $gb, q{SELECT lease_fence.checkpoint('acct:1', '{"step": 3}')} ])
{
	my ($what, $g, $sql) = @{$case};
	($out, $err) = run_sql($green, "BEGIN; SELECT lease_fence.set_generation($g); $sql; COMMIT;");
	like($err, $why, "$what under blue's generation $g is refused on green: LF004, the adoption named");
}
($out, $err) = run_sql($early,
	"BEGIN; SELECT lease_fence.set_generation($gb); UPDATE acct SET balance = 1 WHERE id = 1; COMMIT;");
like($err, $why, 'also in a session that read the adoption state before the adoption');
$early->quit;

# a new holder on green: acquired above what Redis holds, resumes from B's
# checkpoint, and its writes stand
my $lease = acquire($green, 'acct:1', 60000);
is($lease->{status}, 'acquired', 'a new holder acquires on green (not stale)');
cmp_ok($lease->{generation}, '>', $refused, '... with a generation above the refused ones');
my $gc = $lease->{generation};
is(sql_ok($green, q{SELECT state FROM lease_fence.last_checkpoint('acct:1')}), '{"step": 2}',
	"... and resumes from B's checkpoint");
($out, $err) = run_sql($green, qq{
BEGIN;
SELECT lease_fence.set_generation($gc, 'acct:1');
UPDATE acct SET balance = 80 WHERE id = 1;
UPDATE jobs SET state = 'step 3' WHERE id = 1;
SELECT lease_fence.checkpoint('acct:1', '{"step": 3}');
COMMIT;});
is($err, '', "the new holder's writes commit");
is(sql_ok($green, q{SELECT a.balance || '/' || a.fence || '/' || j.state || '/' || j.fence
	FROM acct a, jobs j WHERE a.id = 1 AND j.id = 1}), "80/$gc/step 3/$gc", '... and stand');
release($green, 'acct:1', $lease->{identity});

# no generation of green equals one blue issued, also blue's draws after
# its highest_issued() was read (an old primary that was not stopped)
push @blue_draws, sql_ok($blue, 'SELECT lease_fence.next_generation()') for 1 .. 3;
my @green_draws = ($gc, map { sql_ok($green, 'SELECT lease_fence.next_generation()') } 1 .. 3);
my %blue = map { $_ => 1 } @blue_draws;
is(scalar(grep { $blue{$_} } @green_draws), 0, 'no generation green hands out is one blue issued');
my ($blue_max) = sort { $b <=> $a } @blue_draws;
my ($green_min) = sort { $a <=> $b } @green_draws;
cmp_ok($green_min, '>', $blue_max, '... every one is above every one of blue\'s');

# blue's own acquires, once green claimed the prefix: unavailable
my $r = acquire($blue, 'acct:1', 60000);
is($r->{status}, 'unavailable', 'an acquire on blue after the switch is unavailable (the prefix is green\'s)');

$green->stop;
$blue->stop;
done_testing();

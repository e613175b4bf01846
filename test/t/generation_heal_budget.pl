# generation_heal_budget.pl — heals move the generations at most 2^24 in total
# until a superuser's advance_generation() (docs/guides/failover-and-generations.md,
# "How far a stale answer moves the generations").
#
# Whoever may write Redis sets <prefix>{victim}:gen to the highest issued
# generation + 2^24 before an application's acquire: each heal alone is
# within 2^24, and in 1.3 before the budget each such acquire moved the
# sequence 2^24, until the epoch was exhausted.  Here:
#
#  - a fresh install's first such heal (2^24 - 1 past the highest issued)
#    is stale and moves the generations (heal/moved);
#  - the second is ERROR XX001 naming the heal budget, with a HINT naming
#    advance_generation(); the sequence moved only by the acquire's own
#    draw, heal/refused counted once, the :gen key and Redis left alone;
#  - the budget is durable: after a crash (immediate stop) the same acquire
#    is refused again;
#  - a stale answer that moves nothing (a stored generation the database
#    issued) still answers stale with the budget spent;
#  - a superuser's advance_generation() renews the budget (also one that
#    moves nothing): the refused heal then heals, and the next acquire is
#    acquired above the stored value;
#  - a 1.2 installation served by this library refuses heals that would
#    move the generations (55000: update), and heals those that move nothing.
# The acquires of 1 to 5 run as an application role with EXECUTE on acquire
# only.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use JSON::PP;
use LeaseFenceRedis;
use LeaseFenceTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $redis = LeaseFenceRedis->new;
my $node = $redis->node('heal_budget', "shared_preload_libraries = 'lease_fence'");
my $BUDGET = 1 << 24;
my $EPOCH = 1 << 40;

sql_ok($node, 'CREATE ROLE lf_app LOGIN');
sql_ok($node, 'GRANT EXECUTE ON FUNCTION lease_fence.acquire(text, bigint, bigint, text, bigint, boolean, boolean) TO lf_app');

sub counter
{
	my ($outcome) = @_;
	return 0 + (sql_ok($node,
		"SELECT count FROM lease_fence.stats WHERE operation = 'heal' AND outcome = '$outcome'") || 0);
}

# the highest generation issued: the sequence's value (read, not drawn)
sub highest { return 0 + sql_ok($node, 'SELECT last_value FROM lease_fence.generation_seq'); }

# acquire as lf_app in a session of its own: (row as a hash or undef, SQLSTATE or '', stderr)
sub try_acquire
{
	my ($res) = @_;
	my ($out, $err) = run_sql($node,
		"SELECT row_to_json(a) FROM lease_fence.acquire(" . lit($res) . ", 30000) a",
		user => 'lf_app');
	my $row = $out =~ /^\{/ ? JSON::PP->new->decode($out) : undef;
	return ($row, sqlstate($err), $err);
}

# The acquire over a :gen key that its heal has no budget for: refused,
# moving nothing but the acquire's own draw.
sub refused_by_budget
{
	my ($what, $res, $stored) = @_;
	my ($before, $refused, $moved) = (highest(), counter('refused'), counter('moved'));
	my ($row, $state, $err) = try_acquire($res);
	is($state, 'XX001', "$what: the acquire is ERROR XX001"
		  . ($row ? " (it answered $row->{status})" : ''));
	like($err, qr/would move the generations beyond the heal budget/, "$what: the error names the heal budget");
	like($err, qr/HINT:.*lease_fence\.advance_generation\(\)/, "$what: the HINT names advance_generation()");
	is(highest(), $before + 1, "$what: the sequence moved only by the acquire's own draw");
	is(counter('refused'), $refused + 1, "$what: counted once as heal/refused");
	is(counter('moved'), $moved, "$what: not counted as heal/moved");
	is($redis->cli('GET', gkey($res)), $stored, "$what: the :gen key is left as it was");
	is($redis->cli('EXISTS', lkey($res)), '0', "$what: no lease key was set");
	return;
}

sql_ok($node, 'SELECT lease_fence.next_generation()');

# 1. the first step: within the budget, healed
my $first = highest() + $BUDGET;
need($redis->cli('SET', gkey('victim'), $first), 'OK', 'SET of the :gen key of victim');
my ($row, $state, $err) = try_acquire('victim');
is($row && $row->{status}, 'stale', 'a heal of 2^24 - 1 on a fresh install: stale')
  or diag($err);
is(highest(), $first, 'it moved the generations to the stored value');
is(counter('moved'), 1, 'counted as heal/moved');
is(counter('refused'), 0, 'not counted as heal/refused');

# 2. the second step: the budget has 1 left
my $second = highest() + $BUDGET;
need($redis->cli('SET', gkey('victim'), $second), 'OK', 'SET of the :gen key of victim');
refused_by_budget('the second step', 'victim', $second);
ok(highest() < $EPOCH, 'the generations stay far from the end of epoch 0');

# 3. durable: a crash does not renew the budget
$node->stop('immediate');
$node->start;
refused_by_budget('the second step after a crash', 'victim', $second);

# 4. a stale answer that moves nothing passes with the budget spent (an
# acquirer that stalled: Redis holds the generation the acquire draws)
{
	my $issued = highest() + 1;
	need($redis->cli('SET', gkey('stalled'), $issued), 'OK', 'SET of the :gen key of stalled');
	my $refused = counter('refused');
	($row, $state, $err) = try_acquire('stalled');
	is($row && $row->{status}, 'stale', 'a stale answer that moves nothing: stale') or diag($err);
	is(counter('refused'), $refused, 'it is not refused');
	($row, $state, $err) = try_acquire('stalled');
	is($row && $row->{status}, 'acquired', 'the next acquire is acquired') or diag($err);
}

# 5. advance_generation() renews the budget, also one that moves nothing
{
	my ($before, $moved) = (highest(), counter('moved'));
	is(sql_ok($node, 'SELECT lease_fence.advance_generation(0)'), $before,
		'advance_generation(0) moves nothing');
	($row, $state, $err) = try_acquire('victim');
	is($row && $row->{status}, 'stale', 'after advance_generation the refused heal heals') or diag($err);
	is(highest(), $second, 'to the stored value');
	($row, $state, $err) = try_acquire('victim');
	is($row && $row->{status}, 'acquired', 'the next acquire is acquired') or diag($err);
	ok($row && $row->{generation} > $second, 'above the stored value');
	is(counter('moved'), $moved + 1, 'the heal is counted as heal/moved');
}

# 6. a 1.2 installation served by this library (before its ALTER EXTENSION
# UPDATE) has no budget: a heal that would move the generations is 55000
# asking for the update, one that moves nothing still answers stale
{
	sql_ok($node, 'CREATE DATABASE old12');
	sql_ok($node, q{ALTER DATABASE old12 SET lease_fence.key_prefix = 'old12:'});
	$node->safe_psql('old12', q{CREATE EXTENSION lease_fence VERSION '1.2'});
	my $h = $node->safe_psql('old12', 'SELECT lease_fence.next_generation()');
	need($redis->cli('SET', 'old12:{r}:gen', $h + 1000), 'OK', 'SET of a :gen key of old12');
	my ($ret, $out, $err) = $node->psql('old12', q{SELECT status FROM lease_fence.acquire('r', 30000)},
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	is(sqlstate($err), '55000', '1.2 objects: a heal that moves the generations is 55000');
	like($err, qr/ALTER EXTENSION lease_fence UPDATE/, '1.2 objects: it asks for the update');
	$h = $node->safe_psql('old12', 'SELECT last_value FROM lease_fence.generation_seq');
	need($redis->cli('SET', 'old12:{s}:gen', $h + 1), 'OK', 'SET of a :gen key of old12');
	is($node->safe_psql('old12', q{SELECT status FROM lease_fence.acquire('s', 30000)}), 'stale',
		'1.2 objects: a stale answer that moves nothing is stale');
}

$node->stop;
$redis->stop;
done_testing();

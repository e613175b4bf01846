# generation_poisoned_key.pl — a :gen key lease_fence could not have
# written does not move the generations (docs/guides/failover-and-generations.md, "Generations": how far a
# stale answer moves the generations; "Statuses": stale).
#
#  - a stored generation in another epoch (2^63-1, 2^62, a millisecond
#    timestamp), more than 2^24 above the highest issued, or in the last
#    2^24 values of its epoch: the acquire is ERROR XX001, counted as
#    heal/refused, and the sequence moved only by the draws of the calls
#    themselves (each attempt draws one before it reaches Redis);
#  - a :gen key that is not a canonical generation ('0000007'): XX001 every
#    time, never stale for ever; other resources acquire as before;
#  - within the margin (highest issued + 1000) stale still heals: the next
#    acquire is acquired above the stored value;
#  - advance_generation(past): 42501 for a non-superuser (also with
#    EXECUTE granted), for the superuser it moves the generations past a
#    value beyond the margin, and the next acquire there is acquired.

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
my $node = $redis->node('poisoned', "shared_preload_libraries = 'lease_fence'");
my $s = session($node);
my $EPOCH = 1 << 40;
my $MARGIN = 1 << 24;

sub refused
{
	return 0 + (sql_ok($node,
		"SELECT count FROM lease_fence.stats WHERE operation = 'heal' AND outcome = 'refused'") || 0);
}

# a draw that must succeed (a harness step)
sub next_gen { return sql_ok($node, 'SELECT lease_fence.next_generation()'); }

# acquire on the session: (row as a hash or undef, SQLSTATE or '', stderr)
sub try_acquire
{
	my ($res) = @_;
	my ($out, $err) = run_sql($s, "SELECT row_to_json(a) FROM lease_fence.acquire(" . lit($res) . ", 30000) a");
	my $row = $out =~ /^\{/ ? JSON::PP->new->decode($out) : undef;
	return ($row, sqlstate($err), $err);
}

# The :gen key of $res holds $value; the acquire must be refused, leaving
# everything where it was.
sub refused_case
{
	my ($what, $res, $value, $msg) = @_;
	need($redis->cli('SET', gkey($res), $value), 'OK', "SET of the :gen key of $res");
	my ($before, $count) = (next_gen(), refused());
	my ($row, $state, $err) = try_acquire($res);
	is($state, 'XX001', "$what: the acquire is ERROR XX001"
		  . ($row ? " (it answered $row->{status})" : ''));
	like($err, $msg, "$what: the error says why");
	# (not a harness step: a sequence moved to the end of an epoch fails here)
	my ($after) = run_sql($node, 'SELECT lease_fence.next_generation()');
	is($after, $before + 2,
		"$what: the sequence moved only by the acquire's draw and this next_generation()");
	ok($after ne '' && $after < $EPOCH, "$what: next_generation() stays in epoch 0 ($after)");
	is(refused(), $count + 1, "$what: counted once as heal/refused");
	is($redis->cli('GET', gkey($res)), $value, "$what: the :gen key is left as it was");
	is($redis->cli('EXISTS', lkey($res)), '0', "$what: no lease key was set");
	return;
}

my $not_issued = qr/was not issued by this database/;
my $not_gen = qr/generation key of resource "p-zeros" does not hold a generation/;

# a key that is not a generation as lease_fence writes it: refused, twice
refused_case("'0000007' (1st)", 'p-zeros', '0000007', $not_gen);
refused_case("'0000007' (2nd: never stale for ever)", 'p-zeros', '0000007', $not_gen);

# generations of another epoch, and one beyond the margin in epoch 0
refused_case('a millisecond timestamp', 'p-ms', '1767225600000', $not_issued);
refused_case('2^62', 'p-2e62', '4611686018427387904', $not_issued);
refused_case('2^24 + 1000 above the highest issued', 'p-margin',
	next_gen() + 2 + $MARGIN + 1000, $not_issued);
refused_case('2^63-1', 'p-max', '9223372036854775807', $not_issued);

# the database's generations are unharmed: another resource acquires
{
	my $g = next_gen();
	my $r = acquire($s, 'p-other', 30000);
	is($r->{status}, 'acquired', 'after the refusals another resource is acquired');
	ok($r->{generation} > $g && $r->{generation} < $EPOCH,
		"with the next generation of epoch 0 ($r->{generation})");
	release($s, 'p-other', $r->{identity});
}

# within the margin stale still heals
{
	my $count = refused();
	my $near = next_gen() + 1000;
	need($redis->cli('SET', gkey('p-near'), $near), 'OK', 'SET of the :gen key of p-near');
	my $r = acquire($s, 'p-near', 30000);
	is($r->{status}, 'stale', 'highest issued + 1000: stale');
	$r = acquire($s, 'p-near', 30000);
	is($r->{status}, 'acquired', 'highest issued + 1000: the next acquire is acquired');
	ok($r->{generation} > $near, "with a generation above the stored value ($r->{generation} > $near)");
	is(refused(), $count, 'a heal within the margin is not counted as refused');
	release($s, 'p-near', $r->{identity});
}

# advance_generation: superuser only, then the next acquire over a value
# beyond the margin is acquired
{
	my $far = next_gen() + 2 * $MARGIN;
	need($redis->cli('SET', gkey('p-restored'), $far), 'OK', 'SET of the :gen key of p-restored');
	my ($r, $state) = try_acquire('p-restored');
	is($state, 'XX001', 'a value 2^25 above: XX001 before advance_generation');

	sql_ok($node, 'CREATE ROLE lf_app LOGIN');
	my $before = next_gen();
	my (undef, $err) = run_sql($node, "SELECT lease_fence.advance_generation($far)", user => 'lf_app');
	is(sqlstate($err), '42501', 'advance_generation by a non-superuser: 42501');
	sql_ok($node, 'GRANT EXECUTE ON FUNCTION lease_fence.advance_generation(bigint) TO lf_app');
	(undef, $err) = run_sql($node, "SELECT lease_fence.advance_generation($far)", user => 'lf_app');
	is(sqlstate($err), '42501', 'advance_generation by a non-superuser with EXECUTE granted: 42501');
	is(next_gen(), $before + 1, 'the refused advance_generation moved nothing');

	is(sql_ok($node, "SELECT lease_fence.advance_generation($far)"), $far,
		'advance_generation by the superuser returns the highest issued generation, the value given');
	$r = acquire($s, 'p-restored', 30000);
	is($r->{status}, 'acquired', 'after advance_generation the acquire over that value is acquired');
	ok($r->{generation} > $far, "with a generation above it ($r->{generation} > $far)");
	release($s, 'p-restored', $r->{identity});
}

# a stored value in the last 2^24 of epoch 0, within the margin of what was
# issued (the generations moved close to it first)
{
	my $limit = $EPOCH - $MARGIN;
	my ($out, $err) = run_sql($node, 'SELECT lease_fence.advance_generation(' . ($EPOCH - 1) . ')');
	is(sqlstate($err), '22023', 'advance_generation into the last 2^24 of the epoch: 22023');
	sql_ok($node, 'SELECT lease_fence.advance_generation(' . ($limit - 1000) . ')');
	refused_case('the last 2^24 of epoch 0', 'p-end', $limit + 10, $not_issued);
}
$s->quit;

generations_increase();

$node->stop;
$redis->stop;
done_testing();

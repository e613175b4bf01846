# generation_unissued.pl — "issued" across backends, the lease helper and a crash.
#
# A generation above the highest one next_generation() has issued is refused
# with LF004 (sql/unissued.sql has the rules).  Each backend caches the
# highest issued generation it has read; this file checks that the cache
# never refuses a generation that was issued:
#
#   1. a generation another backend's acquire drew passes in a backend whose
#      cache is older; one above it is refused;
#   2. acquire's "stale" heals the generation space past what Redis stored
#      (setval): that stored generation counts as issued, and the next
#      acquire's generation passes elsewhere;
#   3. after a crash, every generation returned before it is still issued.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use LeaseFenceRedis;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $redis = LeaseFenceRedis->new;
my $node = $redis->node('unissued');
$node->safe_psql('postgres', q{
CREATE TABLE t (id int PRIMARY KEY, v text);
SELECT lease_fence.protect('t');
GRANT EXECUTE ON FUNCTION lease_fence.acquire(text, bigint, bigint, text, bigint, boolean, boolean) TO PUBLIC;
});

# SQL in a background session: (stdout, stderr)
sub run_sql
{
	my ($s, $sql) = @_;
	$s->{stderr} = '';
	my $out = $s->query($sql);
	my $err = $s->{stderr};
	$s->{stderr} = '';
	return ($out, $err);
}

sub sqlstate { my ($err) = @_; return $err =~ /ERROR:\s+([0-9A-Z]{5}):/ ? $1 : ''; }

# the writer: a long-lived backend that caches the highest issued generation
my $w = $node->background_psql('postgres', on_error_stop => 0,
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
my $g0 = $node->safe_psql('postgres', 'SELECT lease_fence.next_generation()');
my ($out, $err) = run_sql($w,
	"BEGIN; SET LOCAL lease_fence.generation = $g0; INSERT INTO t VALUES (1, 'w'); COMMIT;");
is($err, '', "the writer writes under generation $g0 (its cache now holds it)");

# 1. acquire in another backend; the writer's cache is older
my $g1 = $node->safe_psql('postgres',
	q{SELECT generation FROM lease_fence.acquire('u1', 60000) WHERE status = 'acquired'});
like($g1, qr/^\d+$/, 'another backend acquires a lease') or BAIL_OUT('no lease');
($out, $err) = run_sql($w,
	"BEGIN; SET LOCAL lease_fence.generation = $g1; UPDATE t SET v = 'a' WHERE id = 1; COMMIT;");
is($err, '', "the acquired generation $g1 passes in the writer, whose cache held $g0");
my $next = $g1 + 1;
($out, $err) = run_sql($w,
	"BEGIN; SET LOCAL lease_fence.generation = $next; UPDATE t SET v = 'x' WHERE id = 1; COMMIT;");
is(sqlstate($err), 'LF004', "one above it ($next), never issued, is LF004");

# 2. stale: Redis remembers a generation this database has not issued
my $floor = $g1 + 5000000;    # (within the margin a stale answer heals)
$redis->cli('SET', 'lease_fence:{u2}:gen', $floor);
is($node->safe_psql('postgres', q{SELECT status FROM lease_fence.acquire('u2', 60000)}),
	'stale', 'acquire finds a greater generation in Redis: stale');
($out, $err) = run_sql($w,
	"BEGIN; SET LOCAL lease_fence.generation = $floor; UPDATE t SET v = 'floor' WHERE id = 1; COMMIT;");
is($err, '', "the generation Redis had stored ($floor) counts as issued after the healing");
my $g2 = $node->safe_psql('postgres',
	q{SELECT generation FROM lease_fence.acquire('u2', 60000) WHERE status = 'acquired'});
is($g2, $floor + 1, 'the next acquire gets the generation after it');
($out, $err) = run_sql($w,
	"BEGIN; SET LOCAL lease_fence.generation = $g2; UPDATE t SET v = 'b' WHERE id = 1; COMMIT;");
is($err, '', "and it passes in the writer ($g2)");
$w->quit;

# 3. a crash: the sequence restarts from its last logged value, never below
# a generation it returned
my $g3 = $node->safe_psql('postgres', 'SELECT lease_fence.next_generation()');
$node->stop('immediate');
$node->start;
my ($ret, $o, $e) = $node->psql('postgres',
	"BEGIN; SET LOCAL lease_fence.generation = $g3; UPDATE t SET v = 'c' WHERE id = 1 RETURNING fence; COMMIT;");
is($e, '', "after a crash, the generation returned just before it ($g3) is still issued");
is($o, $g3, 'and the row took it');

done_testing();

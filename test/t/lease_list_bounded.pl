# lease_list_bounded.pl — a backend's list of leases stays bounded.
#
# Behind a pooler, an explicit-scope lease is typically released on another
# backend: in the backend that acquired it, it stays "held".  A backend that
# lives for days must not keep every one of them: lease_fence.leases (and
# the memory context "lease_fence leases" behind it) forgets explicit leases
# past their expiry and keeps at most 1000 held explicit ones, while
# session- and transaction-scoped leases, which the backend still has to
# release, are never forgotten.
#
# One backend acquires 100,000 explicit leases (ttl one hour) in batches;
# after each batch a second session releases them.  The size of the
# context is read from pg_backend_memory_contexts after every batch.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use LeaseFenceRedis;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use List::Util qw(max);
use Test::More;
use Time::HiRes qw(sleep);

my $redis = LeaseFenceRedis->new;
# 100,000 round trips on a machine that may be busy: a reply later than
# the harness's 300 ms would be an unknown acquire, beside this test's point
my $node = $redis->node('bounded', 'lease_fence.command_timeout_ms = 30000');
$node->safe_psql('postgres', 'CREATE UNLOGGED TABLE ids (resource text, identity text)');

my $holder = $node->background_psql('postgres');
my $releaser = $node->background_psql('postgres');

my $total = 100_000;
my $batch = 5_000;
my $ttl = 3_600_000;

sub context_bytes
{
	# (by name alone: 18 has no parent column; the name is lease_fence's own)
	return $holder->query_safe(q{SELECT total_bytes FROM pg_backend_memory_contexts
		WHERE name = 'lease_fence leases'});
}

sub view_counts
{
	my $out = $holder->query_safe(q{SELECT scope || '/' || state, count(*)
		FROM lease_fence.leases GROUP BY 1 ORDER BY 1});
	return { map { split /\|/ } split /\n/, $out };
}

# obligations first, so they are the oldest entries: three session-scoped
# leases (released when the backend exits) and one whose TTL runs out soon;
# and an explicit lease that expires soon
my $n = $holder->query_safe(q{SELECT count(*) FROM generate_series(1, 3) i,
	LATERAL lease_fence.acquire('sess-' || i, 600000, 0, 'session') a WHERE a.status = 'acquired'});
die "session leases: $n" unless $n eq '3';
for my $sql (q{SELECT status FROM lease_fence.acquire('sess-short', 1000, 0, 'session')},
	q{SELECT status FROM lease_fence.acquire('expl-short', 1000)})
{
	die "$sql failed" unless $holder->query_safe($sql) eq 'acquired';
}
# wait until both short leases are past their expires_at
my $expiry = $holder->query_safe(q{SELECT max(expires_at) FROM lease_fence.leases
	WHERE resource IN ('sess-short', 'expl-short') HAVING count(*) = 2});
die 'the short leases are not in the view' if $expiry eq '';
my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
until ($holder->query_safe("SELECT clock_timestamp() > '$expiry'") eq 't')
{
	die 'the short leases did not expire' if time() > $deadline;
	sleep(0.2);
}
is($holder->query_safe(q{SELECT count(*) FROM lease_fence.leases WHERE resource = 'expl-short'}),
	'0', 'an explicit lease past its expiry is forgotten');
is($holder->query_safe(q{SELECT state FROM lease_fence.leases WHERE resource = 'sess-short'}),
	'held', 'a session-scoped lease past its expiry is kept: the backend still releases it at exit');

# released leases: the last 64 are kept
$holder->query_safe(q{DO $$ DECLARE a lease_fence.lease; BEGIN
	FOR i IN 1..100 LOOP
		a := lease_fence.acquire('rel-' || i, 60000);
		PERFORM lease_fence.release(a.resource, a.identity);
	END LOOP; END $$});
is(view_counts()->{'explicit/released'}, 64, 'of 100 released leases the last 64 are kept');

# 100,000 explicit acquires in one backend, each released by another session
my @sizes;    # of the context, after every batch
for (my $lo = 1; $lo <= $total; $lo += $batch)
{
	my $hi = $lo + $batch - 1;
	$holder->query_safe(qq{INSERT INTO ids SELECT a.resource, a.identity
		FROM generate_series($lo, $hi) i,
		LATERAL lease_fence.acquire('r-' || lpad(i::text, 6, '0'), $ttl) a
		WHERE a.status = 'acquired'});
	$n = $releaser->query_safe(q{SELECT count(*) FROM ids,
		LATERAL lease_fence.release(ids.resource, ids.identity) r WHERE r.status = 'released'});
	die "batch $lo..$hi: $n leases acquired and released elsewhere" unless $n eq $batch;
	$releaser->query_safe('TRUNCATE ids');
	push @sizes, context_bytes();
	note "after $hi acquires: context \"lease_fence leases\" $sizes[-1] bytes";
}
my $measured = !grep { !/^\d+$/ } @sizes;
ok($measured, 'the leases live in a memory context of their own, "lease_fence leases"');
my ($first, $last, $max) = $measured ? ($sizes[0], $sizes[-1], max(@sizes)) : (0, 0, 0);
ok($measured && $max <= $first + 8192,
	"its memory is flat: $first bytes after $batch acquires, at most $max up to $total");
ok($measured && $last < 1024 * 1024, "and small: $last bytes after $total acquires");

my $c = view_counts();
is($c->{'explicit/held'}, 1000, 'the leases view keeps the newest 1000 held explicit leases');
is($c->{'session/held'}, 4, 'every session-scoped lease is still held in the view');
is($holder->query_safe(q{SELECT min(resource) FROM lease_fence.leases
	WHERE scope = 'explicit' AND state = 'held'}), 'r-099001', 'the oldest held explicit leases were forgotten');
my $rows = 0;
$rows += $_ for values %$c;
ok($rows <= 1000 + 1000 + 64 + 4, "the whole view is bounded by the caps ($rows rows)");

# a transaction-scoped lease, the oldest entry of its transaction, outlives
# 1,500 explicit acquires in the same transaction and is released at COMMIT
$holder->query_safe('BEGIN');
die 'tx lease' unless $holder->query_safe(
	q{SELECT status FROM lease_fence.acquire('tx-1', 600000, 0, 'transaction')}) eq 'acquired';
$holder->query_safe(q{INSERT INTO ids SELECT a.resource, a.identity FROM generate_series(1, 1500) i,
	LATERAL lease_fence.acquire('tx-expl-' || i, 600000) a});
is($holder->query_safe(q{SELECT state FROM lease_fence.leases WHERE resource = 'tx-1'}), 'held',
	'a transaction-scoped lease is never forgotten while its transaction runs');
$holder->query_safe('COMMIT');
is($redis->cli('EXISTS', 'lease_fence:{tx-1}'), '0', 'and COMMIT released it');
$releaser->query_safe(q{SELECT count(*) FROM ids, LATERAL lease_fence.release(ids.resource, ids.identity) r});

# the session-scoped leases were kept, so the backend's exit releases them
my $pid = $holder->query_safe('SELECT pg_backend_pid()');
is($redis->cli('EXISTS', map { "lease_fence:{sess-$_}" } 1 .. 3), '3', 'the session leases are held in Redis');
$holder->quit;
$deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
while (kill(0, $pid))
{
	die 'the holder did not exit' if time() > $deadline;
	sleep(0.05);
}
is($redis->cli('EXISTS', map { "lease_fence:{sess-$_}" } 1 .. 3), '0',
	'after 100,000 explicit leases, the backend still released its session leases at exit');

$releaser->quit;
$node->stop;
done_testing();

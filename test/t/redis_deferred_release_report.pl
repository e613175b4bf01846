# redis_deferred_release_report.pl — what becomes of the release sent after
# COMMIT when its answer is not read on that connection's next request
# (docs/guides/orms-and-poolers.md, "Behind PgBouncer";
# docs/operations.md, "Warnings").
#
#  - Its failure is found by the session's next Redis request, which behind
#    a pooler is another client's statement: the WARNING it gets names no
#    resource; the server log does (also with client_min_messages = log).
#  - lease_fence.redis_port reloaded between COMMIT and the next request
#    (two real Redis servers): the release went to the old server; its
#    answer is read from there before the next request goes to the new one,
#    and counted -- confirmed when it came, unconfirmed with that WARNING
#    when the old server never answers (a proxy swallows the answer).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use LeaseFenceInject;
use LeaseFenceRedis;
use LeaseFenceTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $ra = LeaseFenceRedis->new;
my $rb = LeaseFenceRedis->new;
my $node = $ra->node('deferred_report');
my $proxy = LeaseFenceInject->new(upstream_port => $ra->port, dir => $ra->dir);

# the cleanup counters of session $s, as "confirmed/unconfirmed"
sub cleanups
{
	my ($s) = @_;
	return sql_ok($s, "SELECT string_agg(count::text, '/' ORDER BY outcome) FROM lease_fence.stats "
		  . "WHERE operation = 'cleanup' AND outcome IN ('confirmed', 'unconfirmed')");
}

# in session $s: a transaction-scoped lease on $res, COMMIT (its release is
# sent, not waited for), with the proxy in $mode for that release
sub commit_lease
{
	my ($s, $res, $mode) = @_;
	my $w = acquire($s, "$res-warm", 60000);
	release($s, "$res-warm", $w->{identity});
	sql_ok($s, 'BEGIN');
	my $t = acquire($s, $res, 60000, 0, 'transaction');
	need($t->{status}, 'acquired', "the lease on $res");
	$proxy->mode($mode);
	sql_ok($s, 'COMMIT');
	return $t;
}

# wait until session $s sees lease_fence.redis_port = $port
sub sees_port
{
	my ($s, $port) = @_;
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	until (sql_ok($s, "SELECT current_setting('lease_fence.redis_port')") eq $port)
	{
		die "the session did not reload its configuration" if time() > $deadline;
		select(undef, undef, undef, 0.05);
	}
	return;
}

#
# the pooler rule: the later statement's WARNING names no resource
#
set_redis_conf($node, redis_socket => '', redis_host => '127.0.0.1', redis_port => $proxy->port);
{
	my $s = session($node);
	sql_ok($s, 'SET client_min_messages = log');
	commit_lease($s, 'r-secret-name', 'swallow');
	$proxy->wait_done('swallowed', 1);
	my $before = cleanups($s);
	my $offset = -s $node->logfile;
	my ($out, $err) = run_sql($s, "SELECT status FROM lease_fence.acquire('r-later-client', 60000)");
	is($out, 'acquired', "the later statement's acquire goes on a new connection: acquired");
	like($err, qr/WARNING:  01000: could not confirm a lease release sent after an earlier COMMIT/,
		'the later statement gets a WARNING about the unconfirmed release');
	unlike($err, qr/r-secret-name/, 'which names no resource (client_min_messages = log included)');
	like(slurp_file($node->logfile, $offset),
		qr/could not confirm the release of key "lease_fence:\{r-secret-name\}" sent after COMMIT/,
		'the server log names it');
	my ($c, $u) = split m{/}, $before;
	is(cleanups($s), "$c/" . ($u + 1), 'counted as an unconfirmed cleanup');
	$s->quit;
}

#
# the endpoint reloaded between COMMIT and the next request
#
set_redis_conf($node, redis_port => $ra->port);
{
	my $s = session($node);
	my $t = commit_lease($s, 'r-moved', 'off');
	my $before = cleanups($s);
	set_redis_conf($node, redis_port => $rb->port);
	sees_port($s, $rb->port);
	my $n = acquire($s, 'r-moved-next', 60000);
	is($n->{status}, 'acquired', 'after the reload: the next acquire is acquired');
	is($rb->cli('GET', lkey('r-moved-next')), $n->{identity}, 'after the reload: on the new Redis');
	my ($c, $u) = split m{/}, $before;
	is(cleanups($s), ($c + 1) . "/$u",
		'after the reload: the release sent to the old Redis was read from there first, a confirmed cleanup');
	is($ra->cli('EXISTS', lkey('r-moved')), '0', 'after the reload: the old Redis ran it');
	is(lease_view($s, $t->{identity})->{state}, 'released', 'after the reload: the lease is released');
	$s->quit;
}

# the old endpoint never answers the release
set_redis_conf($node, redis_port => $proxy->port);
{
	my $s = session($node);
	commit_lease($s, 'r-moved-lost', 'swallow');
	$proxy->wait_done('swallowed', 2);
	my $before = cleanups($s);
	set_redis_conf($node, redis_port => $rb->port);
	sees_port($s, $rb->port);
	my ($out, $err) = run_sql($s, "SELECT status FROM lease_fence.acquire('r-moved-lost-next', 60000)");
	is($out, 'acquired', 'old endpoint silent: the next acquire is acquired on the new one');
	like($err, qr/could not confirm a lease release sent after an earlier COMMIT/,
		'old endpoint silent: a WARNING says the release is unconfirmed');
	unlike($err, qr/\{r-moved-lost\}|"r-moved-lost"/, 'old endpoint silent: naming no resource');
	my ($c, $u) = split m{/}, $before;
	is(cleanups($s), "$c/" . ($u + 1), 'old endpoint silent: counted as an unconfirmed cleanup');
	$s->quit;
}

generations_increase();

$node->stop;
$proxy->stop;
$_->stop for ($ra, $rb);
done_testing();

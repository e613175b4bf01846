# lease_fair_leave.pl — fair waiting under load and when things go wrong
# (docs/guides/keepalive-and-waiting.md, "Fair waiting"): acquire(..., fair =>
# true) on standalone Redis.
#
#  1. 16 waiters started at once: each release grants the queue's next
#     identity as queue() showed it, generations in that order; each
#     release wakes one waiter only (wait/woken grows by one per release;
#     one subscriber per waiter on its own channel, none on :released).
#  2. A waiter that leaves from the middle of the queue (pg_terminate_backend,
#     pg_cancel_backend, statement_timeout, wait_ms running out, a cancel
#     caught by a PL/pgSQL EXCEPTION block): its entry is gone as soon as its
#     backend is gone or its statement (or subtransaction) ended, fair/left
#     counts it, and the next release wakes the waiter after it, which is
#     granted after the first.  Its waiter key would live 60 s
#     (fair_waiter_ttl_ms): only its leaving explains that.
#  3. A waiter whose backend cannot say so (SIGSTOP, as if its PostgreSQL had
#     crashed; fair_waiter_ttl_ms 300): the next waiter is granted once the
#     frozen one's waiter key expired; continued, the frozen one rejoins at
#     the end and is granted after, never while another holds the lease.
#  4. Redis frozen (SIGSTOP) and continued while six waiters queue: the
#     four whose command_timeout_ms outlasts the freeze are granted, each
#     to the head queue() showed, those whose waiter keys outlast it in
#     their order, one holder at a time; the two whose requests timed out
#     end unknown (never busy, never acquired); nobody is lost.
#  5. Fair and unfair acquires of one resource: while a fair waiter lives
#     (its backend frozen right before the release, so that the lease stays
#     free), an unfair acquire is busy, with or without fair; an unfair
#     waiting acquire is granted only once the queue is empty.
#  6. unknown while queued: the first request of a fair wait timed out in a
#     frozen Redis (its reply and its cleanup lost, Redis continued before
#     the wait's leave gave up): status unknown, never busy; its entry is
#     gone (left, counted) and no lease key holds its identity.
#
# No assertion is about time: each step waits for a condition (a queue's
# length, a backend gone or idle, a counter, a key).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use LeaseFenceRedis;
use LeaseFenceTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use JSON::PP;
use Time::HiRes qw(sleep);

my $redis = LeaseFenceRedis->new;
my $node = $redis->node('fair_leave', "shared_preload_libraries = 'lease_fence'");
# a session whose psql timeout counts per statement, not from its start
sub sess
{
	my $s = session($node);
	$s->set_query_timer_restart;
	return $s;
}

# one session for the test's own SQL (counters, queue(), releases): no new
# backend per look
my $ctl = sess();

# processes this test stopped (a backend, Redis): continued whatever happens
my %stopped;
END { kill 'CONT', $_ for keys %stopped; }

sub freeze { my ($pid) = @_; kill('STOP', $pid) or die "harness: SIGSTOP $pid: $!"; $stopped{$pid} = 1; return; }
sub thaw { my ($pid) = @_; kill('CONT', $pid) or die "harness: SIGCONT $pid: $!"; delete $stopped{$pid}; return; }

sub counter
{
	my ($operation, $outcome) = @_;
	return sql_ok($ctl,
		"SELECT count FROM lease_fence.stats WHERE operation = '$operation' AND outcome = '$outcome'") + 0;
}

# a fair waiting acquire of $resource, started on $s
sub start_fair
{
	my ($s, $resource, %o) = @_;
	start_sql($s, "SELECT row_to_json(a) FROM lease_fence.acquire(" . lit($resource) . ", "
		  . ($o{ttl} // 600000) . ", wait_ms => " . ($o{wait_ms} // 60000) . ", fair => true) a;");
	return;
}

# the identities of a resource's queue, first to last
sub queue_ids
{
	my ($resource) = @_;
	my $out = sql_ok($ctl, "SELECT identity FROM lease_fence.queue(" . lit($resource) . ") ORDER BY position");
	return [ split /\n/, $out ];
}

# pid => identity of the waiters queue() shows
sub queue_pids
{
	my ($resource) = @_;
	my %m = map { split /\|/ } split /\n/,
	  sql_ok($ctl, "SELECT pid, identity FROM lease_fence.queue(" . lit($resource) . ")");
	return \%m;
}

# wait until $sql (on the test's own session) returns 't'
sub poll_until
{
	my ($sql, $what) = @_;
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	until (sql_ok($ctl, $sql) eq 't')
	{
		die "harness: $what" if time() > $deadline;
		sleep(0.02);
	}
	return;
}

sub wait_queued
{
	my ($resource, $n, $what) = @_;
	poll_until("SELECT count(*) = $n FROM lease_fence.queue(" . lit($resource) . ")",
		"$what: the queue never reached $n");
	return;
}

sub subscribers
{
	my ($channel) = @_;
	my @lines = split /\n/, $redis->cli('PUBSUB', 'NUMSUB', $channel);
	return $lines[1] // 0;
}

sub wake_channel { return lkey($_[0]) . ":wake:$_[1]"; }

# wait until the lease key of $resource holds an identity other than $not
sub wait_key_not
{
	my ($resource, $not, $what) = @_;
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	while (1)
	{
		my $v = $redis->cli('GET', lkey($resource));
		return $v if $v ne '' && $v ne ($not // '');
		die "harness: $what: nobody took $resource" if time() > $deadline;
		sleep(0.02);
	}
}

# is backend $pid running a statement (still waiting)?
sub active
{
	my ($pid) = @_;
	return sql_ok($ctl, "SELECT state FROM pg_stat_activity WHERE pid = $pid") eq 'active';
}

sub wait_idle
{
	my ($pid, $what) = @_;
	poll_until("SELECT state <> 'active' FROM pg_stat_activity WHERE pid = $pid",
		"$what: backend $pid never ended its statement");
	return;
}

sub pid_of { return sql_ok($_[0], 'SELECT pg_backend_pid()'); }

#
# 1. Arrival order under 16 concurrent waiters; one wake per release
#
{
	my $res = 'f-16';
	my $holder = acquire($ctl, $res, 600000);
	need($holder->{status}, 'acquired', 'the holder acquires');
	my (@s, %session_of);
	for my $i (0 .. 15)
	{
		$s[$i] = sess();
		# a waiter refreshes its place every third of this: with the default
		# (1 s), a refresh that meets a release is granted by its own
		# request before the wake is read, and is not counted as woken
		sql_ok($s[$i], 'SET lease_fence.fair_waiter_ttl_ms = 60000');
		$session_of{ pid_of($s[$i]) } = $s[$i];
	}
	# all at once: no waiting between the starts
	start_fair($_, $res) for @s;
	wait_queued($res, 16, 'the 16 waiters');
	my $ids = queue_ids($res);
	my $pids = queue_pids($res);
	my %session_of_id = map { $pids->{$_} => $session_of{$_} } keys %$pids;
	is(scalar(grep { $session_of_id{$_} } @$ids), 16, 'queue(): 16 waiters, each one of the 16 sessions');
	# every waiter listens on its own channel, none on the shared one
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	sleep(0.05) until (!grep { subscribers(wake_channel($res, $_)) != 1 } @$ids) || time() > $deadline;
	is(scalar(grep { subscribers(wake_channel($res, $_)) == 1 } @$ids), 16,
		'each of the 16 waiters is the one subscriber of its own wake channel');
	is(subscribers(lkey($res) . ':released'), 0, 'nobody listens on the shared release channel');

	my $woken0 = counter('wait', 'woken');
	my $prev = $holder;
	my ($in_order, $one_wake, $gen_up, $herd) = (0, 0, 0, 0);
	for my $i (0 .. 15)
	{
		my $next = queue_ids($res)->[0];
		need(release($ctl, $res, $prev->{identity})->{status}, 'released', "release $i");
		my $got_id = wait_key_not($res, $prev->{identity}, "grant $i");
		my $got = finish_row($session_of_id{$got_id} // die "harness: $got_id is no waiter's");
		$in_order++ if $got_id eq $next && $got->{status} eq 'acquired' && $got->{identity} eq $next;
		$gen_up++ if $got->{generation} > $prev->{generation};
		my $woken = counter('wait', 'woken');
		$one_wake++ if $woken == $woken0 + $i + 1;
		$herd++ if $woken > $woken0 + $i + 1;
		diag("grant $i: to $got_id, queue's next was $next") if $got_id ne $next;
		$prev = $got;
	}
	is($in_order, 16, 'each of the 16 grants went to the identity at position 1 of queue() before its release');
	is($gen_up, 16, "each grant's generation is above the one before (the queue's order)");
	is($herd, 0, 'no release woke more than one waiter');
	is($one_wake, 16, 'each release woke exactly one waiter (wait/woken grew by one per release)');
	is(counter('wait', 'woken'), $woken0 + 16, 'wait/woken: 16 in all, for 16 releases');
	release($ctl, $res, $prev->{identity});
	$_->quit for @s;
}

#
# 2. A waiter that leaves from the middle of the queue
#
# Three waiters A, B, C (in that order, each visibly queued before the
# next starts), waiter keys of 60 s.  $leave makes B leave and returns once
# it has (its backend gone, or its statement / subtransaction ended), with
# B's outcome (undef, or its row).
sub leave_case
{
	my ($name, $b_setup, $b_start, $leave, $check) = @_;
	my $res = "f-leave-$name";
	my $holder = acquire($ctl, $res, 600000);
	need($holder->{status}, 'acquired', "$name: the holder acquires");
	my ($a, $b, $c) = (sess(), sess(), sess());
	sql_ok($_, 'SET lease_fence.fair_waiter_ttl_ms = 60000') for $a, $b, $c;
	sql_ok($b, $_) for @$b_setup;
	my $pid_b = pid_of($b);
	start_fair($a, $res);
	wait_queued($res, 1, "$name: A");
	$b_start->($b, $res);
	wait_queued($res, 2, "$name: B");
	start_fair($c, $res);
	wait_queued($res, 3, "$name: C");
	my ($id_a, $id_b, $id_c) = @{ queue_ids($res) };
	my $left0 = counter('fair', 'left');

	my $outcome = $leave->($b, $pid_b);
	# at once: no poll, B's waiter key would live 60 s
	my $ids = queue_ids($res);
	is(join(' ', map { $_ eq $id_a ? 'A' : $_ eq $id_b ? 'B' : $_ eq $id_c ? 'C' : '?' } @$ids), 'A C',
		"$name: B's entry is gone as soon as it left; A and C keep their order");
	is(counter('fair', 'left'), $left0 + 1, "$name: fair/left counted once");
	$check->($outcome) if $check;

	my $woken0 = counter('wait', 'woken');
	release($ctl, $res, $holder->{identity});
	my $got_a = finish_row($a);
	is($got_a->{status} . ' ' . ($got_a->{identity} // ''), "acquired $id_a", "$name: A is granted first");
	release($ctl, $res, $id_a);
	my $got_c = finish_row($c);
	is($got_c->{status} . ' ' . ($got_c->{identity} // ''), "acquired $id_c",
		"$name: then C, the waiter after B");
	ok($got_c->{generation} > $got_a->{generation}, "$name: C's generation is above A's");
	is(counter('wait', 'woken'), $woken0 + 2,
		"$name: A and C were each woken by a release (C's by A's: no wait for B's waiter key)");
	release($ctl, $res, $id_c);
	$_->quit for $a, $c;
	eval { $b->quit; };
	return;
}

leave_case('terminate', [], \&start_fair,
	sub {
		my ($b, $pid) = @_;
		need(sql_ok($ctl, "SELECT pg_terminate_backend($pid)"), 't', 'pg_terminate_backend');
		wait_backend_gone($pid);
		return undef;
	});

leave_case('cancel', [], \&start_fair,
	sub {
		my ($b, $pid) = @_;
		need(sql_ok($ctl, "SELECT pg_cancel_backend($pid)"), 't', 'pg_cancel_backend');
		my (undef, $err) = run_sql($b, "SELECT 'lf-after'");
		return $err;
	},
	sub { is(sqlstate($_[0]), '57014', 'cancel: B\'s statement is cancelled (57014)'); });

# (B's statement_timeout and wait_ms end its wait on their own: long enough
# that C is queued behind it first)
leave_case('statement_timeout', ['SET statement_timeout = 8000'], \&start_fair,
	sub {
		my ($b) = @_;
		my (undef, $err) = run_sql($b, "SELECT 'lf-after'");
		return $err;
	},
	sub { is(sqlstate($_[0]), '57014', 'statement_timeout: B\'s statement is cancelled (57014)'); });

leave_case('wait_ms', [], sub { start_fair($_[0], $_[1], wait_ms => 8000); },
	sub { return scalar finish_row($_[0]); },
	sub {
		is($_[0]->{status}, 'busy', 'wait_ms running out: B is busy');
		is(tf($_[0]->{acquired}), 'false', 'wait_ms running out: acquired is false');
	});

# the cancel is caught: the subtransaction's abort leaves the queue, while
# the transaction goes on (the queue is looked at before it ends)
leave_case('exception_block', [],
	sub {
		my ($b, $res) = @_;
		start_sql($b, "BEGIN;\nDO \$\$BEGIN PERFORM lease_fence.acquire(" . lit($res)
			  . ", 600000, wait_ms => 60000, fair => true); EXCEPTION WHEN query_canceled THEN RAISE NOTICE 'lf-caught'; END\$\$;");
	},
	sub {
		my ($b, $pid) = @_;
		need(sql_ok($ctl, "SELECT pg_cancel_backend($pid)"), 't', 'pg_cancel_backend');
		my ($out, $err) = run_sql($b, "SELECT 'lf-after'");
		return [ $out, $err, sql_ok($ctl, "SELECT state FROM pg_stat_activity WHERE pid = $pid"), $b ];
	},
	sub {
		my ($out, $err, $state, $b) = @{ $_[0] };
		like($err, qr/lf-caught/, 'exception block: the cancel was caught');
		is(sqlstate($err), '', 'exception block: no error reached the client');
		is($state, 'idle in transaction', 'exception block: its transaction is still open when the entry is gone');
		sql_ok($b, 'COMMIT');
	});

#
# 3. A waiter whose backend cannot say so: frozen
#
{
	my $res = 'f-frozen';
	my $holder = acquire($ctl, $res, 600000);
	need($holder->{status}, 'acquired', 'the holder acquires');
	my ($a, $b) = (sess(), sess());
	sql_ok($a, 'SET lease_fence.fair_waiter_ttl_ms = 300');
	my $pid_a = pid_of($a);
	start_fair($a, $res);
	wait_queued($res, 1, 'A');
	start_fair($b, $res);
	wait_queued($res, 2, 'B');
	my ($id_a, $id_b) = @{ queue_ids($res) };

	freeze($pid_a);
	need(release($ctl, $res, $holder->{identity})->{status}, 'released', 'release');
	my $got_b = finish_row($b);
	is($got_b->{status} . ' ' . ($got_b->{identity} // ''), "acquired $id_b",
		"A frozen at the head: B is granted once A's waiter key expired (the dead head skipped)");
	is($redis->cli('EXISTS', lkey($res) . ":queue:$id_a"), '0', "A's waiter key had expired");
	is($redis->cli('GET', lkey($res)), $id_b, "the lease key holds B's identity");

	thaw($pid_a);
	# A goes on: it rejoins (at the end), or its wait ends
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	sleep(0.02) until grep({ $_ eq $id_a } @{ queue_ids($res) }) || !active($pid_a) || time() > $deadline;
	if (active($pid_a))
	{
		is(join(' ', @{ queue_ids($res) }), $id_a, 'continued, A rejoined the queue (alone)');
		is($redis->cli('GET', lkey($res)), $id_b, 'and B still holds the lease: one holder');
		release($ctl, $res, $id_b);
		my $got_a = finish_row($a);
		is($got_a->{status} . ' ' . ($got_a->{identity} // ''), "acquired $id_a", 'A is granted after B released');
		ok($got_a->{generation} > $got_b->{generation}, "A's generation is above B's");
		release($ctl, $res, $id_a);
	}
	else
	{
		my $got_a = finish_row($a);
		isnt($got_a->{status}, 'acquired', "continued, A's wait ended without a grant ($got_a->{status})");
		is($redis->cli('GET', lkey($res)), $id_b, 'B still holds the lease: one holder');
		pass('(A did not rejoin)');
		pass('(A did not rejoin)');
		release($ctl, $res, $id_b);
	}
	$_->quit for $a, $b;
}

#
# 5. Fair and unfair acquires of one resource
#
{
	my $res = 'f-mixed';
	my $holder = acquire($ctl, $res, 600000);
	need($holder->{status}, 'acquired', 'the holder acquires');
	my ($a, $b, $u) = (sess(), sess(), sess());
	sql_ok($a, 'SET lease_fence.fair_waiter_ttl_ms = 60000');
	my $pid_a = pid_of($a);
	my $pid_u = pid_of($u);
	start_fair($a, $res);
	wait_queued($res, 1, 'A');
	start_fair($b, $res);
	wait_queued($res, 2, 'B');
	my ($id_a, $id_b) = @{ queue_ids($res) };
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	sleep(0.02) until subscribers(wake_channel($res, $id_a)) == 1 || time() > $deadline;

	# A, the head, frozen right before the release: the lease stays free
	freeze($pid_a);
	need(release($ctl, $res, $holder->{identity})->{status}, 'released', 'release');
	need($redis->cli('EXISTS', lkey($res)), '0', 'the lease is free');
	my $r = call($ctl, "lease_fence.acquire('$res', 600000)");
	is($r->{status}, 'busy', 'unfair, wait_ms 0, the lease free but a fair waiter queued: busy');
	is(tf($r->{acquired}), 'false', 'and not acquired');
	$r = call($ctl, "lease_fence.acquire('$res', 600000, fair => true)");
	is($r->{status}, 'busy', 'fair, wait_ms 0, the same: busy');
	is($redis->cli('EXISTS', lkey($res)), '0', 'neither took the lease');

	# an unfair waiting acquire: not before the queue is empty
	my $woken_before = counter('wait', 'woken');
	start_sql($u, "SELECT row_to_json(a) FROM lease_fence.acquire('$res', 600000, wait_ms => 60000) a;");
	$deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	sleep(0.02) until subscribers(lkey($res) . ':released') == 1 || time() > $deadline;
	need(subscribers(lkey($res) . ':released'), 1, 'the unfair waiter waits');
	thaw($pid_a);
	my $got_a = finish_row($a);
	is($got_a->{status} . ' ' . ($got_a->{identity} // ''), "acquired $id_a", 'continued, A is granted');
	ok(active($pid_u), 'the unfair waiter still waits');
	release($ctl, $res, $id_a);
	my $got_b = finish_row($b);
	is($got_b->{status} . ' ' . ($got_b->{identity} // ''), "acquired $id_b",
		'B, the next fair waiter, is granted before the unfair waiter');
	ok(active($pid_u), 'the unfair waiter still waits');
	is($redis->cli('GET', lkey($res)), $id_b, "the lease key holds B's identity: one holder");
	is(queued_count($res), 0, 'the queue is empty');
	release($ctl, $res, $id_b);
	my $got_u = finish_row($u);
	is($got_u->{status}, 'acquired', 'the queue empty, the unfair waiter is granted');
	ok($got_u->{generation} > $got_b->{generation}, "its generation is above B's");
	is($redis->cli('GET', lkey($res)), $got_u->{identity}, 'the lease key holds its identity');
	release($ctl, $res, $got_u->{identity});
	$_->quit for $a, $b, $u;
}

sub queued_count { return scalar @{ queue_ids($_[0]) }; }

#
# 6. unknown while queued
#
# Redis frozen: the first request of W's fair wait times out (command 300
# ms), its cleanup release too (a fresh connection, its PING unanswered);
# Redis continues right after that, before the leave that follows gives up
# (cleanup_timeout_ms 5000): the join is applied late, then the leave.
sub unknown_case
{
	my ($name, $held) = @_;
	my $res = "f-unknown-$name";
	my $holder;
	if ($held)
	{
		$holder = acquire($ctl, $res, 600000);
		need($holder->{status}, 'acquired', "$name: the holder acquires");
	}
	my $w = sess();
	sql_ok($w, $_) for 'SET lease_fence.command_timeout_ms = 300', 'SET lease_fence.cleanup_timeout_ms = 5000',
	  'SET lease_fence.fair_waiter_ttl_ms = 60000';
	# a connection, its key_prefix check and the scripts, first
	need(call($w, "lease_fence.acquire('f-warm-$name', 1000, fair => true)")->{status}, 'acquired', 'warm-up');
	my $pid_w = pid_of($w);
	my $unconfirmed0 = counter('cleanup', 'unconfirmed');
	my $left0 = counter('fair', 'left');

	freeze($redis->pid);
	start_fair($w, $res);
	poll_until("SELECT count > $unconfirmed0 FROM lease_fence.stats WHERE operation = 'cleanup' AND outcome = 'unconfirmed'",
		"$name: the cleanup never gave up");
	thaw($redis->pid);
	my ($r, $err) = finish_row($w);
	is($r->{status}, 'unknown', "$name: the first request timed out: unknown (never busy)");
	is(tf($r->{acquired}), 'NULL', "$name: acquired IS NULL");
	unlike($err, qr/could not confirm that this backend left the queue/, "$name: its leave was confirmed");
	# (queued: the late join was there, and left; free: it was granted
	# late, and its leave found nothing to leave)
	is(counter('fair', 'left'), $left0 + ($held ? 1 : 0), "$name: fair/left counted " . ($held ? 'once' : 'not'));
	is(queued_count($res), 0, "$name: afterwards its queue entry is gone");
	is($redis->cli('EXISTS', lkey($res) . ":queue:$r->{identity}"), '0', "$name: and its waiter key");
	my $cur = $redis->cli('GET', lkey($res));
	if ($held)
	{
		is($cur, $holder->{identity}, "$name: the holder's lease is untouched");
		release($ctl, $res, $holder->{identity});
	}
	else
	{
		# granted late, its release never sent: the lease is its own, until
		# the release with its identity (here: at the session's exit)
		ok($cur eq '' || $cur eq $r->{identity}, "$name: the lease key holds its identity or nothing");
		$w->quit;
		wait_backend_gone($pid_w);
		is($redis->cli('EXISTS', lkey($res)), '0', "$name: its exit released it: no key holds its identity");
	}
	eval { $w->quit; };
	return;
}

unknown_case('queued', 1);
unknown_case('free', 0);

#
# 4. Redis frozen and continued while waiters queue
#
# Six waiters, L S M L S L.  Redis stays frozen until both S waiters have
# ended their statements: their requests time out (command_timeout_ms 2 s),
# so do their cleanups.  The L and M waiters' command_timeout_ms (60 s)
# outlasts the freeze.  The L waiters' keys live 60 s
# (fair_waiter_ttl_ms): they are alive throughout, their order is defined.
# M's key (3 s) expires during the freeze (Redis's clock) while its renewal
# waits in Redis's socket: it is set again when Redis continues, and M ends
# granted too (its place is not asserted: by the rule, M was dead for a
# while).  The S waiters' entries end by their keys' TTL: their leave could
# not reach the frozen Redis.
{
	my $res = 'f-redis-frozen';
	my $holder = acquire($ctl, $res, 600000);
	need($holder->{status}, 'acquired', 'the holder acquires');
	my @kinds = qw(L S M L S L);
	my (@s, @pid);
	for my $i (0 .. $#kinds)
	{
		$s[$i] = sess();
		$pid[$i] = pid_of($s[$i]);
		sql_ok($s[$i], 'SET lease_fence.command_timeout_ms = 60000') if $kinds[$i] ne 'S';
		sql_ok($s[$i], 'SET lease_fence.fair_waiter_ttl_ms = 60000') if $kinds[$i] eq 'L';
		start_fair($s[$i], $res, ttl => 60000);
		wait_queued($res, $i + 1, "waiter $i");
	}
	my @ids = @{ queue_ids($res) };
	my %i_of = map { $ids[$_] => $_ } 0 .. $#ids;
	my @long = grep { $kinds[$_] eq 'L' } 0 .. $#kinds;
	my @short = grep { $kinds[$_] eq 'S' } 0 .. $#kinds;
	my @stay = grep { $kinds[$_] ne 'S' } 0 .. $#kinds;

	freeze($redis->pid);
	wait_idle($pid[$_], "short waiter $_") for @short;
	ok(active($pid[$_]), "Redis frozen: $kinds[$_] waiter $_ still waits") for @stay;
	thaw($redis->pid);
	for my $i (@short)
	{
		my $r = finish_row($s[$i]);
		is($r->{status}, 'unknown', "S waiter $i: its request timed out: unknown (never busy, never acquired)");
	}
	wait_queued($res, scalar @stay, 'the waiters that stay');
	is(join(' ', grep { $kinds[ $i_of{$_} ] eq 'L' } @{ queue_ids($res) }), join(' ', @ids[@long]),
		'Redis continued: the L waiters are queued in their order');

	my $prev = $holder;
	my (%granted, @order);
	my ($to_head, $alone, $gen_up) = (0, 0, 0);
	for my $k (0 .. $#stay)
	{
		my $next = queue_ids($res)->[0];
		release($ctl, $res, $prev->{identity});
		my $got_id = wait_key_not($res, $prev->{identity}, "grant $k");
		my $j = $i_of{$got_id} // die "harness: $got_id is no waiter's";
		my $r = finish_row($s[$j]);
		$to_head++ if $got_id eq $next && $r->{status} eq 'acquired';
		$granted{$j} = 1;
		push @order, $j;
		$alone++ if !grep { (active($pid[$_]) ? 1 : 0) != ($granted{$_} ? 0 : 1) } @stay;
		$gen_up++ if $r->{generation} > $prev->{generation};
		$prev = $r;
	}
	is($to_head, scalar @stay, "each grant went to queue()'s position 1 before its release");
	is(join(' ', grep { $kinds[$_] eq 'L' } @order), join(' ', @long), 'the L waiters are granted in their order');
	is(join(' ', sort @order), join(' ', sort @stay), 'every waiter that stayed (M too) is granted: none lost');
	is($alone, scalar @stay, 'at each grant the waiters not yet granted still wait: one holder at a time');
	is($gen_up, scalar @stay, 'generations increase in the order of the grants');
	release($ctl, $res, $prev->{identity});
	$_->quit for @s;
}

done_testing();

# LeaseFenceTest.pm — helpers shared by the TAP files of the Redis lease
# helper (test/t/lease_*.pl, redis_*.pl and others): run SQL and read
# errors, call acquire / renew / release and get their row back, read
# this session's lease_fence.leases row, pause Redis, repoint the server at
# another Redis endpoint.
#
#   use LeaseFenceRedis;
#   use LeaseFenceTest;
#   my $redis = LeaseFenceRedis->new;
#   my $node = $redis->node('name');
#   my $s = session($node);                    # a background psql session
#   my $r = acquire($s, 'res', 30000);         # hash of the returned row
#   is($r->{status}, 'acquired', ...);
#   is($redis->cli('GET', lkey('res')), $r->{identity}, ...);
#
# Harness steps never count as test points: a step that fails (a CLIENT
# PAUSE that Redis does not accept, a configuration that is not reloaded, an
# SQL statement expected to succeed that fails) dies, and so does the test.
# Only what lease_fence does is asserted, with Test::More, in the test files;
# the one assertion here, generations_increase(), is about lease_fence too.

package LeaseFenceTest;

use strict;
use warnings;

use Carp;
use Exporter 'import';
use JSON::PP;
use PostgreSQL::Test::Utils;
use Test::More ();
use Time::HiRes qw(sleep);

our @EXPORT = qw(
  lkey gkey lit tf $hex32
  run_sql sql_ok sqlstate
  call acquire renew release lease_view generations generations_increase
  session pause_redis wait_pause_over wait_backend_gone set_redis_conf need
  acquire_round_trips wait_until_waiting start_sql finish_row);

# a lease identity: 128 random bits in lower-case hex
our $hex32 = qr/^[0-9a-f]{32}$/;

my $json = JSON::PP->new;
my @generations;    # every generation call() saw returned, in order

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

# A precondition of the test, not a test point: die unless $got eq $want.
# (The prototype gives its arguments scalar context, as is() does: in list
# context $redis->cli returns stdout and stderr.)
sub need($$$)
{
	my ($got, $want, $what) = @_;
	$got //= '(undef)';
	croak "harness: $what: got '$got', expected '$want'" unless $got eq $want;
	return $got;
}

# Run SQL in a background session, or in a new session of a node (then
# with -v VERBOSITY=verbose, so errors read "ERROR:  <SQLSTATE>: ...").
# Returns (stdout, stderr).  %o: user => role for a new session.
sub run_sql
{
	my ($who, $sql, %o) = @_;
	if ($who->isa('PostgreSQL::Test::BackgroundPsql'))
	{
		$who->{stderr} = '';
		my $out = $who->query($sql);
		my $err = $who->{stderr};
		$who->{stderr} = '';
		return ($out, $err);
	}
	my ($out, $err) = ('', '');
	$who->psql(
		'postgres', $sql,
		stdout => \$out,
		stderr => \$err,
		on_error_stop => 1,
		extra_params => [
			'-v', 'VERBOSITY=verbose', defined $o{user} ? ('-U', $o{user}) : ()
		]);
	return ($out, $err);
}

# Start $sql (a statement that waits: a waiting acquire, a campaign) on
# the background session $s, and return once psql has sent it; finish_row
# reads what it returned.
sub start_sql
{
	my ($s, $sql) = @_;
	$s->query_until(qr/lf-started/, "\\echo lf-started\n$sql\n");
	return;
}

# The end of what start_sql sent: its row (a SELECT row_to_json(...) line)
# as a hash, or {} when there is none (the statement failed, or its row came
# before, with an earlier query's output: it returned too early, and the
# points on it fail); in list context also its stderr.
sub finish_row
{
	my ($s) = @_;
	my ($out, $err) = run_sql($s, "SELECT 'lf-done'");
	my ($line) = grep { /^\{/ } split /\n/, $out;
	my $row = defined $line ? $json->decode($line) : {};
	return wantarray ? ($row, $err) : $row;
}

# run_sql that must not fail; returns stdout
sub sql_ok
{
	my ($who, $sql, %o) = @_;
	my ($out, $err) = run_sql($who, $sql, %o);
	croak "unexpected error from: $sql\n$err" if $err =~ /ERROR:/;
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

# every generation call() has seen returned so far, in order
sub generations { return @generations; }

# One test point: the generations call() saw handed out so far strictly
# increase (lease_fence never hands one out twice, nor a lower one later).
sub generations_increase
{
	my $increasing = 1;
	for my $i (1 .. $#generations)
	{
		$increasing = 0 unless $generations[$i] > $generations[ $i - 1 ];
	}
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	return Test::More::ok($increasing, 'every generation handed out ('
		  . scalar(@generations) . ') is above the one before');
}

# a background psql session on database postgres, errors in verbose form
sub session
{
	my ($node) = @_;
	return $node->background_psql(
		'postgres',
		on_error_stop => 0,
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
}

# CLIENT PAUSE every client of $redis for $ms (a precondition: dies unless
# Redis accepts it)
sub pause_redis
{
	my ($redis, $ms) = @_;
	need($redis->cli('CLIENT', 'PAUSE', $ms, 'ALL'), 'OK', "CLIENT PAUSE $ms ALL");
	return;
}

# returns once a CLIENT PAUSE is over (redis-cli's own PING is paused with
# every other client until then)
sub wait_pause_over
{
	my ($redis) = @_;
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
		croak "backend $pid did not exit" if time() > $deadline;
		sleep(0.05);
	}
	return;
}

# How many acquire round trips the node's backends have made so far, from
# lease_fence.latency (a round trip is counted once its reply is read).  It
# must be the cluster's count: lease_fence preloaded (a precondition).
sub acquire_round_trips
{
	my ($node) = @_;
	my ($n, $scope) = split /\|/, sql_ok($node,
		"SELECT count, scope FROM lease_fence.latency WHERE operation = 'acquire' AND le = 'Infinity'");
	croak "harness: acquire_round_trips needs lease_fence preloaded (latency scope: " . ($scope // 'none') . ")"
	  unless defined $scope && $scope eq 'cluster';
	return $n;
}

# Wait until a waiting acquire is in its wait: its subscription to the
# release channel is in Redis ($subscribed->() is true) and its attempt
# after subscribing has come back busy -- the second acquire round trip
# since $before (acquire_round_trips($node) before the waiter started; no
# other acquire meanwhile).  A waiter tries once, subscribes, tries again,
# then waits (docs/guides/keepalive-and-waiting.md, "The subscription"): a
# release from now on publishes to its subscription and wakes it, where a
# release between the subscription and that attempt would be seen by the
# attempt itself.  A harness step: dies after the usual TAP timeout.
sub wait_until_waiting
{
	my ($node, $before, $subscribed, $what) = @_;
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	until ($subscribed->() && acquire_round_trips($node) >= $before + 2)
	{
		croak "harness: $what: no wait after $PostgreSQL::Test::Utils::timeout_default s" if time() > $deadline;
		sleep(0.05);
	}
	return;
}

# Point the node at another Redis endpoint (ALTER SYSTEM, reload) and wait
# until new sessions see it.  set_redis_conf($node, name => value, ...); an
# undef value is RESET.
sub set_redis_conf
{
	my ($node, %set) = @_;
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
	croak "set_redis_conf: give at least one value to wait for" unless @check;
	# (a new session reads the setting from the configuration files; no
	# need to load the library for that)
	$node->poll_query_until('postgres', "SELECT " . join(' AND ', @check))
	  or croak "configuration not reloaded";
	return;
}

1;

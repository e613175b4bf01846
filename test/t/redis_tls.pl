# redis_tls.pl — TLS to Redis (docs/guides/redis-deployments.md, "TLS").
#
# Real redis-servers with TLS ports and certificates made by openssl here:
# verify-full accepted (by name and by IP address), verify-ca and require;
# and each failure before a request is sent — wrong CA, wrong host name, a
# plaintext client on a TLS port, mutual TLS without a client certificate, a
# key file with the wrong mode, a wrong password, a handshake nobody answers
# — is "unavailable" (never "unknown"), with a WARNING that says which, and
# writes nothing to Redis.  Mutual TLS with a certificate, and an ACL user
# with a password file, work over TLS.  A cancel ends a handshake at once
# (57014, nothing held); SNI carries a host name, never an address.  The
# settings are superuser-only.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use File::Copy;
use JSON::PP;
use LeaseFenceRedis;
use LeaseFenceTLS;
use LeaseFenceTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $pki = LeaseFenceTLS->new;
my $dir = $pki->dir;
$pki->ca('ca');
$pki->ca('otherca');
$pki->cert('ca', 'server', san => 'DNS:localhost,IP:127.0.0.1');
$pki->cert('ca', 'wrongname', san => 'DNS:wrong.example');
$pki->cert('ca', 'client');

my $redis = $pki->redis(cert => 'server', ca => 'ca');
my $wrong = $pki->redis(cert => 'wrongname', ca => 'ca');
my $mtls = $pki->redis(cert => 'server', ca => 'ca', auth_clients => 'yes');
my $node = $redis->node('tls');
my $json = JSON::PP->new;

# One acquire (and, if acquired, its release) in a new session whose
# settings are %set (a superuser may SET them).  Returns the acquire's row,
# stderr, and the release's status.
sub tls_acquire
{
	my ($res, %set) = @_;
	my $sql = "LOAD 'lease_fence';\n";
	$sql .= "SET lease_fence.$_ = " . LeaseFenceTest::lit($set{$_}) . ";\n" for sort keys %set;
	$sql .= "SELECT row_to_json(a) FROM lease_fence.acquire(" . LeaseFenceTest::lit($res)
	  . ", 30000) a \\gset r_\n\\echo :r_row_to_json\n";
	$sql .= "SELECT status FROM lease_fence.release(" . LeaseFenceTest::lit($res)
	  . ", (:'r_row_to_json'::json)->>'identity') WHERE (:'r_row_to_json'::json)->>'status' = 'acquired';\n";
	my ($out, $err) = run_sql($node, $sql);
	my @lines = split /\n/, $out;
	die("no row from acquire: $err") unless @lines && $lines[0] =~ /^\{/;
	return ($json->decode($lines[0]), $err, $lines[1] // '');
}

# the settings of a TLS connection to $server
sub tls_to
{
	my ($server, %more) = @_;
	return (redis_socket => '', redis_host => 'localhost', redis_port => $server->tls_port,
		redis_sslmode => 'verify-full', redis_sslrootcert => $pki->crt('ca'), %more);
}

# a failure: unavailable, acquired false, no identity, the reason in a
# WARNING, and nothing written to $server
sub refused
{
	my ($name, $server, $reason, %set) = @_;
	my $before = $server->cli('DBSIZE');
	my ($r, $err) = tls_acquire("r-$name", %set);
	is($r->{status}, 'unavailable', "$name: unavailable");
	ok(defined $r->{acquired} && !$r->{acquired} && !defined $r->{identity},
		"$name: acquired false, no identity (a definite no, not unknown)");
	like($err, qr/WARNING:.*acquire of resource "r-\Q$name\E": .*$reason/, "$name: the WARNING says why");
	note "$name: $1" if $err =~ /(WARNING:.*)/;
	is($server->cli('DBSIZE'), $before, "$name: nothing written to Redis");
	return $err;
}

# --- accepted
{
	my ($r, $err, $rel) = tls_acquire('r-full', tls_to($redis));
	is($r->{status}, 'acquired', 'verify-full to localhost: acquired');
	unlike($err, qr/WARNING/, 'verify-full to localhost: no WARNING');
	is($rel, 'released', 'verify-full to localhost: released');

	($r, $err, $rel) = tls_acquire('r-full-ip', tls_to($redis, redis_host => '127.0.0.1'));
	is($r->{status}, 'acquired', 'verify-full to 127.0.0.1 (an IP address in the certificate): acquired');

	# the key is really on the TLS server, holding the identity
	my $s = session($node);
	sql_ok($s, "LOAD 'lease_fence'");
	my %set = tls_to($redis);
	sql_ok($s, "SET lease_fence.$_ = " . LeaseFenceTest::lit($set{$_})) for sort keys %set;
	my $held = acquire($s, 'r-held', 30000);
	is($held->{status}, 'acquired', 'a session over TLS: acquired');
	is($redis->cli('GET', lkey('r-held')), $held->{identity}, 'the lease key on the TLS server holds the identity');
	is(renew($s, 'r-held', $held->{identity}, 30000)->{status}, 'renewed', 'over TLS: renewed');
	is(release($s, 'r-held', $held->{identity})->{status}, 'released', 'over TLS: released');
	is($redis->cli('EXISTS', lkey('r-held')), '0', 'over TLS: the key is gone');
	is(sql_ok($s, 'SELECT concat_ws(\' \', kind, tls, endpoint) FROM lease_fence.redis_connections()'),
		'server t localhost:' . $redis->tls_port, 'redis_connections(): the session\'s one connection, over TLS');
	$s->quit;

	($r) = tls_acquire('r-ca', tls_to($wrong, redis_sslmode => 'verify-ca'));
	is($r->{status}, 'acquired', 'verify-ca: a certificate for another name is accepted (names are not checked)');
	($r) = tls_acquire('r-require', tls_to($redis, redis_sslmode => 'require', redis_sslrootcert => ''));
	is($r->{status}, 'acquired', 'require without a root certificate: acquired (encrypted, not verified)');
}

# --- refused, each with its reason
refused('wrong-ca', $redis, 'certificate verification failed',
	tls_to($redis, redis_sslrootcert => $pki->crt('otherca')));
refused('require-with-ca', $redis, 'certificate verification failed',
	tls_to($redis, redis_sslmode => 'require', redis_sslrootcert => $pki->crt('otherca')));
refused('wrong-name', $wrong, 'hostname mismatch', tls_to($wrong));
refused('plaintext', $redis, 'PING.*redis_sslmode', tls_to($redis, redis_sslmode => 'disable'));
refused('no-client-cert', $mtls, '(?i:certificate)', tls_to($mtls));
{
	my ($r) = tls_acquire('r-mtls',
		tls_to($mtls, redis_sslcert => $pki->crt('client'), redis_sslkey => $pki->key('client')));
	is($r->{status}, 'acquired', 'mutual TLS with a client certificate: acquired');

	my $open = "$dir/client-0644.key";
	copy($pki->key('client'), $open) or die "copy: $!";
	chmod 0644, $open;
	refused('key-0644', $mtls, 'redis_sslkey must be .*\(chmod 0600\)',
		tls_to($mtls, redis_sslcert => $pki->crt('client'), redis_sslkey => $open));
	refused('cert-without-key', $mtls, 'redis_sslcert is set but lease_fence.redis_sslkey is not',
		tls_to($mtls, redis_sslcert => $pki->crt('client')));
}

# --- an ACL user with a password file, over TLS
{
	need($redis->cli('ACL', 'SETUSER', 'lfuser', 'on', '>pw-tls-Xk3', '~lease_fence:*', '+@all'),
		'OK', 'ACL SETUSER');
	my $pw = "$dir/redis.pw";
	my $bad = "$dir/wrong.pw";
	PostgreSQL::Test::Utils::append_to_file($pw, "pw-tls-Xk3\n");
	PostgreSQL::Test::Utils::append_to_file($bad, "pw-wrong\n");
	chmod 0600, $pw, $bad;
	my ($r) = tls_acquire('r-acl', tls_to($redis, redis_user => 'lfuser', redis_password_file => $pw));
	is($r->{status}, 'acquired', 'ACL user and password file over TLS: acquired');
	my $err = refused('acl-wrong-password', $redis, 'AUTH failed',
		tls_to($redis, redis_user => 'lfuser', redis_password_file => $bad));
	unlike($err, qr/pw-wrong|pw-tls/, 'the WARNING shows no password');
}

# --- a handshake nobody answers: bounded, interruptible; SNI
{
	my $l = LeaseFenceTLS::Listener->new($dir);
	my %silent = (tls_to($redis), redis_port => $l->port, connect_timeout_ms => 300);
	my ($r, $err) = tls_acquire('r-silent', %silent);
	is($r->{status}, 'unavailable', 'an unanswered handshake: unavailable after connect_timeout_ms');
	like($err, qr/TLS handshake with Redis at localhost:\d+ timed out/, 'an unanswered handshake: the WARNING says so');
	like($l->bytes, qr/localhost/, 'SNI: the ClientHello names the host');

	$l->clear;
	($r, $err) = tls_acquire('r-silent-ip', %silent, redis_host => '127.0.0.1');
	is($r->{status}, 'unavailable', 'an unanswered handshake to 127.0.0.1: unavailable');
	ok(length($l->bytes) > 0, 'the listener saw the ClientHello');
	unlike($l->bytes, qr/127\.0\.0\.1/, 'SNI: no address in the ClientHello');

	# a cancel during a handshake that could wait a minute
	my $s = session($node);
	sql_ok($s, "LOAD 'lease_fence'");
	my %long = (%silent, connect_timeout_ms => 60000);
	sql_ok($s, "SET lease_fence.$_ = " . LeaseFenceTest::lit($long{$_})) for sort keys %long;
	my $pid = sql_ok($s, 'SELECT pg_backend_pid()');
	$s->query_until(qr/started/,
		"\\echo started\nSELECT status FROM lease_fence.acquire('r-cancel', 30000);\n");
	ok($node->poll_query_until('postgres',
			"SELECT wait_event_type = 'Extension' FROM pg_stat_activity WHERE pid = $pid"),
		'cancel: the backend waits in the handshake');
	need($node->safe_psql('postgres', "SELECT pg_cancel_backend($pid)"), 't', 'pg_cancel_backend');
	my (undef, $cerr) = run_sql($s, "SELECT 'after cancel'");
	is(sqlstate($cerr), '57014', 'cancel during the handshake: 57014');
	my $out = sql_ok($s, 'SELECT count(*) FROM lease_fence.leases');
	is($out, '0', 'cancel during the handshake: nothing recorded as held');
	$s->quit;
	$l->stop;
}

# --- the settings: superuser-only, checked
{
	$node->safe_psql('postgres', 'CREATE ROLE plain LOGIN');
	for my $name (qw(redis_sslmode redis_sslrootcert redis_sslcert redis_sslkey))
	{
		# (the library is loaded by calling one of its functions: a plain
		# role may not LOAD it)
		my (undef, $err) = run_sql($node,
			"SELECT lease_fence.current_generation(); SET lease_fence.$name = 'x'",
			user => 'plain');
		is(sqlstate($err), '42501', "a non-superuser cannot set $name");
	}
	my (undef, $err) = run_sql($node, "LOAD 'lease_fence'; SET lease_fence.redis_sslmode = 'prefer'");
	is(sqlstate($err), '22023', 'redis_sslmode: an unknown mode is refused');
	like($err, qr/disable, require, verify-ca, verify-full/, 'and the error lists the modes');
}

# --- waiting and keep-alive over TLS: the waiter's subscription and the
# keep-alive worker connect like every request (verify-full, from the
# server's settings, which the worker uses)
{
	my $ka = $redis->node('tls_keepalive',
		"shared_preload_libraries = 'lease_fence'",
		"lease_fence.redis_socket = ''",
		"lease_fence.redis_host = 'localhost'",
		'lease_fence.redis_port = ' . $redis->tls_port,
		"lease_fence.redis_sslmode = 'verify-full'",
		"lease_fence.redis_sslrootcert = '" . $pki->crt('ca') . "'",
		# a second cluster on the same Redis: a key_prefix of its own
		"lease_fence.key_prefix = 'tlska:'");
	my $counter = sub {
		sql_ok($ka, "SELECT count FROM lease_fence.stats WHERE operation = '$_[0]' AND outcome = '$_[1]'");
	};
	my $holder = session($ka);
	my $waiter = session($ka);
	my $held = acquire($holder, 'tls-wait', 60000);
	is($held->{status}, 'acquired', 'TLS wait: the holder acquires');
	my $woken = $counter->('wait', 'woken');
	my $trips = acquire_round_trips($ka);
	$waiter->query_until(qr/lf-started/,
		"\\echo lf-started\nSELECT status FROM lease_fence.acquire('tls-wait', 10000, wait_ms => 30000);\n");
	# subscribed over TLS, and its attempt after subscribing answered busy
	wait_until_waiting($ka, $trips,
		sub { (split /\n/, $redis->cli('PUBSUB', 'NUMSUB', 'tlska:{tls-wait}:released'))[1] == 1 },
		'the waiter over TLS');
	is(release($holder, 'tls-wait', $held->{identity})->{status}, 'released', 'TLS wait: the holder releases');
	like(sql_ok($waiter, "SELECT 'lf-after'"), qr/^acquired$/m, 'TLS wait: the waiter acquires');
	is($counter->('wait', 'woken'), $woken + 1, "TLS wait: woken by the release's message");
	$waiter->quit;
	$redis->cli('DEL', 'tlska:{tls-wait}');

	my $k = call($holder, "lease_fence.acquire('tls-kept', 1000, scope => 'session', keepalive => true)");
	is($k->{status}, 'acquired', 'TLS keepalive: acquired');
	sql_ok($holder, 'SELECT pg_sleep(3)');
	is($redis->cli('GET', 'tlska:{tls-kept}'), $k->{identity}, 'TLS keepalive: renewed past 3 TTLs over TLS');
	is(release($holder, 'tls-kept', $k->{identity})->{status}, 'released', 'TLS keepalive: released');
	$holder->quit;
	$ka->stop;
}

done_testing();

# redis_sentinel_tls.pl — the sentinels are reached with the same TLS settings
# as Redis.  A master that serves TLS, watched over TLS by a redis-sentinel
# that listens for TLS only: with verify-full both the sentinel and the
# master it names are verified, and acquire works; plaintext to the
# sentinel, or a CA that did not sign its certificate, is "unavailable"
# with a WARNING that says which connection failed.  Then the one outcome of
# lease_fence.redis_min_replicas that needs a master gone silent: the
# master (it has no replica, so WAIT waits its whole timeout) is frozen
# during WAIT, so neither WAIT nor the release after it is answered:
# "unknown", the lease recorded unconfirmed.

use strict;
use warnings;

use FindBin;
use IPC::Run;
use lib "$FindBin::RealBin/../perl";

use LeaseFenceRedis;
use LeaseFenceTest;
use LeaseFenceTLS;
use LeaseFenceTopology;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $pki = LeaseFenceTLS->new;
my $ca = $pki->ca('ca');
$pki->ca('other');
$pki->cert($ca, 'server', san => 'DNS:localhost,IP:127.0.0.1');
my $master = $pki->redis(cert => 'server', ca => 'ca', auth_clients => 'no');
my $sentinel = LeaseFenceTopology::Sentinel->new(
	master_name => 'm',
	master_port => $master->tls_port,
	quorum => 1,
	tls => { cert => $pki->crt('server'), key => $pki->key('server'), ca => $pki->crt('ca') });
LeaseFenceTopology::wait_for('the sentinel to reach the master over TLS', sub {
	$sentinel->cli('SENTINEL', 'master', 'm') =~ /\nflags\nmaster\n/ });

my $node = $master->node('sentinel_tls',
	"lease_fence.redis_sentinels = '127.0.0.1:" . $sentinel->port . "'",
	"lease_fence.redis_sentinel_master = 'm'",
	"lease_fence.redis_sslmode = 'verify-full'",
	"lease_fence.redis_sslrootcert = '" . $pki->crt('ca') . "'",
	'lease_fence.connect_timeout_ms = 2000');

my $r = call($node, q{lease_fence.acquire('tls', 60000)});
is($r->{status}, 'acquired', 'verify-full: acquired through a TLS sentinel and a TLS master');
is($master->cli('GET', lkey('tls')), $r->{identity}, 'the lease key is on the master');

my ($out, $err) = run_sql($node, q{SET lease_fence.redis_sslmode = 'disable';
SELECT status FROM lease_fence.acquire('plain', 60000)});
is($out, 'unavailable', 'plaintext to a TLS-only sentinel: unavailable');
like($err, qr/no sentinel could name master "m": connection check \(PING\) failed/,
	'the WARNING says the sentinel could not be asked');

($out, $err) = run_sql($node, q{SET lease_fence.redis_sslrootcert = '} . $pki->crt('other') . q{';
SELECT status FROM lease_fence.acquire('wrong-ca', 60000)});
is($out, 'unavailable', 'a CA that did not sign the sentinel\'s certificate: unavailable');
like($err, qr/TLS handshake with Redis Sentinel at 127\.0\.0\.1:\d+ failed: server certificate verification failed/,
	'the WARNING names the sentinel and the verification failure');
is($master->cli('EXISTS', lkey('plain')) . $master->cli('EXISTS', lkey('wrong-ca')), '00',
	'neither refused acquire left a key');

# WAIT unanswered, and the release after it too: unknown, not unreplicated
my ($bg_out, $bg_err) = ('', '');
my $bg = IPC::Run::start(
	[ 'psql', '-X', '-At', '-d', $node->connstr('postgres'), '-c', q{
SET lease_fence.redis_min_replicas = 1;
SET lease_fence.redis_replica_timeout_ms = 3000;
SET lease_fence.command_timeout_ms = 300;
SET lease_fence.cleanup_timeout_ms = 300;
SELECT a.status || ' ' || coalesce(a.acquired::text, 'NULL') || ' ' || (a.identity IS NOT NULL)
       || ' ' || l.state
FROM lease_fence.acquire('unsure', 60000) a
LEFT JOIN lease_fence.leases l ON l.resource = a.resource} ],
	'>', \$bg_out, '2>', \$bg_err);
# the grant takes milliseconds; WAIT then waits its 3 s on the master
LeaseFenceTopology::wait_for('the acquire to wait in WAIT', sub {
	$node->safe_psql('postgres', q{SELECT count(*) FROM pg_stat_activity
	  WHERE query LIKE '%acquire(''unsure''%' AND pid <> pg_backend_pid()
	  AND wait_event_type = 'Extension' AND now() - query_start > interval '500 ms'}) eq '1' });
kill 'STOP', $master->pid;
$bg->finish;
kill 'CONT', $master->pid;
like($bg_out, qr/^unknown NULL true unconfirmed$/m,
	'WAIT and the release unanswered: unknown, acquired NULL, identity kept, lease unconfirmed');
like($bg_err, qr/could not learn whether replicas have the grant \(timed out waiting for Redis\); releasing it/,
	'the WARNING says WAIT was not answered');

$node->stop;
done_testing();

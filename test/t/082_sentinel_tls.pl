# 082_sentinel_tls.pl — the sentinels are reached with the same TLS settings
# as Redis.  A master that serves TLS, watched over TLS by a redis-sentinel
# that listens for TLS only: with verify-full both the sentinel and the
# master it names are verified, and acquire works; plaintext to the
# sentinel, or a CA that did not sign its certificate, is "unavailable"
# with a WARNING that says which connection failed.

use strict;
use warnings;

use FindBin;
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

$node->stop;
done_testing();

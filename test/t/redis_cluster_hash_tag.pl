# redis_cluster_hash_tag.pl — the two keys of every resource share one Redis
# Cluster hash slot, so the acquire script (which names both) is never
# refused with CROSSSLOT.  Run against a real one-node Redis Cluster (all
# 16384 slots on one node: Redis still refuses a script whose keys hash to
# different slots).  A resource that starts with '}' would give its keys an
# empty hash tag; such resources are spelt in hexadecimal inside the braces.
# Every other resource keeps the key names of lease_fence 1.1, and a
# key_prefix with a brace is refused when it is set.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use LeaseFenceRedis;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $redis = LeaseFenceRedis->new(
	extra => [ '--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf',
		'--cluster-port', PostgreSQL::Test::Cluster::get_free_port() ]);
$redis->cli('CLUSTER', 'ADDSLOTSRANGE', '0', '16383');
my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
until ($redis->cli('CLUSTER', 'INFO') =~ /cluster_state:ok/)
{
	die "the one-node cluster did not become ok" if time() > $deadline;
	usleep(100_000);
}

my $node = $redis->node('hashtag');
$node->safe_psql('postgres', q{
CREATE FUNCTION try_acquire(r text, OUT status text, OUT identity text) LANGUAGE sql
AS $$ SELECT status, identity FROM lease_fence.acquire(r, 60000) $$;
});

sub slot { return $redis->cli('CLUSTER', 'KEYSLOT', $_[0]); }

sub hexof { return join '', map { sprintf '%02x', ord } split //, $_[0]; }

# resource => [lease key, generation key]
my %keys = (
	'plain' => [ 'lease_fence:{plain}', 'lease_fence:{plain}:gen' ],
	'a}b' => [ 'lease_fence:{a}b}', 'lease_fence:{a}b}:gen' ],
	'x{y}z' => [ 'lease_fence:{x{y}z}', 'lease_fence:{x{y}z}:gen' ],
	'{' => [ 'lease_fence:{{}', 'lease_fence:{{}:gen' ],
	'}x' => [ 'lease_fence:{' . hexof('}x') . '}#lease', 'lease_fence:{' . hexof('}x') . '}#gen' ],
	'}' => [ 'lease_fence:{7d}#lease', 'lease_fence:{7d}#gen' ],
	'}}' => [ 'lease_fence:{7d7d}#lease', 'lease_fence:{7d7d}#gen' ],
	'}a{b}' => [ 'lease_fence:{' . hexof('}a{b}') . '}#lease', 'lease_fence:{' . hexof('}a{b}') . '}#gen' ],
	# spelt like the hexadecimal form of '}x', but it is another resource
	'7d78}#lease' => [ 'lease_fence:{7d78}#lease}', 'lease_fence:{7d78}#lease}:gen' ],
);

my %identity;
for my $r (sort keys %keys)
{
	my ($lease_key, $gen_key) = @{ $keys{$r} };
	my $q = $r =~ s/'/''/gr;
	my ($status, $id) = split /\|/,
	  $node->safe_psql('postgres', "SELECT status, identity FROM try_acquire('$q')");
	is($status, 'acquired', "resource '$r': acquired through the cluster");
	$identity{$r} = $id;
	is($redis->cli('GET', $lease_key), $id, "resource '$r': lease key is $lease_key");
	like($redis->cli('GET', $gen_key), qr/^\d+$/, "resource '$r': generation key is $gen_key");
	is(slot($lease_key), slot($gen_key), "resource '$r': both keys in one slot");
}

# renew, release and the commit check name the same key
for my $r ('}x', 'plain')
{
	my $q = $r =~ s/'/''/gr;
	is($node->safe_psql('postgres',
		"SELECT status FROM lease_fence.renew('$q', '$identity{$r}', 60000)"),
		'renewed', "resource '$r': renewed");
	is($node->safe_psql('postgres',
		"SELECT status FROM lease_fence.release('$q', '$identity{$r}')"),
		'released', "resource '$r': released");
	is($redis->cli('EXISTS', $keys{$r}[0]), '0', "resource '$r': lease key gone");
}
is($node->safe_psql('postgres', q~
BEGIN;
SELECT status FROM lease_fence.acquire('}tx', 60000, 0, 'transaction');
COMMIT;
~), 'acquired', "a transaction-scoped lease on '}tx' passes its commit check");
is($redis->cli('EXISTS', 'lease_fence:{' . hexof('}tx') . '}#lease'), '0',
	"and is released at commit");

# a busy resource starting with '}' is busy, not unavailable
is($node->safe_psql('postgres', q~SELECT status FROM try_acquire('}}')~), 'busy',
	"resource '}}' held: busy");

# key_prefix: braces refused when set (once the library is loaded in the
# session; before that PostgreSQL keeps any value as a placeholder, and the
# library refuses it with a WARNING when it loads)
my ($ret, $out, $err) = $node->psql('postgres',
	q~LOAD 'lease_fence'; SET lease_fence.key_prefix = 'app{1}:'~);
isnt($ret, 0, 'key_prefix with braces is refused');
like($err, qr/invalid value for parameter "lease_fence.key_prefix".*\n.*must not contain/,
	'the refusal says why');
($ret, $out, $err) = $node->psql('postgres',
	q~LOAD 'lease_fence'; SET lease_fence.key_prefix = 'app}'~);
isnt($ret, 0, "key_prefix with '}' alone is refused too");
($ret, $out, $err) = $node->psql('postgres',
	q~SET lease_fence.key_prefix = 'early{'; SELECT lease_fence.current_generation(); SHOW lease_fence.key_prefix~);
like($err, qr/WARNING:  invalid value for parameter "lease_fence.key_prefix": "early\{"/,
	'set before the library loaded: refused with a WARNING at load');
like($out, qr/^lease_fence:$/m, 'and the prefix stays the default');
is($node->safe_psql('postgres', q~
SET lease_fence.key_prefix = 'app:';
SELECT status FROM lease_fence.acquire('}x', 1000);
~), 'acquired', 'a brace-free key_prefix works');
is($redis->cli('EXISTS', 'app:{' . hexof('}x') . '}#lease'), '1', 'under the new prefix');

$node->stop;
done_testing();

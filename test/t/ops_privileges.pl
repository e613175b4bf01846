# ops_privileges.pl — who may take leases, and who may say where Redis is
# (docs/security.md, "Privileges" and "Settings").
#
# EXECUTE on acquire / renew / release is not PUBLIC's: without the GRANT a
# role gets 42501 and nothing reaches Redis.  Where Redis lives, the key
# prefix, the password file, the database and the ACL user are
# superuser-only, also through set_config() and also as a placeholder set
# before the library was loaded; the timeouts are any user's.

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
my $node = $redis->node('privileges');
my $json = JSON::PP->new;

$node->safe_psql('postgres', 'CREATE ROLE lf_app LOGIN');
{
	for my $fn ('acquire(text,bigint,bigint,text,bigint,boolean,boolean)', 'renew(text,text,bigint,bigint)',
		'release(text,text)', 'queue(text)')
	{
		is($node->safe_psql('postgres',
				"SELECT has_function_privilege('lf_app', 'lease_fence.$fn', 'EXECUTE')"),
			'f', "privileges: lf_app lacks EXECUTE on lease_fence.$fn");
	}
	my (undef, $err) = run_sql($node, "SELECT lease_fence.acquire('r-app', 30000)", user => 'lf_app');
	is(sqlstate($err), '42501', 'privileges: acquire without the GRANT is ERROR 42501');
	is($redis->cli('EXISTS', gkey('r-app')), '0', 'privileges: nothing reached Redis');

	my %try = (
		redis_host => '127.0.0.2',
		redis_port => '1',
		redis_socket => '/tmp/elsewhere.sock',
		key_prefix => 'evil:',
		redis_password_file => '/etc/passwd',
		redis_db => '3',
		redis_user => 'someone',
		keepalive_max_ms => '2147483647',);
	for my $name (sort keys %try)
	{
		# the library is loaded first (its functions are called), so the
		# GUC is defined when SET runs
		(undef, $err) = run_sql($node,
			"SELECT lease_fence.current_generation();\nSET lease_fence.$name = " . lit($try{$name}),
			user => 'lf_app');
		is(sqlstate($err), '42501', "privileges: a non-superuser cannot SET lease_fence.$name (42501)");
	}
	(undef, $err) = run_sql($node,
		"SELECT lease_fence.current_generation();\nSELECT set_config('lease_fence.redis_host', '127.0.0.2', false)",
		user => 'lf_app');
	is(sqlstate($err), '42501', 'privileges: nor through set_config()');

	my $out = sql_ok($node,
		"SELECT lease_fence.current_generation();\nSET lease_fence.command_timeout_ms = 500;\nSHOW lease_fence.command_timeout_ms",
		user => 'lf_app');
	is((split /\n/, $out)[-1], '500ms', 'privileges: timeouts are user-settable');

	$node->safe_psql('postgres', q{
		GRANT EXECUTE ON FUNCTION lease_fence.acquire(text, bigint, bigint, text, bigint, boolean, boolean) TO lf_app;
		GRANT EXECUTE ON FUNCTION lease_fence.renew(text, text, bigint, bigint) TO lf_app;
		GRANT EXECUTE ON FUNCTION lease_fence.release(text, text) TO lf_app;
	});
	my $r = call($node, "lease_fence.acquire('r-app', 30000)", user => 'lf_app');
	is($r->{status}, 'acquired', 'privileges: after GRANT EXECUTE, lf_app acquires');
	is(call($node, "lease_fence.renew('r-app', '$r->{identity}', 30000)", user => 'lf_app')->{status},
		'renewed', 'privileges: after GRANT EXECUTE, lf_app renews');
	is(call($node, "lease_fence.release('r-app', '$r->{identity}')", user => 'lf_app')->{status},
		'released', 'privileges: after GRANT EXECUTE, lf_app releases');

	# SET before the library is loaded only makes a placeholder; once the
	# library defines the GUC, a non-superuser's value must not take effect
	my ($o, $e) = run_sql($node,
		"SET lease_fence.redis_socket = '/nonexistent/redis.sock';\n"
		  . "SELECT row_to_json(r) FROM lease_fence.acquire('r-app-ph', 30000) r",
		user => 'lf_app');
	like($e, qr/WARNING:\s+42501:/,
		'privileges: a placeholder SET by a non-superuser before loading is refused at load');
	my ($line) = grep { /^\{/ } split /\n/, $o;
	$r = defined $line ? $json->decode($line) : {};
	is($r->{status}, 'acquired',
		'privileges: ... and the lease still goes to the configured Redis');
	release($node, 'r-app-ph', $r->{identity}) if $r->{identity};
}

$node->stop;
$redis->stop;
done_testing();

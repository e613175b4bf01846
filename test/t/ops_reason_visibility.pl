# ops_reason_visibility.pl — what the reason column and the WARNINGs of an
# unavailable acquire show, and to whom (docs/security.md, "Who sees what").
#
# Where Redis is (host:port, a socket path, also one with a blank in it)
# is shown as it is by lease_fence.redis_connections(): to superusers and
# members of pg_read_all_settings; others read <hidden>, and the server log
# keeps the full text.  An acquire refused because another database claimed
# the key_prefix has a reason too; the other database's name, OID and
# system identifier are shown to superusers only (the server log has them).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use IO::Socket::INET;
use JSON::PP;
use LeaseFenceRedis;
use LeaseFenceTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $redis = LeaseFenceRedis->new;
my $node = $redis->node('reason_visibility');
$node->safe_psql('postgres', 'CREATE DATABASE second');
my $grants = q{
	GRANT EXECUTE ON FUNCTION lease_fence.acquire(text, bigint, bigint, text, bigint, boolean, boolean),
	                          lease_fence.holder(text) TO lf_app, lf_reader;};
$node->safe_psql('postgres', q{
	CREATE ROLE lf_app LOGIN;
	CREATE ROLE lf_reader LOGIN IN ROLE pg_read_all_settings;} . $grants);
$node->safe_psql('second', 'CREATE EXTENSION lease_fence;' . $grants);
my ($sysid) = $node->safe_psql('postgres', 'SELECT system_identifier FROM pg_control_system()');

# acquire in a new session of database $db as $user: (row, stderr)
sub try_acquire
{
	my ($db, $user, $res) = @_;
	my ($out, $err) = ('', '');
	$node->psql($db, "SELECT row_to_json(r) FROM lease_fence.acquire('$res', 30000) r",
		stdout => \$out, stderr => \$err, on_error_stop => 1,
		extra_params => [ defined $user ? ('-U', $user) : () ]);
	die "acquire as " . ($user // 'superuser') . " failed: $err" if $out eq '';
	return (decode_json($out), $err);
}

#
# Another database claimed the key_prefix
#
need((try_acquire('postgres', undef, 'claim'))[0]->{status}, 'acquired', 'postgres claims the prefix');
{
	my $offset = -s $node->logfile;
	my ($r, $err) = try_acquire('second', 'lf_app', 'p9');
	is($r->{status}, 'unavailable', 'claimed prefix, application role: unavailable');
	is($r->{reason}, 'key_prefix on this Redis belongs to another database',
		'claimed prefix, application role: the reason says why (not NULL), without the key_prefix');
	unlike($err, qr/$sysid|OID|"postgres"|lease_fence:owner/,
		"claimed prefix, application role: the WARNING names neither the other database nor the key");
	like($err, qr/WARNING:  key_prefix on this Redis belongs to another database/,
		'claimed prefix, application role: the WARNING says what happened');
	like(slurp_file($node->logfile, $offset),
		qr/DETAIL:  The key "lease_fence:owner" names database "postgres" \(OID \d+\) of the cluster with system identifier $sysid/,
		'claimed prefix: the server log names the other database');

	($r, $err) = try_acquire('second', 'lf_reader', 'p9');
	is($r->{reason}, 'key_prefix "lease_fence:" on this Redis belongs to another database',
		'claimed prefix, pg_read_all_settings: the reason names the key_prefix');
	unlike($err, qr/$sysid/, 'claimed prefix, pg_read_all_settings: not the other database');

	($r, $err) = try_acquire('second', undef, 'p9');
	is($r->{reason}, 'key_prefix "lease_fence:" on this Redis belongs to another database',
		'claimed prefix, superuser: the reason');
	like($err, qr/names database "postgres" \(OID \d+\) of the cluster with system identifier $sysid/,
		'claimed prefix, superuser: the WARNING names the other database');

	# holder() is refused there too, and says as little
	my ($out, $herr) = ('', '');
	$node->psql('second', "SELECT held FROM lease_fence.holder('claim')",
		stdout => \$out, stderr => \$herr, extra_params => [ '-U', 'lf_app' ]);
	is($out, '', 'claimed prefix, application role: holder() shows nothing');
	like($herr, qr/ERROR:  key_prefix on this Redis belongs to another database/,
		'claimed prefix, application role: holder()\'s ERROR says what happened');
	unlike($herr, qr/$sysid|OID|"postgres"|lease_fence:owner/,
		'claimed prefix, application role: holder()\'s ERROR names neither the other database nor the key');
}

#
# Redis cannot be reached: the endpoint in the reason and the WARNING
#
my $closed = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Listen => 1)
  or die "no free port: $!";
my $port = $closed->sockport;
$closed->close;    # nothing listens there now
set_redis_conf($node, redis_socket => '', redis_host => '127.0.0.1', redis_port => $port);
{
	my $offset = -s $node->logfile;
	my ($r, $err) = try_acquire('postgres', 'lf_app', 'p8');
	is($r->{status}, 'unavailable', 'closed port, application role: unavailable');
	is($r->{reason}, 'could not connect to Redis at <hidden>: Connection refused',
		'closed port, application role: the reason hides the endpoint');
	unlike($err, qr/127\.0\.0\.1|$port/, 'closed port, application role: so does the WARNING');
	like(slurp_file($node->logfile, $offset), qr/could not connect to Redis at 127\.0\.0\.1:$port/,
		'closed port: the server log has the endpoint');

	for my $who ('lf_reader', undef)
	{
		my $name = $who // 'superuser';
		($r, $err) = try_acquire('postgres', $who, 'p8');
		is($r->{reason}, "could not connect to Redis at 127.0.0.1:$port: Connection refused",
			"closed port, $name: the reason names the endpoint");
		like($err, qr/127\.0\.0\.1:$port/, "closed port, $name: so does the WARNING");
	}
}

# a socket path is an endpoint too
my $path = $redis->dir . '/no-such.sock';
set_redis_conf($node, redis_socket => $path, redis_host => undef, redis_port => undef);
{
	my ($r, $err) = try_acquire('postgres', 'lf_app', 'p8s');
	like($r->{reason}, qr/^could not connect to Redis at <hidden>: /,
		'missing socket, application role: the reason hides the path');
	unlike($err, qr/no-such\.sock/, 'missing socket, application role: so does the WARNING');
	($r) = try_acquire('postgres', 'lf_reader', 'p8s');
	like($r->{reason}, qr/\Q$path\E/, 'missing socket, pg_read_all_settings: the reason names the path');
}

# a socket path with a blank in it is hidden whole, not up to the blank:
# the configured path is compared as one string before the text is split
# into words.  A real Redis behind it first (a link in a directory whose
# name has a blank), then the link gone.
my $blank_dir = $redis->dir . '/such dir';
mkdir $blank_dir or die "mkdir $blank_dir: $!";
my $blank = "$blank_dir/redis.sock";
symlink($redis->socket_path, $blank) or die "symlink $blank: $!";
set_redis_conf($node, redis_socket => $blank);
{
	my ($r) = try_acquire('postgres', 'lf_app', 'p7');
	is($r->{status}, 'acquired', 'socket in a directory with a blank: Redis is reached through it');
	unlink $blank or die "unlink $blank: $!";
	my $err;
	($r, $err) = try_acquire('postgres', 'lf_app', 'p7');
	is($r->{reason}, 'could not connect to Redis at <hidden>: No such file or directory',
		'socket path with a blank, application role: the reason hides the whole path');
	unlike($err, qr/such dir|redis\.sock/, 'socket path with a blank, application role: so does the WARNING');
	($r) = try_acquire('postgres', 'lf_reader', 'p7');
	is($r->{reason}, "could not connect to Redis at $blank: No such file or directory",
		'socket path with a blank, pg_read_all_settings: the reason names the whole path');
}

# a relative socket path (to the data directory) has no slash to be known by
set_redis_conf($node, redis_socket => 'no such.sock');
{
	my ($r, $err) = try_acquire('postgres', 'lf_app', 'p7r');
	is($r->{reason}, 'could not connect to Redis at <hidden>: No such file or directory',
		'relative socket path, application role: the reason hides it');
	unlike($err, qr/such\.sock/, 'relative socket path, application role: so does the WARNING');
}

$node->stop;
$redis->stop;
done_testing();

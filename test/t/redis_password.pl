# redis_password.pl — requirepass and lease_fence.redis_password_file (docs/reference.md,
# "Settings").
#
# Without a password, and with a wrong one, acquire is unavailable (no
# ERROR).  With the right one in a 0600 file owned by the server's OS user it
# works; a file that group or others may read is refused: unavailable, with
# a WARNING saying why.  The setting shows the path, never the password, and
# neither the client, pg_settings, pg_file_settings nor the server log ever
# sees a password.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use File::Spec;
use JSON::PP;
use LeaseFenceRedis;
use LeaseFenceTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $redis = LeaseFenceRedis->new;
my $node = $redis->node('password');
my $json = JSON::PP->new;

{
	my $pw = 'pw-Zq8rT1-correct-horse';
	my $wrong = 'pw-WRONG-battery-staple';
	my $dir = File::Spec->rel2abs(PostgreSQL::Test::Utils::tempdir('pw'));
	my $good = "$dir/redis.pw";
	my $bad = "$dir/wrong.pw";
	my $open = "$dir/readable.pw";
	PostgreSQL::Test::Utils::append_to_file($good, "$pw\n");
	PostgreSQL::Test::Utils::append_to_file($bad, "$wrong\n");
	PostgreSQL::Test::Utils::append_to_file($open, "$pw\n");
	chmod 0600, $good, $bad;
	chmod 0644, $open;
	# the server runs as the test's OS user, so the files are the server's
	need((stat $good)[4], $>, 'owner of the password file');

	$redis->cli('CONFIG', 'SET', 'requirepass', $pw);
	$redis->password($pw);

	my $r = acquire($node, 'r-noauth', 30000);
	is($r->{status}, 'unavailable', 'requirepass and no password file: unavailable');

	set_redis_conf($node, redis_password_file => $good);
	$r = acquire($node, 'r-auth', 30000);
	is($r->{status}, 'acquired', 'with redis_password_file (0600): acquired');
	is($redis->cli('GET', lkey('r-auth')), $r->{identity}, 'with the password: the key holds the identity');
	is(release($node, 'r-auth', $r->{identity})->{status}, 'released', 'with the password: released');

	# (the password must not appear in the SQL either: the test server logs
	# every statement, and the log is checked below)
	my $out = sql_ok($node, q{SELECT lease_fence.current_generation();
SELECT current_setting('lease_fence.redis_password_file');
SHOW lease_fence.redis_password_file;});
	my @lines = split /\n/, $out;
	is($lines[-2], $good, 'current_setting of the password file setting is the path');
	is($lines[-1], $good, 'SHOW of the password file setting is the path');
	$out = sql_ok($node, q{SELECT lease_fence.current_generation();
SELECT name, setting, reset_val, boot_val FROM pg_settings;
SELECT name, setting FROM pg_file_settings;});
	like($out, qr/lease_fence\.redis_password_file\|\Q$good\E/, 'pg_settings shows the path');
	unlike($out, qr/\Q$pw\E/, 'the password is in no pg_settings or pg_file_settings row');

	set_redis_conf($node, redis_password_file => $bad);
	my ($o, $err) = run_sql($node,
		"SELECT row_to_json(r) FROM lease_fence.acquire('r-auth', 30000) r");
	is(sqlstate($err), '', 'wrong password: no ERROR');
	$r = $o eq '' ? {} : $json->decode($o);
	is($r->{status}, 'unavailable', 'wrong password: unavailable');
	is(tf($r->{acquired}), 'false', 'wrong password: acquired is false');
	unlike($o . $err, qr/\Q$wrong\E|\Q$pw\E/, 'wrong password: the client sees no password');
	is($redis->cli('EXISTS', lkey('r-auth')), '0', 'wrong password: no lease key');

	set_redis_conf($node, redis_password_file => $open);
	($o, $err) = run_sql($node,
		"SELECT row_to_json(r) FROM lease_fence.acquire('r-auth', 30000) r");
	is(sqlstate($err), '', 'group/world-readable password file: no ERROR');
	$r = $o eq '' ? {} : $json->decode($o);
	is($r->{status}, 'unavailable', 'group/world-readable password file: unavailable');
	like($err,
		qr/WARNING:.*redis_password_file must be a regular file owned by the server's user with no group or world access/,
		'group/world-readable password file: a WARNING says why');
	is($redis->cli('EXISTS', lkey('r-auth')), '0', 'group/world-readable password file: no lease key');
	unlike($o . $err, qr/\Q$pw\E/, 'group/world-readable password file: the client sees no password');

	set_redis_conf($node, redis_password_file => '');
	$redis->cli('CONFIG', 'SET', 'requirepass', '');
	$redis->password(undef);
	is(acquire($node, 'r-noauth2', 30000)->{status}, 'acquired', 'requirepass off: acquired again');

	my $log = slurp_file($node->logfile);
	unlike($log, qr/\Q$pw\E/, 'the password never appears in the server log');
	unlike($log, qr/\Q$wrong\E/, 'the wrong password never appears in the server log');
}

generations_increase();

$node->stop;
$redis->stop;
done_testing();

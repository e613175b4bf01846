# redis_password_file.pl — lease_fence.redis_password_file that is not a
# regular file.
#
# The password file is opened when a connection to Redis is made.  A FIFO
# there used to hang the backend: open() blocks until some process opens the
# FIFO for writing, before any check of the file's type, with no bound (not
# connect_timeout_ms) and no way out (pg_cancel_backend and
# pg_terminate_backend cannot interrupt it).  What happens instead (docs/reference.md,
# "Settings"): a file that is not a regular file — a FIFO, a directory, a
# symlink to a FIFO — is refused without waiting on it, with a WARNING, and
# the acquire is `unavailable`; a regular 0600 file, also through a symlink,
# still authenticates.
#
# Redis runs with requirepass (test/perl/LeaseFenceRedis.pm), so an acquire
# that reaches it without the password cannot succeed either: `acquired`
# proves the password was read and sent.  Each psql call has a generous
# timeout only as a guard, so that a hang fails this test instead of hanging
# the suite; nothing here measures how long anything took.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use Fcntl qw(O_WRONLY O_NONBLOCK);
use File::Spec;
use JSON::PP;
use LeaseFenceRedis;
use POSIX ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $pw = 'pw-030-Qm4vX9-fifo-test';
my $redis = LeaseFenceRedis->new(requirepass => $pw);
my $node = $redis->node('pwfile');
my $json = JSON::PP->new;

my $dir = File::Spec->rel2abs(PostgreSQL::Test::Utils::tempdir('pw'));
my $good = "$dir/redis.pw";
my $fifo = "$dir/redis.fifo";
my $subdir = "$dir/a-directory";
my $to_fifo = "$dir/link-to-fifo";
my $to_good = "$dir/link-to-good";

PostgreSQL::Test::Utils::append_to_file($good, "$pw\n");
chmod(0600, $good) or die "chmod $good: $!";
POSIX::mkfifo($fifo, 0600) or die "mkfifo $fifo: $!";
mkdir($subdir, 0700) or die "mkdir $subdir: $!";
symlink($fifo, $to_fifo) or die "symlink $to_fifo: $!";
symlink($good, $to_good) or die "symlink $to_good: $!";
die "the test must run as the server's OS user" unless (stat $good)[4] == $>;

# a SQL string literal (standard_conforming_strings is on)
sub lit { my $s = shift; $s =~ s/'/''/g; return "'$s'"; }

# A backend blocked in open() on the FIFO waits for a writer: be that
# writer, so that a failed run ends instead of keeping its backend (and the
# node's shutdown) stuck.  Opening for writing without blocking succeeds
# only if some process has the FIFO open for reading.
sub release_fifo_readers
{
	if (sysopen(my $w, $fifo, O_WRONLY | O_NONBLOCK))
	{
		close $w;
		return 1;
	}
	return 0;
}

END { release_fifo_readers() if defined $fifo && -p $fifo; }

# Acquire resource $res in a new session with redis_password_file = $file
# (SET: the test runs as a superuser).  Returns (row as a hash or {},
# stderr, timed out).
sub acquire_with
{
	my ($file, $res) = @_;
	my ($out, $err, $timed_out) = ('', '', 0);
	$node->psql(
		'postgres',
		"SET lease_fence.redis_password_file = " . lit($file) . ";\n"
		  . "SELECT row_to_json(r) FROM lease_fence.acquire(" . lit($res) . ", 30000) r",
		stdout => \$out,
		stderr => \$err,
		timeout => $PostgreSQL::Test::Utils::timeout_default,
		timed_out => \$timed_out,
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	if ($timed_out)
	{
		diag "acquire with $file did not return: the backend hung";
		release_fifo_readers();
	}
	my $row = $out =~ /^\{/ ? $json->decode($out) : {};
	return ($row, $err, $timed_out);
}

# regular 0600 file: the password is read and Redis accepts it
my ($r, $err) = acquire_with($good, 'pw-regular');
is($r->{status}, 'acquired', 'regular 0600 password file: acquired');
is($redis->cli('GET', 'lease_fence:{pw-regular}'), $r->{identity},
	'regular 0600 password file: Redis holds the lease');

# the refused kinds: a WARNING that says what the file is, status
# unavailable, no ERROR
my %refused = (
	'a FIFO' => [ $fifo, 'pw-fifo', 'a FIFO' ],
	'a directory' => [ $subdir, 'pw-dir', 'a directory' ],
	'a symlink to a FIFO' => [ $to_fifo, 'pw-link-fifo', 'a FIFO' ],);
for my $kind (sort keys %refused)
{
	my ($file, $res, $what) = @{ $refused{$kind} };
	my ($row, $werr, $timed_out) = acquire_with($file, $res);
	is($row->{status}, 'unavailable', "password file is $kind: acquire returns unavailable");
	is($row->{acquired}, JSON::PP::false, "password file is $kind: acquired is false");
	like($werr, qr/WARNING:  01000: acquire of resource "\Q$res\E": lease_fence\.redis_password_file is not a regular file \(it is \Q$what\E\)/,
		"password file is $kind: a WARNING says it is not a regular file");
	unlike($werr, qr/ERROR:/, "password file is $kind: no ERROR");
}

# In one session: the FIFO is refused and its descriptor closed again (no
# process has it open for reading while the session lives on), and the same
# backend then authenticates with the regular file.
my $s = $node->background_psql('postgres', on_error_stop => 0);
$s->query_safe("SET lease_fence.redis_password_file = " . lit($fifo));
my $out = $s->query("SELECT status FROM lease_fence.acquire('pw-session-fifo', 30000)");
$s->{stderr} = '';    # the WARNING checked above
is($out, 'unavailable', 'one session: the FIFO is refused');
ok(!release_fifo_readers(), 'one session: the backend that refused the FIFO does not keep it open');
$s->query_safe("SET lease_fence.redis_password_file = " . lit($good));
is($s->query_safe("SELECT status FROM lease_fence.acquire('pw-session-regular', 30000)"),
	'acquired', 'one session: the same backend then authenticates with the regular file');
$s->quit;

# a symlink to a regular file is followed (secrets are often mounted so)
($r, $err) = acquire_with($to_good, 'pw-link-regular');
is($r->{status}, 'acquired', 'symlink to a regular 0600 password file: acquired');

unlike(slurp_file($node->logfile), qr/\Q$pw\E/, 'the password never appears in the server log');

$node->stop;
$redis->stop;
done_testing();

# redis_layer.pl — the connection cache and the scripts (docs/guides/redis-deployments.md,
# "Connections").
#
# One session that switches between two Redis servers and back keeps one
# connection to each: the first server sees one connection, not two.  Each
# new connection is checked with exactly one PING before its first request.
# Scripts go as EVALSHA of their fixed SHA1s: after SCRIPT FLUSH, each script
# is sent with EVAL once (NOSCRIPT), then only as EVALSHA — were a SHA1
# constant wrong, every call would be NOSCRIPT and EVAL.  The scripts are
# the files scripts/*.lua: the build's header carries each byte for byte
# with the SHA1 Redis computes for it, and the extension sends exactly those
# texts (all six, after SCRIPT FLUSH).  Identities never
# repeat, within a session (across a refill of its random block) or across
# sessions.  A Redis restarted between two requests costs a new connection,
# not an error.

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use Digest::SHA;
use LeaseFenceRedis;
use LeaseFenceTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $a = LeaseFenceRedis->new;
my $b = LeaseFenceRedis->new;
my $node = $a->node('layer');

# calls of a command since CONFIG RESETSTAT
sub calls
{
	my ($redis, $cmd) = @_;
	my $info = $redis->cli('INFO', 'commandstats');
	return $info =~ /^cmdstat_\Q$cmd\E:calls=(\d+),/m ? $1 : 0;
}

sub connections
{
	my ($redis) = @_;
	return $redis->cli('INFO', 'stats') =~ /^total_connections_received:(\d+)/m ? $1 : -1;
}

# --- the keyed cache: A, then B, then A again, in one session
{
	my $s = session($node);
	sql_ok($s, "LOAD 'lease_fence'");
	my $a0 = connections($a);
	my $b0 = connections($b);
	for my $round (1 .. 2)
	{
		for my $server ([ a => $a ], [ b => $b ])
		{
			my ($name, $redis) = @$server;
			sql_ok($s, "SET lease_fence.redis_socket = " . LeaseFenceTest::lit($redis->socket_path));
			my $r = acquire($s, "r-$name-$round", 30000);
			is($r->{status}, 'acquired', "round $round, server $name: acquired");
			is($redis->cli('GET', lkey("r-$name-$round")), $r->{identity}, "round $round, server $name: the key is on $name");
			is(release($s, "r-$name-$round", $r->{identity})->{status}, 'released', "round $round, server $name: released");
		}
	}
	# (redis-cli's own connections count too: one per call of connections()
	# and of each GET above, all counted in $a0/$b0 and below alike)
	my $cli_calls = 2 + 1;    # the GETs of the two rounds, and connections() itself
	is(connections($a) - $a0 - $cli_calls, 1, 'server a: one connection from the session for both rounds');
	is(connections($b) - $b0 - $cli_calls, 1, 'server b: one connection from the session for both rounds');
	$s->quit;
}

# --- PING once per new connection; EVALSHA of the constant SHA1s
{
	$a->cli('SCRIPT', 'FLUSH');
	$a->cli('CONFIG', 'RESETSTAT');
	my $s = session($node);
	for my $i (1 .. 10)
	{
		my $r = acquire($s, "r-sha-$i", 30000);
		need($r->{status}, 'acquired', "acquire $i");
		need(release($s, "r-sha-$i", $r->{identity})->{status}, 'released', "release $i");
	}
	$s->quit;
	is(calls($a, 'ping'), 1, 'one PING for one new connection');
	# acquire, release, and the key_prefix owner check once per connection:
	# each sent as EVAL once, after its NOSCRIPT
	is(calls($a, 'eval'), 3, 'after SCRIPT FLUSH: each script sent with EVAL once');
	is(calls($a, 'evalsha'), 1 + 10 + 10,
		'every call an EVALSHA: the owner check once, 10 acquires, 10 releases');
	is($a->cli('SCRIPT', 'EXISTS', Digest::SHA->new(1)->addfile("$FindBin::RealBin/../../scripts/release.lua", "b")->hexdigest), '1',
		'Redis knows the release script by the SHA1 of scripts/release.lua');
}

# --- the same over TCP: one connection, two commands per cycle
{
	$a->cli('CONFIG', 'RESETSTAT');
	my $s = session($node);
	sql_ok($s, "LOAD 'lease_fence'");
	sql_ok($s, "SET lease_fence.redis_socket = ''");
	sql_ok($s, "SET lease_fence.redis_port = " . $a->port);
	for my $i (1 .. 10)
	{
		my $r = acquire($s, "r-tcp-$i", 30000);
		need($r->{status}, 'acquired', "acquire $i over TCP");
		need(release($s, "r-tcp-$i", $r->{identity})->{status}, 'released', "release $i over TCP");
	}
	$s->quit;
	note $a->cli('INFO', 'commandstats');
	is(calls($a, 'ping'), 1, 'over TCP: one PING for one new connection');
	is(calls($a, 'eval'), 0, 'over TCP: no EVAL (the scripts are loaded)');
	is(calls($a, 'evalsha'), 1 + 10 + 10, 'over TCP: the owner check once, then one EVALSHA per acquire and per release');
}

# --- the scripts are the files scripts/*.lua (scripts/README.md), embedded
# by the build (scripts/embed.sh -> src/redis/lua_scripts.h): the header carries
# each file byte for byte and its SHA1, which is the SHA1 Redis computes
# (SCRIPT LOAD); and what the extension sends is these texts: after SCRIPT
# FLUSH, each of the seven goes once with EVAL, and then Redis knows each
# file's SHA1 (a different text would have loaded under another SHA1)
{
	my $top = "$FindBin::RealBin/../..";
	my @names = qw(acquire renew release check claim takeover holder);
	my $bytes = sub {
		my ($path) = @_;
		open(my $fh, '<:raw', $path) or die "open $path: $!";
		local $/;
		my $text = <$fh>;
		close $fh;
		return $text;
	};
	my $header = $bytes->("$top/src/redis/lua_scripts.h");
	my %sha;
	for my $name (@names)
	{
		my $text = $bytes->("$top/scripts/$name.lua");
		my $macro = 'LF_LUA_' . uc $name;
		# the literal: lines "...\n" \ after "#define MACRO \"
		my ($literal) = $header =~ /^#define \Q$macro\E \\\n((?:"[^\n]*" \\\n)*"[^\n]*")$/m;
		my $embedded;
		if (defined $literal)
		{
			$embedded = join '',
			  map { (my $l = $_) =~ s/\\(.)/$1 eq 'n' ? "\n" : $1/ge; $l }
			  $literal =~ /"((?:[^"\\]|\\.)*)"/g;
		}
		is($embedded, $text, "$name: src/redis/lua_scripts.h carries scripts/$name.lua byte for byte");
		my ($embedded_sha) = $header =~ /^#define \Q$macro\E_SHA1 "([0-9a-f]{40})"$/m;
		$sha{$name} = Digest::SHA::sha1_hex($text);
		is($embedded_sha, $sha{$name}, "$name: the embedded SHA1 is the file's");
		is($a->cli('SCRIPT', 'LOAD', $text), $sha{$name}, "$name: SCRIPT LOAD of the file: Redis computes that SHA1");
	}

	$a->cli('SCRIPT', 'FLUSH');
	$a->cli('CONFIG', 'RESETSTAT');
	# one session: the owner check (claim), acquire, renew, release, a
	# transaction-scope lease (checked at PRE_COMMIT under commit_check =
	# always; released after commit, without waiting: always as EVAL, since
	# a request whose NOSCRIPT would come back later could not be resent),
	# the takeover of the key_prefix, and who holds a resource (holder)
	my $all = sub {
		my ($round) = @_;
		my $s = session($node);
		sql_ok($s, "SET lease_fence.commit_check = 'always'");
		my $r = acquire($s, "r-lua-$round", 30000);
		need($r->{status}, 'acquired', "round $round: acquire");
		need(renew($s, "r-lua-$round", $r->{identity}, 30000)->{status}, 'renewed', "round $round: renew");
		need(release($s, "r-lua-$round", $r->{identity})->{status}, 'released', "round $round: release");
		sql_ok($s, 'BEGIN');
		need(acquire($s, "r-lua-tx-$round", 30000, 0, 'transaction')->{status}, 'acquired',
			"round $round: transaction scope");
		sql_ok($s, 'COMMIT');
		sql_ok($s, 'SELECT lease_fence.claim_key_prefix()');
		need(tf(call($s, "lease_fence.holder('r-lua-$round')")->{held}), 'false', "round $round: holder");
		$s->quit;
	};
	$all->(1);
	is(calls($a, 'eval'), 7 + 1,
		'after SCRIPT FLUSH: each of the seven scripts sent with EVAL once, and the release after COMMIT');
	is($a->cli('SCRIPT', 'EXISTS', map { $sha{$_} } @names), join("\n", (1) x @names),
		'Redis knows each script by the SHA1 of its file: the extension sent the files\' texts');
	$all->(2);
	is(calls($a, 'eval'), 7 + 2,
		'then every call an EVALSHA of the files\' SHA1s: no EVAL more but the release after COMMIT');
	$a->cli('FLUSHALL');
}

# --- identities: 128 random bits each, drawn in blocks of 2,048, never one
# twice: 3,000 in one session (across a refill of the block) and 3,000 in
# another, all distinct, all 32 hex digits
{
	$a->cli('FLUSHALL');
	my $sql = q{SELECT string_agg(a.identity, ',') FROM generate_series(1, 3000) g,
		LATERAL lease_fence.acquire('uniq-' || g, 30000) a WHERE a.status = 'acquired'};
	my @ids = split /,/, $node->safe_psql('postgres', $sql);
	$a->cli('FLUSHALL');
	push @ids, split /,/, $node->safe_psql('postgres', $sql);
	is(scalar(@ids), 6000, 'identities: 6,000 acquired in two sessions');
	my %seen = map { $_ => 1 } @ids;
	is(scalar(keys %seen), 6000, 'identities: all 6,000 distinct');
	is(scalar(grep { !/^[0-9a-f]{32}$/ } @ids), 0, 'identities: each 32 lower-case hex digits');
	# no 16-byte identity shares its first 8 bytes with another: a block
	# handed out twice, or shifted, would repeat them
	my %half = map { substr($_, 0, 16) => 1 } @ids;
	is(scalar(keys %half), 6000, 'identities: no two share their first 64 bits');
	$a->cli('FLUSHALL');
}

# --- a Redis restarted between two requests: a new connection, no error
{
	my $s = session($node);
	my $r = acquire($s, 'r-before', 30000);
	is($r->{status}, 'acquired', 'before the restart: acquired');
	$a->stop;
	$r = acquire($s, 'r-down', 30000);
	is($r->{status}, 'unavailable', 'Redis stopped: unavailable, on the cached connection');
	$a->start;
	$r = acquire($s, 'r-after', 30000);
	is($r->{status}, 'acquired', 'after the restart: acquired on a new connection');
	$s->quit;
}

done_testing();

# generation_pg_upgrade.pl — pg_upgrade carries what lease_fence keeps: the
# generation sequence and its epoch, the heal budget used, the fences of
# protected tables, the resource fences, the jobs' checkpoints and the
# adoptions (adopt_generations()); every
# version's objects update afterwards (ALTER EXTENSION lease_fence UPDATE)
# with their fences and generations kept.
#
# The old cluster is LF_OLD_PG (test/run.sh: on LF_PG=18 a copy of Debian's
# 15 with this tree's lease_fence, so pg_upgrade crosses 15 -> 18; on the
# other majors the run's own installation, and pg_upgrade stays on its
# major); the new one the run's installation.  Both preload lease_fence.
# The old cluster is a promoted standby (timeline 2), so its generations
# start in epoch 2; the new one starts on timeline 1, and must go on
# drawing in the epoch of the last one drawn before (no epoch jump, no
# value lower).  Before the upgrade, in database app (the default version): a
# lenient and a strict protected table with fences, a resource fence, a
# checkpoint, an adoption (adopt_generations(), so the generations drawn
# after it are in epoch 3, and the one drawn before it is refused) and a
# heal that spent heal budget (a real Redis, a :gen key set above the
# highest issued, an acquire that answers stale); in
# databases v10 ... v14 the objects of 1.0 ... 1.4 (CREATE EXTENSION
# VERSION), each with a fenced row.  After it, each of them is the same,
# a stale holder is refused (LF001), the generation the adoption refused is
# still refused (LF004, its reason) and the newest holder's write stands.
#
# The counters (lease_fence.stats) live in shared memory: after pg_upgrade
# they start from zero, as after any restart (the old cluster's heal/moved
# is not carried), and the new cluster, preloading lease_fence, counts
# cluster-wide again.  That is what is asserted.
#
# pg_upgrade runs once, with --link and --no-sync (the old cluster is not
# used again; its values were read before).
#
# Checked by hand in scratch copies: a generation.c that takes the epoch
# from the timeline (timeline 1 after the upgrade: epoch 1) fails the
# points from the next draw on; a 1.3--1.4 script that sets generation_seq
# back fails the 1.0 ... 1.3 databases' points after their update.  Without
# any pg_extension_config_dump() call (in every script) all points still
# pass, on 15 -> 15 and 15 -> 18: pg_upgrade moves every member of the
# extension (its --binary-upgrade dump), the tables' files and the
# sequences' values, whatever a plain pg_dump leaves out; the configuration
# marks matter to pg_dump alone (generation_dump_restore.pl).

use strict;
use warnings;

use FindBin;
use lib "$FindBin::RealBin/../perl";

use LeaseFenceRedis;
use LeaseFenceTest;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $old_path = $ENV{LF_OLD_PG}
  or die 'LF_OLD_PG is not set: test/run.sh sets it (test/README.md, "TAP")';
my $old_major = $ENV{LF_OLD_PG_MAJOR} or die 'LF_OLD_PG_MAJOR is not set';
my @versions = qw(1.0 1.1 1.2 1.3 1.4);

my $redis = LeaseFenceRedis->new;
my $conf = join("\n",
	"shared_preload_libraries = 'lease_fence'",
	"lease_fence.redis_socket = '" . $redis->socket_path . "'") . "\n";

# the old cluster on timeline 2: started as a standby of nobody (it replays
# its own WAL), then promoted (started and stopped once before: a standby
# needs the settings of the primary it replays, those of initdb's checkpoint)
my $old = PostgreSQL::Test::Cluster->new('old', install_path => $old_path);
$old->init(allows_streaming => 1, extra => ['--data-checksums']);
# (a setting of 18 that the test modules write for every major)
$old->adjust_conf('postgresql.conf', 'autovacuum_worker_slots', undef) if $old_major < 18;
$old->append_conf('postgresql.conf', $conf);
$old->start;
$old->stop;
$old->set_standby_mode;
$old->start;
$old->promote;
$old->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'the old cluster did not leave recovery';

sub q_ok { my ($node, $db, $sql) = @_; return $node->safe_psql($db, $sql); }

# a statement under a generation, in a transaction of its own
sub fenced
{
	my ($g, $sql) = @_;
	return "BEGIN; SET LOCAL lease_fence.generation = $g; $sql; COMMIT;";
}

# What app holds, item by item (compared before and after the upgrade)
my %app_items = (
	'the lenient table\'s rows and fences' =>
	  q{SELECT string_agg(format('%s %s %s', id, v, fence), ', ' ORDER BY id) FROM lenient},
	'the strict table\'s rows and fences' =>
	  q{SELECT string_agg(format('%s %s %s', id, v, fence), ', ' ORDER BY id) FROM strict},
	'the protected tables, their modes and triggers' =>
	  q{SELECT string_agg(format('%s %s %s %s', table_name, strict, tokens, ok), ', ' ORDER BY table_name::text) FROM lease_fence.protected_tables},
	'the resource fences' =>
	  q{SELECT string_agg(resource || ' ' || generation, ', ' ORDER BY resource) FROM lease_fence.resource_fences},
	'the checkpoint, with its generation' =>
	  q{SELECT state::text || ' ' || generation FROM lease_fence.last_checkpoint('job:2')},
	'the heal budget used' =>
	  q{SELECT last_value || ' ' || is_called FROM lease_fence.heal_budget_seq},
	'the adoption\'s row' =>
	  q{SELECT string_agg(format('%s %s %s %s %s', adopted_at, refused_through, highest_fence, old_highest_issued, highest_issued_before), ', ') FROM lease_fence.generation_adoption},
	'the highest generation issued' =>
	  q{SELECT last_value FROM lease_fence.generation_seq});

sub counter
{
	my ($node, $op, $outcome) = @_;
	return 0 + (q_ok($node, 'app',
		"SELECT count FROM lease_fence.stats WHERE operation = '$op' AND outcome = '$outcome'") || 0);
}

# app: the current version
q_ok($old, 'postgres', 'CREATE DATABASE app');
q_ok($old, 'app', q{
	CREATE EXTENSION lease_fence;
	CREATE TABLE lenient (id int PRIMARY KEY, v text);
	CREATE TABLE strict (id int PRIMARY KEY, v text);
	SELECT lease_fence.protect('lenient'), lease_fence.protect('strict', strict => true);
});
# an adoption: a generation drawn (the first of timeline 2: epoch 2), then
# adopt_generations() with it as the old primary's highest issued, which
# refuses it from then on; every generation drawn after is in epoch 3
my $pre = q_ok($old, 'app', 'SELECT lease_fence.next_generation()');
die "the old cluster draws in epoch " . ($pre >> 40) . ", not 2" unless ($pre >> 40) == 2;
my $refused = q_ok($old, 'app', "SELECT lease_fence.adopt_generations($pre)");
die "the adoption refuses through $refused, not epoch 3's start" unless $refused == (3 << 40);
my @g = split /\n/,
  q_ok($old, 'app', 'SELECT lease_fence.next_generation() FROM generate_series(1, 5)');
q_ok($old, 'app', fenced($g[0], q{INSERT INTO lenient VALUES (1, 'a')}));
q_ok($old, 'app', fenced($g[2], q{INSERT INTO lenient VALUES (2, 'b')}));
q_ok($old, 'app', fenced($g[1], q{INSERT INTO strict VALUES (1, 'c')}));
q_ok($old, 'app', fenced($g[3], q{INSERT INTO strict VALUES (2, 'd')}));
q_ok($old, 'app', fenced($g[3], q{SELECT lease_fence.fence_resource('job:1')}));
q_ok($old, 'app', fenced($g[3], q{SELECT lease_fence.checkpoint('job:2', '{"next": 7}')}));

# a heal that spends heal budget: the :gen key above the highest issued
my $highest = q_ok($old, 'app', 'SELECT last_value FROM lease_fence.generation_seq');
need($redis->cli('SET', gkey('victim'), $highest + 1000), 'OK', 'SET of the :gen key of victim');
need(q_ok($old, 'app', q{SELECT status FROM lease_fence.acquire('victim', 30000)}),
	'stale', 'the acquire over the :gen key');
need(counter($old, 'heal', 'moved'), 1, 'heal/moved on the old cluster');
need(q_ok($old, 'app', 'SELECT last_value > 0 FROM lease_fence.heal_budget_seq'), 't',
	'heal budget spent');
# the newest holder before the upgrade, above the heal
my $newest = q_ok($old, 'app', 'SELECT lease_fence.next_generation()');
die "the newest generation $newest is not above the heal" unless $newest > $highest + 1000;
q_ok($old, 'app', fenced($newest, q{UPDATE strict SET v = 'e' WHERE id = 1}));

my %before = map { $_ => q_ok($old, 'app', $app_items{$_}) } keys %app_items;
my $epoch = $before{'the highest generation issued'} >> 40;

# v10 ... v14: each version's objects, a fenced row under the second of two
# generations drawn (every version has next_generation)
my (%v_gen, %v_before);
for my $v (@versions)
{
	(my $db = "v$v") =~ s/\.//;
	q_ok($old, 'postgres', "CREATE DATABASE $db");
	q_ok($old, $db, qq{
		CREATE EXTENSION lease_fence VERSION '$v';
		CREATE TABLE t (id int PRIMARY KEY, v text);
		SELECT lease_fence.protect('t');
	});
	my @vg = split /\n/,
	  q_ok($old, $db, 'SELECT lease_fence.next_generation() FROM generate_series(1, 2)');
	q_ok($old, $db, fenced($vg[1], q{INSERT INTO t VALUES (1, 'x')}));
	$v_gen{$db} = \@vg;
	$v_before{$db} = q_ok($old, $db,
		q{SELECT (SELECT format('%s %s %s', id, v, fence) FROM t) || ' / ' || last_value FROM lease_fence.generation_seq});
}

# the new cluster
my $new = PostgreSQL::Test::Cluster->new('new');
$new->init(extra => ['--data-checksums']);
$new->append_conf('postgresql.conf', $conf);
my $new_major = $new->pg_version->major;

# PostgreSQL's own skew, not lease_fence's: a newer minor of the old major
# (Debian 12's 15.20) marks every column with the attribute option
# pg_attver, which a new server older than it (18.6) does not know, and
# pg_upgrade's restore of any table then fails ('unrecognized parameter
# "pg_attver"').  Only when the new server refuses the option, it is taken
# off the old cluster's user columns (lease_fence's objects and the test's
# tables alike) once everything above was read: the catalogs' one change,
# before pg_upgrade.
$new->start;
my (undef, undef, $probe) = $new->psql('postgres',
	'CREATE TEMP TABLE probe (a int); ALTER TABLE probe ALTER COLUMN a SET (pg_attver = 1)');
$new->stop;
if ($probe =~ /unrecognized parameter "pg_attver"/)
{
	note 'the new server does not know pg_attver: taken off the old cluster\'s columns';
	for my $db ('postgres', 'app', map { (my $d = "v$_") =~ s/\.//; $d } @versions)
	{
		q_ok($old, $db, q{UPDATE pg_catalog.pg_attribute
			SET attoptions = NULLIF(ARRAY(SELECT o FROM unnest(attoptions) o WHERE o NOT LIKE 'pg\_attver=%'), '{}')
			WHERE attrelid >= 16384 AND attoptions::text LIKE '%pg\_attver=%'});
	}
}
$old->stop;

# pg_upgrade (the new installation's)
my $path = "$old_major -> $new_major";
note "pg_upgrade $path";
{
	# pg_upgrade writes its scripts into the current directory
	chdir PostgreSQL::Test::Utils::tempdir;
	my $upgraded = $new->run_log(
		[
			'pg_upgrade', '--no-sync', '--link',
			'--old-datadir' => $old->data_dir,
			'--new-datadir' => $new->data_dir,
			'--old-bindir' => "$old_path/bin",
			'--new-bindir' => $new->config_data('--bindir'),
			'--socketdir' => $new->host,
			'--old-port' => $old->port,
			'--new-port' => $new->port,
		]);
	ok($upgraded, "pg_upgrade $path")
	  or do
	{
		# what went wrong is in pg_upgrade's own logs, kept on failure
		for my $f (glob($new->data_dir . '/pg_upgrade_output.d/*/log/*'))
		{
			my @l = grep { /error|fatal/i } split /\n/, slurp_file($f);
			diag("--- $f\n" . join("\n", @l[ ($#l > 30 ? $#l - 30 : 0) .. $#l ]));
		}
		BAIL_OUT("pg_upgrade $path failed");
	};
}
$new->start;

# app: every item as it was
for my $item (sort keys %app_items)
{
	is(q_ok($new, 'app', $app_items{$item}), $before{$item}, "$path: $item, as before");
}

# counters: from zero, cluster-wide
is(q_ok($new, 'app', q{SELECT DISTINCT scope FROM lease_fence.stats}), 'cluster',
	"$path: the counters are cluster-wide on the new cluster (preloaded)");
is(counter($new, 'heal', 'moved'), 0,
	"$path: the counters start from zero (the old cluster's heal/moved is not carried)");

# the generations go on in the same epoch, above every one drawn before
my $next = q_ok($new, 'app', 'SELECT lease_fence.next_generation()');
cmp_ok($next, '>', $before{'the highest generation issued'},
	"$path: the next draw is above every generation drawn before");
is($next >> 40, $epoch, "$path: in the same epoch ($epoch), on the new cluster's timeline 1");

# a stale holder is refused, the newest holder's write stands
my ($ret, $out, $err) = $new->psql('app', fenced($g[1], q{UPDATE strict SET v = 'stale' WHERE id = 1}),
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
is(sqlstate($err), 'LF001', "$path: a stale holder's write is refused with LF001");
is(counter($new, 'fence', 'LF001'), 1, "$path: and counted, cluster-wide");
($ret, $out, $err) = $new->psql('app', fenced($pre, q{UPDATE strict SET v = 'adopted over' WHERE id = 2}),
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
is(sqlstate($err), 'LF004', "$path: a generation the adoption refuses is still refused (LF004)");
like($err, qr/generation issued before lease_fence\.adopt_generations\(\)/,
	"$path: with the adoption's reason");
($ret, $out, $err) = $new->psql('app', fenced($g[2], q{SELECT lease_fence.fence_resource('job:1')}),
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
is(sqlstate($err), 'LF001', "$path: a resource fence below the carried one is refused with LF001");
q_ok($new, 'app', fenced($next, q{UPDATE strict SET v = 'f' WHERE id = 1}));
is(q_ok($new, 'app', q{SELECT v || ' ' || fence FROM strict WHERE id = 1}), "f $next",
	"$path: the newest holder's write stands");
($ret, $out, $err) = $new->psql('app', q{UPDATE strict SET v = 'g' WHERE id = 2},
	extra_params => [ '-v', 'VERBOSITY=verbose' ]);
is(sqlstate($err), 'LF002', "$path: the strict table still refuses a write without a generation");

# every older version's objects update, keeping their fences and generations
my $default = q_ok($new, 'postgres',
	q{SELECT default_version FROM pg_available_extensions WHERE name = 'lease_fence'});
for my $v (@versions)
{
	(my $db = "v$v") =~ s/\.//;
	my $state =
	  q{SELECT (SELECT format('%s %s %s', id, v, fence) FROM t) || ' / ' || last_value FROM lease_fence.generation_seq};
	is(q_ok($new, $db, $state), $v_before{$db}, "$path: $v: its fence and generations, as before");
	q_ok($new, $db, 'ALTER EXTENSION lease_fence UPDATE');
	is(q_ok($new, $db, q{SELECT extversion FROM pg_extension WHERE extname = 'lease_fence'}),
		$default, "$path: $v: ALTER EXTENSION UPDATE reaches $default");
	is(q_ok($new, $db, $state), $v_before{$db}, "$path: $v: its fence and generations kept by the update");
	cmp_ok(q_ok($new, $db, 'SELECT lease_fence.next_generation()'),
		'>', $v_gen{$db}[1], "$path: $v: the next draw is above its generations");
	($ret, $out, $err) = $new->psql($db, fenced($v_gen{$db}[0], q{UPDATE t SET v = 'stale'}),
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	is(sqlstate($err), 'LF001', "$path: $v: its fence still refuses a stale holder (LF001)");
}

$new->stop;
$redis->stop;
done_testing();

# fence_error_fields.pl — what psql shows with \set VERBOSITY verbose, which
# is what drivers read from the same error fields (docs/reference.md, "Error fields").
#
# An LF001 on a row names the fence's schema, table and column (SCHEMA
# NAME, TABLE NAME, COLUMN NAME); a resource fence's LF001 names the table
# behind the fences and the resource as CONSTRAINT NAME.  The sequence is
# an ORM's: a full-row save that writes back the fence it loaded, twice in
# one transaction, then a stale holder's full-row save (LF001, not LF003);
# set_generation(50, 'job:1') fences job:1, a later set_generation(45,
# 'job:1') is LF001.  The regress file full_row_save checks every fence
# error's fields through GET STACKED DIAGNOSTICS; this one checks what a
# user sees.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('error_fields');
$node->init;
$node->start;
$node->safe_psql('postgres',
	"CREATE EXTENSION lease_fence; "
	  . "SELECT count(lease_fence.next_generation()) FROM generate_series(1, 60); "
	  . "CREATE SCHEMA shop; "
	  . "CREATE TABLE shop.o (id int PRIMARY KEY, v int NOT NULL, fence bigint NOT NULL DEFAULT 0); "
	  . "SELECT lease_fence.protect('shop.o'); "
	  . "INSERT INTO shop.o VALUES (1, 0, 0)");

# run a script under \set VERBOSITY verbose: (stdout, stderr)
sub verbose
{
	my ($sql) = @_;
	my ($ret, $out, $err) = $node->psql('postgres', "\\set VERBOSITY verbose\n$sql");
	return ($out, $err);
}

# the full-row save sequence: two saves writing fence 0 under generation 20
my ($out, $err) = verbose(
	"BEGIN;\nSET LOCAL lease_fence.generation = 20;\n"
	  . "UPDATE shop.o SET v = 1, fence = 0 WHERE id = 1;\n"
	  . "UPDATE shop.o SET v = 2, fence = 0 WHERE id = 1;\nCOMMIT;");
is($err, '', 'two full-row saves in one fenced transaction: no error');
is($node->safe_psql('postgres', 'SELECT v || \'/\' || fence FROM shop.o WHERE id = 1'), '2/20',
	'they commit, and the fence is 20');

# the stale holder's full-row save
($out, $err) = verbose(
	"BEGIN;\nSET LOCAL lease_fence.generation = 10;\n"
	  . "UPDATE shop.o SET v = 3, fence = 0 WHERE id = 1;\nROLLBACK;");
like($err, qr/ERROR:  LF001: stale generation/, "the stale holder's full-row save: LF001");
like($err, qr/^SCHEMA NAME:  shop$/m, 'LF001 shows SCHEMA NAME');
like($err, qr/^TABLE NAME:  o$/m, 'LF001 shows TABLE NAME');
like($err, qr/^COLUMN NAME:  fence$/m, 'LF001 shows COLUMN NAME');

# set_generation(generation, resource)
($out, $err) = verbose("BEGIN;\nSELECT lease_fence.set_generation(50, 'job:1');\nCOMMIT;");
is($err, '', "set_generation(50, 'job:1'): no error");
is($node->safe_psql('postgres',
		"SELECT generation FROM lease_fence.resource_fences WHERE resource = 'job:1'"),
	'50', 'and job:1 is fenced at 50');
($out, $err) = verbose("BEGIN;\nSELECT lease_fence.set_generation(45, 'job:1');\nROLLBACK;");
like($err, qr/ERROR:  LF001: stale generation: resource fence rejected/,
	"a later set_generation(45, 'job:1'): LF001");
like($err, qr/^SCHEMA NAME:  lease_fence$/m, 'the resource LF001 shows SCHEMA NAME');
like($err, qr/^TABLE NAME:  resource_generation$/m, 'the resource LF001 shows TABLE NAME');
like($err, qr/^CONSTRAINT NAME:  job:1$/m, 'the resource LF001 names the resource as CONSTRAINT NAME');
is($node->safe_psql('postgres',
		"SELECT generation FROM lease_fence.resource_fences WHERE resource = 'job:1'"),
	'50', 'job:1 stays fenced at 50');

$node->stop;
done_testing();

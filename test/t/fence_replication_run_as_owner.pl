# fence_replication_run_as_owner.pl — a subscription is no way around the
# fence for a role that merely may write a fenced table.
#
# On PostgreSQL 16 and later a member of pg_create_subscription can own a
# subscription, and with run_as_owner = true its workers write as that role
# instead of switching to the table owner.  Such a role could otherwise
# publish whatever it likes from a server of its own and have it written into
# a fenced table unchecked.  lease_fence lets replicated rows pass only when
# the worker has the rights of the table's owner (docs/guides/fencing-tables.md, "Logical
# replication"): here the worker is fenced like any other writer — its
# unfenced rows into a strict table fail with LF002 and are not written —
# while the same subscription run as the table owner replicates as usual.
# PostgreSQL 15 has neither pg_create_subscription nor run_as_owner: there
# the file checks that premise instead: a role that may write the fenced
# table, short of a superuser, can neither create a subscription nor be
# handed one.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $pub = PostgreSQL::Test::Cluster->new('publisher');
$pub->init(allows_streaming => 'logical');
$pub->start;
if ($pub->safe_psql('postgres', 'SHOW server_version_num') < 160000)
{
	$pub->safe_psql('postgres', q{
CREATE EXTENSION lease_fence;
CREATE TABLE st (id int PRIMARY KEY, v text NOT NULL);
SELECT lease_fence.protect('st', strict => true);
CREATE ROLE writer LOGIN;
GRANT INSERT, UPDATE, DELETE, SELECT ON st TO writer;
GRANT CREATE ON DATABASE postgres TO writer;
});
	my $connstr = $pub->connstr . ' dbname=postgres';
	my ($rc, $out, $err) = $pub->psql('postgres',
		"SET ROLE writer; CREATE SUBSCRIPTION s CONNECTION '$connstr' PUBLICATION p WITH (connect = false)",
		on_error_stop => 1);
	like($err, qr/must be superuser to create subscriptions/,
		'PostgreSQL 15: a role that may write the fenced table cannot create a subscription');
	# nor can the superuser hand one over to it
	$pub->safe_psql('postgres', qq{
CREATE SUBSCRIPTION s CONNECTION '$connstr' PUBLICATION p WITH (connect = false);
});
	($rc, $out, $err) = $pub->psql('postgres', 'ALTER SUBSCRIPTION s OWNER TO writer', on_error_stop => 1);
	like($err, qr/permission denied to change owner of subscription/,
		'PostgreSQL 15: a subscription cannot be handed to a role short of a superuser');
	$pub->safe_psql('postgres', 'ALTER SUBSCRIPTION s SET (slot_name = NONE); DROP SUBSCRIPTION s');
	$pub->stop;
	done_testing();
	exit 0;
}

my $sub = PostgreSQL::Test::Cluster->new('subscriber');
$sub->init;
$sub->start;

my $schema = q{
CREATE EXTENSION lease_fence;
CREATE TABLE st (id int PRIMARY KEY, v text NOT NULL);
SELECT lease_fence.protect('st', strict => true);
};
$pub->safe_psql('postgres', $schema);
$sub->safe_psql('postgres', $schema);
$pub->safe_psql('postgres', 'CREATE PUBLICATION p FOR TABLE st');

# a role that may write st on the subscriber, owns no table, and may own a
# subscription
$sub->safe_psql('postgres', q{
CREATE ROLE writer LOGIN;
GRANT INSERT, UPDATE, DELETE, SELECT ON st TO writer;
GRANT pg_create_subscription TO writer;
GRANT CREATE ON DATABASE postgres TO writer;
});

my $connstr = $pub->connstr . ' dbname=postgres';
# made by the superuser (password_required = false is superuser-only; the
# test clusters trust local connections), then handed to writer
$sub->safe_psql('postgres', qq{
CREATE SUBSCRIPTION s CONNECTION '$connstr' PUBLICATION p
	WITH (run_as_owner = true, password_required = false, copy_data = false, enabled = false);
ALTER SUBSCRIPTION s OWNER TO writer;
ALTER SUBSCRIPTION s ENABLE;
});

# a row the publisher writes under a generation
$pub->safe_psql('postgres', q{
SELECT lease_fence.next_generation() FROM generate_series(1, 5);
BEGIN; SET LOCAL lease_fence.generation = 3; INSERT INTO st VALUES (1, 'from publisher'); COMMIT;
});

# the apply worker fails on it (again and again); look for that in the log
my $refused = 0;
for (1 .. 10 * $PostgreSQL::Test::Utils::timeout_default)
{
	if (slurp_file($sub->logfile) =~ /ERROR:  missing generation: write rejected by fence/)
	{
		$refused = 1;
		last;
	}
	select(undef, undef, undef, 0.1);
}
ok($refused, 'the apply worker running as a non-owner is refused by the strict fence (LF002)');
is($sub->safe_psql('postgres', 'SELECT count(*) FROM st'), '0',
	'and the row it brought is not written');

# the same subscription, run as the table owner (the default): replicates
$sub->safe_psql('postgres', q{
ALTER SUBSCRIPTION s DISABLE;
ALTER SUBSCRIPTION s OWNER TO CURRENT_USER;
ALTER SUBSCRIPTION s SET (run_as_owner = false);
ALTER SUBSCRIPTION s ENABLE;
});
$pub->wait_for_catchup('s');
is($sub->safe_psql('postgres', 'SELECT id, v, fence FROM st'), '1|from publisher|3',
	'run as the table owner, the row arrives as the publisher decided');

$sub->stop;
$pub->stop;
done_testing();

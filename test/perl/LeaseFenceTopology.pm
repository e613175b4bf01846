# LeaseFenceTopology.pm — Redis as deployed for availability and scale, for
# lease_fence's TAP tests: a master with replicas watched by redis-sentinel,
# and a Redis Cluster, all real servers on 127.0.0.1, private to one test.
#
#   my $s = LeaseFenceTopology::Sentinel->new(master_name => 'm',
#       master_port => $master->port);          # one redis-sentinel
#   $s->cli('SENTINEL', 'get-master-addr-by-name', 'm');
#   my @nodes = LeaseFenceTopology::cluster(masters => 3, replicas => 1);
#   LeaseFenceTopology::kill9($redis);          # SIGKILL, reaped
#
# Data nodes are LeaseFenceRedis servers; a sentinel is one too (same
# start, stop and clean-up), started as redis-sentinel with a config file of
# its own (Sentinel rewrites it) and reached over TCP.

package LeaseFenceTopology;

use strict;
use warnings;

use Carp;
use IPC::Run;
use LeaseFenceRedis;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Time::HiRes qw(usleep time);

# wait until $cond->() is true, polling every 50 ms; dies after the TAP timeout
sub wait_for
{
	my ($what, $cond) = @_;
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	until ($cond->())
	{
		croak "timed out waiting for $what" if time() > $deadline;
		usleep(50_000);
	}
	return;
}

# A Redis master with two replicas (synced) and three sentinels watching it
# as "lf", and a node $name whose lease helper finds the master through them
# (lease_fence preloaded, connect_timeout_ms 500).  Returns once every
# sentinel sees the master, both replicas and the two other sentinels (they
# find each other while the node is made): ($master, \@replicas,
# \@sentinels, $node).
sub sentinel_group
{
	my ($name) = @_;
	my $master = LeaseFenceRedis->new;
	my @replicas = map {
		LeaseFenceRedis->new(extra => [ '--replicaof', '127.0.0.1', $master->port ])
	} 1 .. 2;
	wait_for('the replicas to sync', sub {
		!grep { $_->cli('INFO', 'replication') !~ /master_link_status:up/ } @replicas });
	my @sentinels = map {
		LeaseFenceTopology::Sentinel->new(master_name => 'lf', master_port => $master->port)
	} 1 .. 3;
	my $list = join ',', map { '127.0.0.1:' . $_->port } @sentinels;
	my $node = $master->node($name,
		"shared_preload_libraries = 'lease_fence'",
		"lease_fence.redis_sentinels = '$list'",
		"lease_fence.redis_sentinel_master = 'lf'",
		'lease_fence.connect_timeout_ms = 500');
	wait_for('the sentinels to settle', sub {
		!grep {
			my $m = $_->cli('SENTINEL', 'master', 'lf');
			my @up = $_->cli('SENTINEL', 'replicas', 'lf') =~ /\nflags\nslave\n/g;
			$m !~ /\nflags\nmaster\n/ || $m !~ /\nnum-slaves\n2\n/
			  || $m !~ /\nnum-other-sentinels\n2\n/ || @up != 2
		} @sentinels });
	return ($master, \@replicas, \@sentinels, $node);
}

# kill -9 a LeaseFenceRedis server and reap it: it stops mid-flight, as a
# crashed host does (start() brings it back, empty)
sub kill9
{
	my ($redis) = @_;
	my $pid = $redis->pid or croak "not running";
	kill 'KILL', $pid;
	waitpid($pid, 0);
	$redis->{pid} = undef;
	unlink $redis->socket_path;
	return;
}

# A Redis Cluster of $opts{masters} masters with $opts{replicas} replicas
# each, fast to fail over (cluster-node-timeout 1000 ms), each with a bus
# port picked like its port.  Returns the LeaseFenceRedis servers, once every
# node says cluster_state:ok.
sub cluster
{
	my (%opts) = @_;
	my $n = $opts{masters} * (1 + ($opts{replicas} || 0));
	my @nodes = map {
		LeaseFenceRedis->new(extra => [
			'--cluster-enabled', 'yes',
			'--cluster-config-file', 'nodes.conf',
			# the bus port is a free one of its own, not port + 10000,
			# which nothing reserved (another server's, or in use)
			'--cluster-port', PostgreSQL::Test::Cluster::get_free_port(),
			'--cluster-node-timeout', '1000',
			# a replica takes over however long it was cut off
			'--cluster-replica-validity-factor', '0' ])
	} 1 .. $n;
	my @cmd = ($LeaseFenceRedis::REDIS_CLI, '--cluster', 'create',
		(map { '127.0.0.1:' . $_->port } @nodes),
		'--cluster-replicas', $opts{replicas} || 0, '--cluster-yes');
	my ($out, $err) = ('', '');
	IPC::Run::run(\@cmd, '<', \'', '>', \$out, '2>', \$err,
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default))
	  or croak "redis-cli --cluster create failed:\n$out$err";
	for my $node (@nodes)
	{
		wait_for('cluster_state:ok on ' . $node->port,
			sub { $node->cli('CLUSTER', 'INFO') =~ /cluster_state:ok/ });
	}
	# every node knows every other one's role
	wait_for('all nodes to agree on the masters', sub {
		my @masters = grep { /master/ && !/fail/ } split /\n/,
		  $nodes[0]->cli('CLUSTER', 'NODES');
		scalar(@masters) == $opts{masters};
	});
	return @nodes;
}

# The node id of a cluster node, from its own CLUSTER NODES line
sub node_id
{
	my ($node) = @_;
	my ($self) = grep { /myself/ } split /\n/, $node->cli('CLUSTER', 'NODES');
	croak "no myself line in CLUSTER NODES" unless defined $self;
	return (split / /, $self)[0];
}

sub is_master
{
	my ($node) = @_;
	my ($self) = grep { /myself/ } split /\n/, $node->cli('CLUSTER', 'NODES');
	return defined $self && $self =~ /\bmaster\b/;
}

# The cluster node (of @nodes) that serves $key's slot as master, as the
# first running node of @nodes sees it; undef if it names none of @nodes
sub owner_of
{
	my ($key, @nodes) = @_;
	my ($ask) = grep { $_->pid } @nodes;
	return owner_seen_by($ask, $key, @nodes);
}

# The same, as node $ask sees it
sub owner_seen_by
{
	my ($ask, $key, @nodes) = @_;
	my $slot = $ask->cli('CLUSTER', 'KEYSLOT', $key);
	for my $line (split /\n/, $ask->cli('CLUSTER', 'NODES'))
	{
		my @f = split / /, $line;
		next unless $f[2] =~ /master/ && $f[2] !~ /fail/;
		for my $range (@f[ 8 .. $#f ])
		{
			next if $range =~ /^\[/;
			my ($lo, $hi) = split /-/, $range;
			$hi //= $lo;
			next unless $slot >= $lo && $slot <= $hi;
			my ($port) = $f[1] =~ /:(\d+)/;
			my ($node) = grep { $_->port == $port } @nodes;
			return $node;
		}
	}
	return undef;
}

# redis-cli on $node with ASKING first, on one connection: a key of a slot
# being imported is read on the importing node.  Returns the last reply.
sub asking_cli
{
	my ($node, @cmd) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ $LeaseFenceRedis::REDIS_CLI, '-s', $node->socket_path ],
		'<', \("ASKING\n" . join(' ', @cmd) . "\n"), '>', \$out, '2>', \$err,
		IPC::Run::timeout(60))
	  or croak "redis-cli ASKING; @cmd failed: $err";
	my @lines = split /\n/, $out;
	return $lines[-1];
}


package LeaseFenceTopology::Sentinel;

use strict;
use warnings;

use Carp;

our @ISA = ('LeaseFenceRedis');

# LeaseFenceTopology::Sentinel->new(master_name => 'm', master_port => N):
# a redis-sentinel on a free 127.0.0.1 port that monitors 127.0.0.1:N
# under that name (quorum 2; quorum => 1 for a lone sentinel), and calls it
# down after 1000 ms (a second failover of the same name can start 6 s
# after the first: twice the failover-timeout).  With tls => { cert, key,
# ca } (files) it listens for TLS only and reaches the master over TLS
# (N is then the master's TLS port); cli() speaks TLS to it.  new, start,
# stop and the clean-up are LeaseFenceRedis's.

# redis-sentinel with a config file of its own, written once (Sentinel
# rewrites it as it learns, and a restart keeps what it learnt)
sub _command
{
	my ($self) = @_;
	my $conf = "$self->{dir}/sentinel.conf";
	unless (-f $conf)
	{
		my ($name, $port) = @{ $self->{opts} }{qw(master_name master_port)};
		my $quorum = $self->{opts}{quorum} // 2;
		my $tls = $self->{opts}{tls};
		open my $fh, '>', $conf or croak "$conf: $!";
		print $fh join("\n",
			$tls
			? ('port 0', "tls-port $self->{port}", "tls-cert-file $tls->{cert}",
				"tls-key-file $tls->{key}", "tls-ca-cert-file $tls->{ca}",
				'tls-auth-clients no', 'tls-replication yes')
			: "port $self->{port}",
			'bind 127.0.0.1',
			"dir $self->{dir}",
			"logfile $self->{logfile}",
			'daemonize no',
			"sentinel monitor $name 127.0.0.1 $port $quorum",
			"sentinel down-after-milliseconds $name 1000",
			"sentinel failover-timeout $name 3000",
			"sentinel parallel-syncs $name 1"), "\n";
		close $fh;
	}
	return (LeaseFenceRedis::find_program('redis-sentinel', 'LF_REDIS_SENTINEL'), $conf);
}

# a sentinel is reached over TCP (and TLS, if it has it)
sub _cli_target
{
	my ($self) = @_;
	my $tls = $self->{opts}{tls};
	return ('-h', '127.0.0.1', '-p', $self->{port},
		$tls ? ('--tls', '--cacert', $tls->{ca}) : ());
}

1;

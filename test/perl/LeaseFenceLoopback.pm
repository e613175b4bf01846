# LeaseFenceLoopback.pm — what the test servers of the TAP suite that stand
# in Redis's place share (the reply-holding proxy of LeaseFenceRedis.pm, the
# misbehaving proxy of LeaseFenceInject.pm, the fake Redis of
# LeaseFenceFakeRedis.pm): a listening socket on a free loopback port,
# bound in the parent before it forks (so the port is taken before anything
# connects), and the file through which the test tells the forked server
# its mode (written whole, by a rename; the server reads it per request),
# and the end of the forked server: stop_server() kills it (its process
# group, when it made one: $self->{group}) and reaps it, once; every server
# register_server() saw is stopped when its object goes or at END, by the
# process that started it only (never by a forked child).

package LeaseFenceLoopback;

use strict;
use warnings;

use Carp;
use Exporter 'import';
use IO::Socket::INET;
use PostgreSQL::Test::Cluster;
use Scalar::Util ();

our @EXPORT = qw(loopback_listener write_mode read_mode register_server stop_server);

my $creator = $$;
my @live;

# ($listener, $port): a socket listening on 127.0.0.1, on a free port
sub loopback_listener
{
	my ($what) = @_;
	for (1 .. 20)
	{
		my $port = PostgreSQL::Test::Cluster::get_free_port();
		my $listener = IO::Socket::INET->new(
			LocalAddr => '127.0.0.1',
			LocalPort => $port,
			Proto => 'tcp',
			Listen => 16,
			ReuseAddr => 1);
		return ($listener, $port) if $listener;
	}
	croak "$what: no free port: $!";
}

# write $line as the whole of $file (a rename: a reader sees the old line or
# the new one, never a part)
sub write_mode
{
	my ($file, $line) = @_;
	open(my $fh, '>', "$file.tmp") or croak "$file.tmp: $!";
	print $fh "$line\n";
	close $fh;
	rename("$file.tmp", $file) or croak "rename $file: $!";
	return;
}

# the line $file holds, or $default when there is none
sub read_mode
{
	my ($file, $default) = @_;
	open(my $fh, '<', $file) or return $default;
	my $line = <$fh> // $default;
	close $fh;
	chomp $line;
	return $line;
}

# $self->{pid} is a forked server of this process: stop it at the latest at END
sub register_server
{
	my ($self) = @_;
	push @live, $self;
	Scalar::Util::weaken($live[-1]);
	return;
}

# kill and reap $self's server (its process group with $self->{group})
sub stop_server
{
	my ($self) = @_;
	return unless $self->{pid} && $$ == $creator;
	kill 'KILL', $self->{group} ? -$self->{pid} : $self->{pid};
	waitpid($self->{pid}, 0);
	$self->{pid} = undef;
	return;
}

END
{
	local $?;
	if ($$ == $creator) { defined $_ and stop_server($_) for @live; }
}

1;

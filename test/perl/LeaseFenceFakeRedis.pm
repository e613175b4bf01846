# LeaseFenceFakeRedis.pm — a server on loopback that speaks enough of
# Redis's protocol to be taken for one, and then answers a lease script with
# a reply no Redis would send: for the TAP test of replies beyond their bound
# (test/t/redis_oversized_reply.pl).
#
# It answers PING with PONG, AUTH and SELECT with OK, and the key_prefix
# check (the claim script: an EVALSHA or EVAL whose key is
# "lease_fence:owner") with "claimed".  Every other script gets the reply of
# the mode, which lives in a file (each connection reads it for every
# request), set with mode():
#   'huge_array'   "*2147483647\r\n", then nothing: an array announced with
#                  2^31-1 elements (16 GB of pointers, were they allocated)
#   'huge_bulk'    an acquire-shaped array whose string announces 200 MB,
#                  then bytes as fast as the socket takes them, without end
#   'wide'         an array of 1,000 arrays of 1,000 integers each: every
#                  array small, the reply a million elements (56 MB in
#                  hiredis's objects)
#   'drip'         an acquire-shaped array whose string announces 20 bytes,
#                  then one byte every 100 ms, without end
#   'ping_huge'    as huge_array, already as the answer to PING (a set-up
#                  command: nothing of a lease has been sent)
#   'bad_text'     an error reply whose words are not valid UTF-8 (bytes
#                  0xff 0xfe, a NUL-free control character)
# requests() counts the requests of a kind ('PING', 'EVALSHA', ...) that the
# server received, from its log.
#
#   my $f = LeaseFenceFakeRedis->new(dir => $dir);
#   $f->mode('huge_array');  ... lease_fence.redis_port = $f->port ...
#
# The forked child (and one child of it per connection) leaves with
# POSIX::_exit; all are killed when the object goes away or in END.

package LeaseFenceFakeRedis;

use strict;
use warnings;

use Carp;
use IO::Socket::INET;
use LeaseFenceLoopback;
use POSIX ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More ();
use Time::HiRes qw(usleep);

sub new
{
	my ($class, %opts) = @_;
	my $self = bless {}, $class;
	my ($listener, $port) = loopback_listener('fake redis');
	$self->{port} = $port;
	$self->{modefile} = "$opts{dir}/fake-$self->{port}.mode";
	$self->{logfile} = "$opts{dir}/fake-$self->{port}.log";
	$self->mode('huge_array');

	my $pid = fork();
	croak "fork failed: $!" unless defined $pid;
	if ($pid == 0)
	{
		# its own process group: stop() ends the connections' children too
		POSIX::setpgid(0, 0);
		eval { _listen($self, $listener); };
		POSIX::_exit(1);
	}
	close $listener;
	$self->{pid} = $pid;
	$self->{group} = 1;
	register_server($self);
	Test::More::note "fake redis pid $pid on 127.0.0.1:$self->{port}";
	return $self;
}

sub port { return $_[0]->{port}; }

sub mode
{
	my ($self, $mode) = @_;
	croak "fake redis: bad mode $mode"
	  unless $mode =~ /^(huge_array|huge_bulk|wide|drip|ping_huge|bad_text)$/;
	write_mode($self->{modefile}, $mode);
	return;
}

# how many requests named $cmd the server has received so far
sub requests
{
	my ($self, $cmd) = @_;
	return 0 unless -f $self->{logfile};
	my @n = slurp_file($self->{logfile}) =~ /^\Q$cmd\E$/mg;
	return scalar @n;
}

sub stop { stop_server($_[0]); return; }

sub DESTROY { local ($., $@, $!, $^E, $?); $_[0]->stop; return; }

# ------------------------------------------------------------------
# the server (in the forked child)

sub _listen
{
	my ($self, $listener) = @_;
	$SIG{CHLD} = 'IGNORE';
	while (my $conn = $listener->accept)
	{
		my $pid = fork();
		next unless defined $pid;
		if ($pid == 0)
		{
			close $listener;
			eval { _serve($self, $conn); };
			POSIX::_exit(0);
		}
		close $conn;
	}
	return;
}

sub _mode { return read_mode($_[0]->{modefile}, 'huge_array'); }

sub _log
{
	my ($self, $what) = @_;
	open(my $fh, '>>', $self->{logfile}) or return;
	print $fh "$what\n";
	close $fh;
	return;
}

sub _send
{
	my ($conn, $data) = @_;
	my $off = 0;
	while ($off < length $data)
	{
		my $n = syswrite($conn, $data, length($data) - $off, $off);
		POSIX::_exit(0) unless defined $n && $n > 0;    # the client went away
		$off += $n;
	}
	return;
}

# read one request (an array of bulk strings) from the buffer, or undef
sub _request
{
	my ($buf) = @_;
	return undef unless $$buf =~ /\A\*(\d+)\r\n/;
	my $n = $1;
	my $pos = length("*$n\r\n");
	my @args;
	for (1 .. $n)
	{
		return undef unless substr($$buf, $pos) =~ /\A\$(\d+)\r\n/;
		my $len = $1;
		$pos += length("\$$len\r\n");
		return undef if length($$buf) < $pos + $len + 2;
		push @args, substr($$buf, $pos, $len);
		$pos += $len + 2;
	}
	substr($$buf, 0, $pos) = '';
	return \@args;
}

sub _bulk { my ($s) = @_; return '$' . length($s) . "\r\n$s\r\n"; }

sub _serve
{
	my ($self, $conn) = @_;
	my $buf = '';
	for (;;)
	{
		my $got = sysread($conn, $buf, 65536, length $buf);
		return unless $got;
		while (my $req = _request(\$buf))
		{
			my $cmd = uc $req->[0];
			my $mode = _mode($self);
			_log($self, $cmd);
			if ($cmd eq 'PING')
			{
				if ($mode eq 'ping_huge')
				{
					_send($conn, "*2147483647\r\n");
					sleep(3600);
				}
				_send($conn, "+PONG\r\n");
			}
			elsif ($cmd eq 'AUTH' || $cmd eq 'SELECT')
			{
				_send($conn, "+OK\r\n");
			}
			elsif (($cmd eq 'EVALSHA' || $cmd eq 'EVAL') && ($req->[3] // '') =~ /owner$/)
			{
				# the key_prefix check: claimed, with the value it was sent
				_send($conn, "*2\r\n:2\r\n" . _bulk($req->[5] // ''));
			}
			elsif ($cmd eq 'EVALSHA' || $cmd eq 'EVAL')
			{
				_misbehave($conn, $mode);
			}
			else
			{
				_send($conn, "-ERR unknown command\r\n");
			}
		}
	}
}

sub _misbehave
{
	my ($conn, $mode) = @_;
	if ($mode eq 'huge_array' || $mode eq 'ping_huge')
	{
		_send($conn, "*2147483647\r\n");
		sleep(3600);
	}
	elsif ($mode eq 'huge_bulk')
	{
		_send($conn, "*2\r\n:1\r\n\$200000000\r\n");
		my $chunk = 'x' x 65536;
		_send($conn, $chunk) for 1 .. 100000;
	}
	elsif ($mode eq 'wide')
	{
		_send($conn, "*1000\r\n");
		_send($conn, "*1000\r\n" . (":1\r\n" x 1000)) for 1 .. 1000;
		sleep(3600);
	}
	elsif ($mode eq 'bad_text')
	{
		_send($conn, "-ERR caf\xc3\xa9 \xff\xfe \x07end\r\n");
	}
	elsif ($mode eq 'drip')
	{
		_send($conn, "*2\r\n:1\r\n\$20\r\n");
		for (1 .. 36000)
		{
			_send($conn, 'x');
			usleep(100_000);
		}
	}
	return;
}

1;

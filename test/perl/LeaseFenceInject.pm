# LeaseFenceInject.pm — a TCP proxy in front of a real redis-server that
# misbehaves after the release lease_fence sends after COMMIT, for the TAP
# tests of the deferred release (test/t/redis_stray_reply.pl,
# test/t/redis_deferred_release_report.pl).
#
# That release is the one request lease_fence sends as EVAL (every other
# script goes as EVALSHA), so the proxy recognises it by its first bytes.
# Everything else is forwarded both ways at once.  The mode lives in a file
# (the forked proxy reads it for every request), set with mode():
#   'off'          forward everything
#   'inject'       after Redis's reply to the next EVAL, send one reply more,
#                  in the same write: "*2 :1 $2 99", which the acquire
#                  script's caller would read as "acquired"
#   'inject-late'  the same, the extra reply written 200 ms after the real
#                  one (it waits on the socket, not in the client's reader)
#   'swallow'      the reply to the next EVAL, and everything Redis sends on
#                  that connection afterwards, is never forwarded (the
#                  connection stays open): a release whose answer never comes
# A mode other than 'off' applies to one EVAL, then the proxy goes back to
# forwarding.  done() counts what the proxy did, from its log.
#
#   my $p = LeaseFenceInject->new(upstream_port => $redis->port, dir => $redis->dir);
#   $p->mode('inject');  ...;  $p->done('injected') == 1 or die;
#
# The forked child leaves with POSIX::_exit and is killed when the object
# goes away or at the latest in END.

package LeaseFenceInject;

use strict;
use warnings;

use Carp;
use IO::Select;
use IO::Socket::INET;
use LeaseFenceLoopback;
use POSIX ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More ();
use Time::HiRes qw(usleep);

our $STRAY = "*2\r\n:1\r\n\$2\r\n99\r\n";


sub new
{
	my ($class, %opts) = @_;
	my $self = bless { upstream_port => $opts{upstream_port}, generation => 0 }, $class;
	my ($listener, $port) = loopback_listener('inject proxy');
	$self->{port} = $port;
	$self->{modefile} = "$opts{dir}/inject-$self->{port}.mode";
	$self->{logfile} = "$opts{dir}/inject-$self->{port}.log";
	$self->mode('off');

	my $pid = fork();
	croak "fork failed: $!" unless defined $pid;
	if ($pid == 0)
	{
		eval { $self->_serve($listener, getppid()); };
		POSIX::_exit(1);
	}
	close $listener;
	$self->{pid} = $pid;
	register_server($self);
	Test::More::note "inject proxy pid $pid on 127.0.0.1:$self->{port} -> 127.0.0.1:$self->{upstream_port}";
	return $self;
}

sub port { return $_[0]->{port}; }

# set the mode for the next EVAL (see above)
sub mode
{
	my ($self, $mode) = @_;
	croak "inject proxy: bad mode $mode" unless $mode =~ /^(off|inject|inject-late|swallow)$/;
	$self->{generation}++;
	write_mode($self->{modefile}, "$mode $self->{generation}");
	return;
}

# how many times the proxy logged $what: 'eval' (an EVAL went through),
# 'injected', 'swallowed'
sub done
{
	my ($self, $what) = @_;
	return 0 unless -f $self->{logfile};
	my @n = slurp_file($self->{logfile}) =~ /^\Q$what\E /mg;
	return scalar @n;
}

# wait until done($what) reaches $n (a harness step: dies on the usual timeout)
sub wait_done
{
	my ($self, $what, $n) = @_;
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	while ($self->done($what) < $n)
	{
		croak "inject proxy: '$what' did not happen $n times" if time() > $deadline;
		usleep(20_000);
	}
	return;
}

sub stop { stop_server($_[0]); return; }

sub DESTROY { local ($., $@, $!, $^E, $?); $_[0]->stop; return; }

sub _write_all
{
	my ($sock, $data) = @_;
	my $off = 0;
	while ($off < length $data)
	{
		my $n = syswrite($sock, $data, length($data) - $off, $off);
		return 0 unless defined $n && $n > 0;
		$off += $n;
	}
	return 1;
}

# the forked proxy's loop; the parent kills it
sub _serve
{
	my ($self, $listener, $parent) = @_;
	my $sel = IO::Select->new($listener);
	my (%peer, %conn, %is_client);
	my ($seq, $used) = (0, '');
	open(my $log, '>>', $self->{logfile}) or die "log: $!";
	$log->autoflush(1);

	while (1)
	{
		POSIX::_exit(0) if getppid() != $parent;
		for my $s ($sel->can_read(0.2))
		{
			if ($s == $listener)
			{
				my $client = $listener->accept or next;
				my $up = IO::Socket::INET->new(PeerAddr => '127.0.0.1',
					PeerPort => $self->{upstream_port}, Proto => 'tcp') or do { close $client; next; };
				my $c = { id => ++$seq, client => $client, up => $up, after => '' };
				$conn{ fileno($client) } = $conn{ fileno($up) } = $c;
				$is_client{ fileno($client) } = 1;
				$sel->add($client, $up);
				print $log "accept $c->{id}\n";
				next;
			}
			my $fd = fileno($s);
			my $c = $conn{$fd} or next;
			my $buf;
			if (!sysread($s, $buf, 65536))
			{
				for my $x ($c->{client}, $c->{up})
				{
					delete $conn{ fileno($x) };
					delete $is_client{ fileno($x) };
					$sel->remove($x);
					close $x;
				}
				print $log "close $c->{id}\n";
				next;
			}
			if ($is_client{$fd})
			{
				# a request; the release after COMMIT goes as EVAL
				if ($buf =~ /\A\*\d+\r\n\$4\r\nEVAL\r\n/)
				{
					my $setting = read_mode($self->{modefile}, 'off');
					my ($mode) = split ' ', $setting;
					if ($mode ne 'off' && $setting ne $used)
					{
						$used = $setting;    # one EVAL per setting
						$c->{after} = $mode;
					}
					print $log "eval $c->{id} $mode\n";
				}
				_write_all($c->{up}, $buf);
				next;
			}
			# a reply
			if ($c->{after} eq 'swallow' || $c->{after} eq 'swallowing')
			{
				print $log "swallowed $c->{id} " . length($buf) . " bytes\n";
				$c->{after} = 'swallowing';
				next;
			}
			if ($c->{after} eq 'inject')
			{
				_write_all($c->{client}, $buf . $STRAY);
				print $log "injected $c->{id} with the reply\n";
			}
			elsif ($c->{after} eq 'inject-late')
			{
				_write_all($c->{client}, $buf);
				usleep(200_000);
				_write_all($c->{client}, $STRAY);
				print $log "injected $c->{id} after the reply\n";
			}
			else
			{
				_write_all($c->{client}, $buf);
			}
			$c->{after} = '' unless $c->{after} eq 'swallowing';
		}
	}
}

1;

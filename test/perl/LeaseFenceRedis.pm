# LeaseFenceRedis.pm — a throwaway redis-server for lease_fence's TAP tests,
# and a reply-holding TCP proxy in front of it.
#
# The server is the real redis-server, the first on PATH (the tests never
# use a mock; LF_REDIS_SERVER, LF_REDIS_CLI and LF_REDIS_SENTINEL name other
# programs: test/lib.sh sets them to valkey-server, valkey-cli and
# valkey-sentinel for LF_REDIS=valkey),
# private to one test: it lives in a temp dir under the test's tmp_check,
# listens on a unix socket in that dir and on a free 127.0.0.1 TCP port, keeps
# nothing on disk (--save '' --appendonly no, so a restart loses every key, as
# a Redis without persistence does), and allows DEBUG from local clients.
#
#   my $redis = LeaseFenceRedis->new;             # started, answers PING
#   $redis->cli('GET', 'lease_fence:{r}');        # redis-cli -s <socket> ...
#   $redis->stop; $redis->start;                  # restart: same socket/port
#   my $proxy = $redis->proxy(hold_ms => 1500);   # 127.0.0.1:$proxy->port
#   $proxy->hold('first');                        # see LeaseFenceRedis::Proxy
#
# The proxy exists for the case the whole helper is about (docs/guides/leases.md, "Statuses":
# unknown): Redis APPLIED a command but the client never saw the reply.  CLIENT
# PAUSE cannot produce it (a paused command whose client hangs up is dropped),
# so the proxy forwards every request at once and holds Redis's replies back
# for hold_ms, longer than the backend's command_timeout_ms (a test that
# uses it sets that below hold_ms).
#
# Every process started here is killed when its object goes away and, at the
# latest, in this module's END block; forked children leave with
# POSIX::_exit so they never run the test's END blocks (which would stop the
# test's PostgreSQL nodes and servers).

package LeaseFenceRedis;

use strict;
use warnings;

use Carp;
use File::Spec;
use IPC::Run;
use POSIX ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Scalar::Util qw(weaken);
use Test::More ();
use Time::HiRes qw(usleep);

# a program: the environment's choice, else the first on PATH, else none
# (a test that needs it then fails at its start, naming it)
sub find_program
{
	my ($name, $env) = @_;
	return $ENV{$env} if defined $ENV{$env} && $ENV{$env} ne '';
	for my $dir (split /:/, $ENV{PATH} // '')
	{
		next if $dir eq '';
		return "$dir/$name" if -f "$dir/$name" && -x _;
	}
	die "LeaseFenceRedis: no $name on PATH ($ENV{PATH}); set $env\n";
}

our $REDIS_SERVER = find_program('redis-server', 'LF_REDIS_SERVER');
our $REDIS_CLI = find_program('redis-cli', 'LF_REDIS_CLI');

# every live server and proxy of this process, for END
my @live;
my $creator = $$;

# LeaseFenceRedis->new(%opts): start a private redis-server and wait for it.
#   requirepass => 'pw'   start with a password (cli() then authenticates)
#   extra => [ ... ]      more redis-server arguments
sub new
{
	my ($class, %opts) = @_;

	# absolute: redis-server chdirs to --dir, and the socket path goes into
	# postgresql.conf
	my $dir = File::Spec->rel2abs(PostgreSQL::Test::Utils::tempdir('redis'));
	# a unix socket path must fit in sun_path (108 bytes)
	$dir = File::Spec->rel2abs(PostgreSQL::Test::Utils::tempdir_short())
	  if length("$dir/redis.sock") > 100;

	my $self = bless {
		dir => $dir,
		socket => "$dir/redis.sock",
		port => PostgreSQL::Test::Cluster::get_free_port(),
		logfile => "$dir/redis.log",
		password => $opts{requirepass},
		extra => $opts{extra} || [],
		pid => undef,
		proxies => [],
		opts => \%opts,
	}, $class;
	push @live, $self;
	weaken($live[-1]);

	$self->start;
	return $self;
}

sub dir { return $_[0]->{dir}; }
sub socket_path { return $_[0]->{socket}; }
sub port { return $_[0]->{port}; }
sub pid { return $_[0]->{pid}; }
sub logfile { return $_[0]->{logfile}; }

# The password cli() authenticates with (undef: none).  Changing it here does
# not change the server; use cli('CONFIG', 'SET', 'requirepass', ...) too.
sub password
{
	my ($self, @pw) = @_;
	$self->{password} = $pw[0] if @pw;
	return $self->{password};
}

# The command that runs this server (a subclass runs another)
sub _command
{
	my ($self) = @_;
	return (
		$REDIS_SERVER,
		'--port' => $self->{port},
		'--bind' => '127.0.0.1',
		'--unixsocket' => $self->{socket},
		'--unixsocketperm' => '700',
		'--dir' => $self->{dir},
		'--logfile' => $self->{logfile},
		'--save' => '',
		'--appendonly' => 'no',
		'--daemonize' => 'no',
		'--enable-debug-command' => 'local',
		'--protected-mode' => 'yes',
		# as a master, a replica's full sync starts at once, not after
		# Redis's default 5 s wait for more replicas: the replication tests
		# wait for their replicas to sync
		'--repl-diskless-sync-delay' => '0',
		defined $self->{password} ? ('--requirepass' => $self->{password}) : (),
		@{ $self->{extra} });
}

# Start the server in the background (again, after stop: same socket and
# port, and, without persistence, no keys) and wait until it answers PING.
sub start
{
	my ($self) = @_;
	my @cmd = $self->_command;
	my $what = $cmd[0] =~ s{.*/}{}r;
	croak "$what already running (pid $self->{pid})" if $self->{pid};

	my $pid = fork();
	croak "fork failed: $!" unless defined $pid;
	if ($pid == 0)
	{
		# child: become the server; never return into the test's code
		open(STDIN, '<', File::Spec->devnull);
		open(STDOUT, '>>', $self->{logfile});
		open(STDERR, '>&', \*STDOUT);
		exec(@cmd) or POSIX::_exit(127);
	}
	$self->{pid} = $pid;

	# wait for PING (redis-cli on _cli_target): up to the usual TAP timeout
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	while (1)
	{
		my $got = waitpid($pid, POSIX::WNOHANG());
		if ($got == $pid)
		{
			$self->{pid} = undef;
			croak "$what exited at start (status $?), see $self->{logfile}:\n"
			  . _tail($self->{logfile});
		}
		my ($out) = $self->_run_cli(5, 'PING');
		last if defined $out && $out =~ /^PONG/;
		croak "$what did not answer PING, see $self->{logfile}:\n"
		  . _tail($self->{logfile})
		  if time() > $deadline;
		usleep(50_000);
	}
	Test::More::note "$what pid $pid on 127.0.0.1:$self->{port} (redis-cli "
	  . join(' ', $self->_cli_target) . ')';
	return $self;
}

# Stop redis-server (SIGTERM; without persistence nothing is saved) and reap
# it.  The socket file is gone afterwards, the TCP port closed.
sub stop
{
	my ($self) = @_;
	my $pid = $self->{pid};
	return unless $pid;
	kill 'TERM', $pid;
	my $deadline = time() + 30;
	while (waitpid($pid, POSIX::WNOHANG()) == 0)
	{
		if (time() > $deadline)
		{
			kill 'KILL', $pid;
			waitpid($pid, 0);
			last;
		}
		usleep(20_000);
	}
	$self->{pid} = undef;
	unlink $self->{socket};
	return;
}

# redis-cli -s <socket> @args; returns stdout without the final newline
# (raw output: a nil reply is an empty string).  Dies if redis-cli fails.
# In list context returns (stdout, stderr).
sub cli
{
	my ($self, @args) = @_;
	my ($out, $err, $ok) = $self->_run_cli(60, @args);
	croak "redis-cli @args failed: $err" unless $ok;
	return wantarray ? ($out, $err) : $out;
}

# where redis-cli connects: this server's unix socket
sub _cli_target { return ('-s', $_[0]->{socket}); }

# (stdout, stderr, success) of one redis-cli run, never dies
sub _run_cli
{
	my ($self, $timeout, @args) = @_;
	my @cmd = ($REDIS_CLI, $self->_cli_target);
	push @cmd, '--no-auth-warning', '-a', $self->{password}
	  if defined $self->{password};
	my ($in, $out, $err) = ('', '', '');
	my $ok = eval {
		IPC::Run::run([ @cmd, @args ], '<', \$in,
			'>', \$out, '2>', \$err, IPC::Run::timeout($timeout));
	};
	$err .= $@ if $@;
	$out =~ s/\n\z//;
	return ($out, $err, $ok ? 1 : 0);
}

# $redis->node($name, @conf_lines): a started PostgreSQL::Test::Cluster
# node whose lease helper talks to this server over its unix socket, and
# lease_fence created in database postgres.  Extra postgresql.conf lines go
# after ours.
#
# Its command and cleanup timeouts are $TIMEOUT_MS (2 s): long enough that a
# test that is not about timeouts never sees "unknown" or "unconfirmed"
# because a loaded machine answered slowly (at 300 ms, CI's did), short
# enough that one that freezes Redis still finishes soon.  A test about
# timeouts sets its own (lease_fence.command_timeout_ms = 300 in its node's
# lines, or SET in the session), shorter than its pause or held reply.
our $TIMEOUT_MS = 2000;

sub node
{
	my ($self, $name, @conf) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	$node->append_conf('postgresql.conf',
		join("\n",
			"lease_fence.redis_socket = '$self->{socket}'",
			"lease_fence.command_timeout_ms = $TIMEOUT_MS",
			"lease_fence.cleanup_timeout_ms = $TIMEOUT_MS",
			@conf)
		  . "\n");
	$node->start;
	$node->safe_psql('postgres', 'CREATE EXTENSION lease_fence');
	return $node;
}

# A reply-holding proxy in front of this server's TCP port.
sub proxy
{
	my ($self, %opts) = @_;
	my $proxy = LeaseFenceRedis::Proxy->new(
		upstream_port => $self->{port},
		dir => $self->{dir},
		%opts);
	push @{ $self->{proxies} }, $proxy;
	return $proxy;
}

sub _tail
{
	my ($file) = @_;
	return '' unless -f $file;
	my $text = PostgreSQL::Test::Utils::slurp_file($file);
	my @lines = split /\n/, $text;
	splice(@lines, 0, @lines - 20) if @lines > 20;
	return join("\n", @lines) . "\n";
}

sub _kill_all
{
	my ($self) = @_;
	return unless $$ == $creator;
	$_->stop for grep { defined } @{ $self->{proxies} || [] };
	$self->stop;
	return;
}

sub DESTROY
{
	my ($self) = @_;
	local ($., $@, $!, $^E, $?);
	$self->_kill_all;
	return;
}

END
{
	local $?;
	if ($$ == $creator)
	{
		for my $obj (@live)
		{
			$obj->_kill_all if defined $obj;
		}
	}
}


# LeaseFenceRedis::Proxy — forwards 127.0.0.1:port to 127.0.0.1:upstream_port.
#
# Requests (client → Redis) are forwarded at once, always.  Replies
# (Redis → client) are forwarded at once, except in hold mode, where each
# reply is queued and forwarded hold_ms after it arrived (order kept).  A
# client that hangs up meanwhile never gets it — but Redis applied the
# command: "applied, reply lost".
#
# The mode lives in a file (the forked proxy polls it), set with hold():
#   'off'    forward replies at once
#   'all'    hold the replies of every connection
#   'first'  hold the replies of one connection only: the first one that
#            sends a request after the mode was set; every other connection
#            (e.g. a fresh one for a cleanup) is served at once
package LeaseFenceRedis::Proxy;

use strict;
use warnings;

use Carp;
use IO::Select;
use IO::Socket::INET;
use LeaseFenceLoopback;
use POSIX ();
use PostgreSQL::Test::Cluster;
use Test::More ();
use Time::HiRes qw(time usleep);


sub new
{
	my ($class, %opts) = @_;
	my $self = bless {
		upstream_port => $opts{upstream_port},
		hold_ms => $opts{hold_ms} // 1500,
		port => undef,
		pid => undef,
		flagfile => undef,
		logfile => undef,
	}, $class;

	# bind in the parent, so the port is ours before anything connects
	my ($listener, $port) = loopback_listener('proxy');
	$self->{port} = $port;

	$self->{flagfile} = "$opts{dir}/proxy-$self->{port}.mode";
	$self->{logfile} = "$opts{dir}/proxy-$self->{port}.log";
	$self->hold('off');

	my $parent = $$;
	my $pid = fork();
	croak "fork failed: $!" unless defined $pid;
	if ($pid == 0)
	{
		my $rc = eval { $self->_serve($listener, $parent); 0 } // 1;
		if ($@)
		{
			if (open(my $log, '>>', $self->{logfile}))
			{
				print $log "proxy died: $@";
				close $log;
			}
		}
		POSIX::_exit($rc);
	}
	close $listener;
	$self->{pid} = $pid;
	register_server($self);
	Test::More::note "reply-holding proxy pid $pid on 127.0.0.1:$self->{port} -> 127.0.0.1:$self->{upstream_port}";
	return $self;
}

sub port { return $_[0]->{port}; }
sub pid { return $_[0]->{pid}; }
sub hold_ms { return $_[0]->{hold_ms}; }
sub logfile { return $_[0]->{logfile}; }

# Set the mode: 'off', 'all' or 'first' (see above).  Takes effect for the
# next bytes the proxy reads (it reads the file for every request).
sub hold
{
	my ($self, $mode) = @_;
	croak "proxy: bad mode $mode" unless $mode =~ /^(off|all|first)$/;
	# a counter, so that setting 'first' again re-arms it
	$self->{settings}++;
	write_mode($self->{flagfile}, "$mode $self->{settings}");
	return;
}

# How many connections the proxy has accepted so far (from its log).
sub connections
{
	my ($self) = @_;
	return 0 unless -f $self->{logfile};
	my $text = PostgreSQL::Test::Utils::slurp_file($self->{logfile});
	my @n = $text =~ /^accept /mg;
	return scalar @n;
}

sub stop { stop_server($_[0]); return; }

sub DESTROY { local ($., $@, $!, $^E, $?); $_[0]->stop; return; }

sub _read_mode { return read_mode($_[0]->{flagfile}, 'off'); }

# The forked proxy's loop.  Never returns normally; the parent kills it.
sub _serve
{
	my ($self, $listener, $parent) = @_;
	my $hold_s = $self->{hold_ms} / 1000.0;
	my $sel = IO::Select->new($listener);
	my %peer;      # fileno => the other socket of the pair
	my %conn;      # fileno of the client socket => connection state
	my %is_client; # fileno => 1 for client sockets
	my $seq = 0;
	my $first_taken;  # 'first' mode: the connection chosen, per mode setting
	my $last_mode = '';

	open(my $log, '>>', $self->{logfile}) or die "log: $!";
	$log->autoflush(1);

	my $close_pair = sub {
		my ($cfd) = @_;
		my $c = delete $conn{$cfd} or return;
		for my $s ($c->{client}, $c->{upstream})
		{
			delete $peer{ fileno($s) } if defined fileno($s);
			delete $is_client{ fileno($s) } if defined fileno($s);
			$sel->remove($s);
			close $s;
		}
		print $log "close $c->{id} (dropped "
		  . scalar(@{ $c->{queue} }) . " held replies)\n";
	};

	while (1)
	{
		POSIX::_exit(0) if getppid() != $parent;

		# forward replies whose hold time is over
		my $now = time();
		my $next_due;
		for my $cfd (keys %conn)
		{
			my $c = $conn{$cfd};
			while (@{ $c->{queue} } && $c->{queue}[0][0] <= $now)
			{
				my $item = shift @{ $c->{queue} };
				print $log "release $c->{id} " . length($item->[1]) . " bytes\n";
				_write_all($c->{client}, $item->[1]) or do { $close_pair->($cfd); last; };
			}
			next unless $conn{$cfd};
			if (@{ $c->{queue} })
			{
				my $due = $c->{queue}[0][0];
				$next_due = $due if !defined $next_due || $due < $next_due;
			}
		}
		my $wait = 0.2;
		if (defined $next_due)
		{
			$wait = $next_due - time();
			$wait = 0 if $wait < 0;
			$wait = 0.2 if $wait > 0.2;
		}

		for my $s ($sel->can_read($wait))
		{
			if ($s == $listener)
			{
				my $client = $listener->accept or next;
				my $up = IO::Socket::INET->new(
					PeerAddr => '127.0.0.1',
					PeerPort => $self->{upstream_port},
					Proto => 'tcp');
				if (!$up)
				{
					print $log "accept: upstream connect failed: $!\n";
					close $client;
					next;
				}
				my $id = ++$seq;
				$conn{ fileno($client) } = {
					id => $id,
					client => $client,
					upstream => $up,
					queue => [],
					held => 0,
				};
				$peer{ fileno($client) } = $up;
				$peer{ fileno($up) } = $client;
				$is_client{ fileno($client) } = 1;
				$sel->add($client, $up);
				print $log "accept $id\n";
				next;
			}

			my $fd = fileno($s);
			next unless defined $fd && $peer{$fd};
			my $cfd = $is_client{$fd} ? $fd : fileno($peer{$fd});
			my $c = $conn{$cfd} or next;

			my $buf;
			my $n = sysread($s, $buf, 65536);
			if (!$n)
			{
				print $log ($is_client{$fd} ? 'client' : 'upstream')
				  . " eof $c->{id}\n";
				$close_pair->($cfd);
				next;
			}

			if ($is_client{$fd})
			{
				# a request: decide whether this connection's replies are held
				# (a new setting applies to requests from now on)
				my $setting = $self->_read_mode;
				if ($setting ne $last_mode)
				{
					$first_taken = undef;
					$last_mode = $setting;
					$_->{held} = 0 for values %conn;
				}
				my ($mode) = split ' ', $setting;
				if ($mode eq 'all')
				{
					$c->{held} = 1;
				}
				elsif ($mode eq 'first' && !defined $first_taken)
				{
					$first_taken = $c->{id};
					$c->{held} = 1;
				}
				print $log "request $c->{id} " . length($buf) . " bytes"
				  . ($c->{held} ? " (replies held)" : "") . "\n";
				_write_all($c->{upstream}, $buf) or $close_pair->($cfd);
			}
			else
			{
				# a reply: hold it, or keep it behind held ones, or pass it
				if ($c->{held} || @{ $c->{queue} })
				{
					my $due = time() + ($c->{held} ? $hold_s : 0);
					push @{ $c->{queue} }, [ $due, $buf ];
					print $log "hold $c->{id} " . length($buf) . " bytes\n";
				}
				else
				{
					_write_all($c->{client}, $buf) or $close_pair->($cfd);
				}
			}
		}
	}
}

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

1;

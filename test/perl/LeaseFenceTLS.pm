# LeaseFenceTLS.pm — certificates and TLS redis-servers for lease_fence's TAP
# tests, and a silent TCP listener.
#
#   my $pki = LeaseFenceTLS->new;                      # a temp dir of the test
#   my $ca = $pki->ca('ca');                           # ca.crt, ca.key
#   my ($crt, $key) = $pki->cert($ca, 'server', san => 'DNS:localhost,IP:127.0.0.1');
#   my $redis = $pki->redis(cert => 'server', ca => 'ca', auth_clients => 'no');
#   $redis->tls_port;                                  # its TLS port on 127.0.0.1
#   my $l = LeaseFenceTLS::Listener->new($dir);        # accepts, records, never answers
#
# Certificates are made by the openssl command line tool; every key file is
# mode 0600.  The TLS servers are the real redis-server (found on PATH), through
# LeaseFenceRedis (its unix socket and plain port stay, so cli() works).

package LeaseFenceTLS;

use strict;
use warnings;

use Carp;
use File::Spec;
use IPC::Run;
use LeaseFenceRedis;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;

sub new
{
	my ($class) = @_;
	my $dir = File::Spec->rel2abs(PostgreSQL::Test::Utils::tempdir('pki'));
	return bless { dir => $dir }, $class;
}

sub dir { return $_[0]->{dir}; }
sub crt { return "$_[0]->{dir}/$_[1].crt"; }
sub key { return "$_[0]->{dir}/$_[1].key"; }

sub _openssl
{
	my ($self, @args) = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'openssl', @args ], '<', \'', '>', \$out, '2>', \$err)
	  or croak "openssl @args failed: $err";
	return $out;
}

# a self-signed certificate authority: $name.crt and $name.key
sub ca
{
	my ($self, $name) = @_;
	$self->_openssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2',
		'-subj', "/CN=lease_fence test $name",
		'-keyout', $self->key($name), '-out', $self->crt($name));
	chmod 0600, $self->key($name);
	return $name;
}

# a certificate signed by CA $ca: $name.crt and $name.key; san (e.g.
# 'DNS:localhost,IP:127.0.0.1') for a server, none for a client
sub cert
{
	my ($self, $ca, $name, %o) = @_;
	my $csr = "$self->{dir}/$name.csr";
	my $ext = "$self->{dir}/$name.ext";
	$self->_openssl('req', '-newkey', 'rsa:2048', '-nodes', '-subj', "/CN=$name",
		'-keyout', $self->key($name), '-out', $csr);
	chmod 0600, $self->key($name);
	PostgreSQL::Test::Utils::append_to_file($ext,
		defined $o{san}
		? "subjectAltName=$o{san}\nextendedKeyUsage=serverAuth\n"
		: "extendedKeyUsage=clientAuth\n");
	$self->_openssl('x509', '-req', '-in', $csr, '-CA', $self->crt($ca),
		'-CAkey', $self->key($ca), '-CAcreateserial', '-days', '2',
		'-extfile', $ext, '-out', $self->crt($name));
	return ($self->crt($name), $self->key($name));
}

# a started redis-server with a TLS port (on 127.0.0.1) serving cert $cert,
# trusting CA $ca for client certificates; auth_clients: no | yes | optional
sub redis
{
	my ($self, %o) = @_;
	my $port = PostgreSQL::Test::Cluster::get_free_port();
	my $redis = LeaseFenceRedis->new(extra => [
		'--tls-port' => $port,
		'--tls-cert-file' => $self->crt($o{cert}),
		'--tls-key-file' => $self->key($o{cert}),
		'--tls-ca-cert-file' => $self->crt($o{ca}),
		'--tls-auth-clients' => $o{auth_clients} // 'no' ]);
	$redis->{tls_port} = $port;
	return $redis;
}

package LeaseFenceRedis;

sub tls_port { return $_[0]->{tls_port}; }

# LeaseFenceTLS::Listener — listens on a free 127.0.0.1 port, accepts every
# connection and appends whatever it receives to a file, never answering: a
# TLS handshake against it waits until its deadline.  The bytes show what a
# client sent in clear (a ClientHello carries the SNI host name).
package LeaseFenceTLS::Listener;

use strict;
use warnings;

use Carp;
use IO::Select;
use IO::Socket::INET;
use POSIX ();
use PostgreSQL::Test::Utils;

my $creator = $$;
my @live;

sub new
{
	my ($class, $dir) = @_;
	my $listener;
	my $port;
	for (1 .. 20)
	{
		$port = PostgreSQL::Test::Cluster::get_free_port();
		$listener = IO::Socket::INET->new(
			LocalAddr => '127.0.0.1',
			LocalPort => $port,
			Proto => 'tcp',
			Listen => 16,
			ReuseAddr => 1) and last;
	}
	croak "listener: no free port: $!" unless $listener;
	my $self = bless { port => $port, file => "$dir/listener-$port.bytes" }, $class;
	$self->clear;
	my $pid = fork();
	croak "fork failed: $!" unless defined $pid;
	if ($pid == 0)
	{
		my $sel = IO::Select->new($listener);
		my @keep;
		while (1)
		{
			for my $s ($sel->can_read(0.2))
			{
				if ($s == $listener)
				{
					my $c = $listener->accept or next;
					push @keep, $c;
					$sel->add($c);
					next;
				}
				my $buf;
				my $n = sysread($s, $buf, 65536);
				if (!$n)
				{
					$sel->remove($s);
					close $s;
					next;
				}
				if (open(my $fh, '>>', $self->{file}))
				{
					binmode $fh;
					print $fh $buf;
					close $fh;
				}
			}
		}
	}
	close $listener;
	$self->{pid} = $pid;
	push @live, $self;
	Scalar::Util::weaken($live[-1]);
	return $self;
}

sub port { return $_[0]->{port}; }

# what it received so far, all connections together
sub bytes
{
	my ($self) = @_;
	open(my $fh, '<', $self->{file}) or return '';
	binmode $fh;
	local $/;
	my $b = <$fh> // '';
	close $fh;
	return $b;
}

sub clear
{
	my ($self) = @_;
	open(my $fh, '>', $self->{file}) or croak "listener: $self->{file}: $!";
	close $fh;
	return;
}

sub stop
{
	my ($self) = @_;
	return unless $self->{pid} && $$ == $creator;
	kill 'KILL', $self->{pid};
	waitpid($self->{pid}, 0);
	$self->{pid} = undef;
	return;
}

sub DESTROY { my ($self) = @_; local ($., $@, $!, $^E, $?); $self->stop; return; }

END
{
	local $?;
	if ($$ == $creator) { $_->stop for grep { defined } @live; }
}

1;

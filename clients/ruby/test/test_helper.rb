# frozen_string_literal: true

# Shared by the tests against real servers (test/clients/run.sh starts
# them): PostgreSQL at PGHOST/PGPORT/PGDATABASE as PGUSER (role app, which
# takes leases but owns none of the fenced tables), the same server as
# LF_NOREDIS_USER (whose Redis socket does not exist), and Redis at
# LF_REDIS_SOCK — the tests' "admin" side, used to make a lease expire.
require "minitest/autorun"
require "securerandom"
require "tmpdir"
require "timeout"
require "redis"
require "lease_fence"

if ENV["LF_EXPECT_INSTALLED"]
  spec = Gem.loaded_specs["lease_fence"]
  home = ENV.fetch("GEM_HOME")
  unless spec && spec.full_gem_path.start_with?(home) && $LOADED_FEATURES.any? { |f| f.start_with?(spec.full_gem_path) }
    abort "lease_fence was not loaded from the installed gem in #{home}"
  end
end

module LFTest
  KEY_PREFIX = "lease_fence:"
  # a generation key's value that is no generation, longer than any (the
  # script compares by length first: a shorter one is below a generation of
  # more digits, once the generations have moved past it)
  CORRUPT_GENERATION = "x" * 20

  module_function

  # COMMIT of a transaction-scoped lease asks Redis only near the lease's
  # expiry by the backend's clock (lease_fence.commit_check = near_expiry);
  # the tests make a young lease expire in Redis (PEXPIRE), so their
  # sessions ask at every COMMIT: no waiting for the clock
  COMMIT_CHECK = "always"

  def connect(user: ENV.fetch("PGUSER"))
    PG.connect(host: ENV.fetch("PGHOST"), port: ENV.fetch("PGPORT"), dbname: ENV.fetch("PGDATABASE"),
               user: user, options: "-c lease_fence.commit_check=#{COMMIT_CHECK}")
  end

  def active_record_config
    { adapter: "postgresql", host: ENV.fetch("PGHOST"), port: ENV.fetch("PGPORT"),
      database: ENV.fetch("PGDATABASE"), username: ENV.fetch("PGUSER"), pool: 10,
      variables: { "lease_fence.commit_check" => COMMIT_CHECK } }
  end

  def redis
    @redis ||= Redis.new(path: ENV.fetch("LF_REDIS_SOCK"))
  end

  def lease_key(resource)
    "#{KEY_PREFIX}{#{resource}}"
  end

  def resource(tag)
    "rb:#{tag}:#{SecureRandom.hex(4)}"
  end

  # the lease expires now (PEXPIRE 1), and the test waits until the key is gone
  def expire(resource)
    key = lease_key(resource)
    raise "no lease key #{key}" unless redis.exists?(key)

    redis.pexpire(key, 1)
    Timeout.timeout(30) { sleep 0.01 while redis.exists?(key) }
  end

  # waits (30 s at most) until the block is true: for the server's
  # background work, never a timed assertion
  def wait_until(what)
    Timeout.timeout(30, RuntimeError, "timed out waiting for #{what}") { sleep 0.02 until yield }
  end

  def new_account(conn, owner = "nobody", balance = 0)
    conn.exec_params("INSERT INTO account (owner, balance) VALUES ($1, $2) RETURNING id",
                     [owner, balance]).getvalue(0, 0).to_i
  end

  # lease_fence.queue(resource) (granted to app by the harness): [position,
  # pid] of each waiter, position 1 first
  def queue(resource)
    @queue_conn ||= connect
    @queue_conn.exec_params("SELECT position, pid FROM lease_fence.queue($1) ORDER BY position", [resource])
          .map { |r| [r["position"].to_i, r["pid"]&.to_i] }
  end

  # until +n+ waiters are queued for +resource+
  def wait_queued(resource, n)
    wait_until("#{n} waiter(s) queued for #{resource}") { queue(resource).size == n }
  end

  def account(conn, id)
    row = conn.exec_params("SELECT owner, balance, fence FROM account WHERE id = $1", [id]).first
    { owner: row["owner"], balance: row["balance"].to_i, fence: row["fence"]&.to_i }
  end
end

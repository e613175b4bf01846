# frozen_string_literal: true

require "pg"
require_relative "lease_fence/version"
require_relative "lease_fence/errors"
require_relative "lease_fence/lease"
require_relative "lease_fence/db"
require_relative "lease_fence/leadership"

# The Ruby client of lease_fence, the PostgreSQL extension that fences stale
# writers. Every verb takes a PG::Connection or an ActiveRecord connection
# (ActiveRecord::Base.connection) that is not in a transaction.
#
# Optional parts, loaded on request:
#   require "lease_fence/active_record"   # LeaseFence::Fenced, a model concern
#   require "lease_fence/sidekiq"         # LeaseFence::Sidekiq::Middleware
module LeaseFence
  module_function

  # Take an explicit-scope lease and return it (a Lease).
  #
  # Raises LeaseBusy / LeaseUnavailable / LeaseDenied (stale,
  # insufficient_validity, unreplicated) for a definite no, LeaseUnknown
  # when Redis may have granted it. +stale+ is retried once unless
  # +retry_stale+ is false. +wait_ms+ > 0: while the lease is busy, wait up to
  # that long; with +fair+: true, in the resource's queue, granted in the
  # order the waiters came (wait_ms 0: busy while anyone is queued too).
  # One statement on the idle connection. Release it yourself.
  def acquire(conn, resource, ttl_ms:, min_validity_ms: 0, wait_ms: 0, retry_stale: true, fair: false)
    Translate.acquired(acquire_alone(conn, resource, ttl_ms, min_validity_ms, wait_ms, retry_stale, fair))
  end

  # acquire, but nil when the lease is busy; acquire's exceptions otherwise.
  def try_acquire(conn, resource, ttl_ms:, min_validity_ms: 0, wait_ms: 0, retry_stale: true, fair: false)
    Translate.try_acquired(acquire_alone(conn, resource, ttl_ms, min_validity_ms, wait_ms, retry_stale, fair))
  end

  # Run the block in one transaction holding a transaction-scoped lease on
  # +resource+; yields the Lease (and the connection). Its generation fences
  # every write of the block (run them on +conn+); COMMIT verifies the lease
  # is still ours and releases it.
  #
  # A failed acquire raises its LeaseError before the block runs, the
  # transaction rolled back (stale is retried once, in the same
  # transaction); an exception in the block rolls back and propagates,
  # SQLSTATE LF001-LF004 as FenceError subclasses; a lease lost before
  # COMMIT raises LeaseLostAtCommit (LF010); a block that rescues a failed
  # statement's error (a refused write) and goes on raises
  # TransactionRolledBack: PostgreSQL rolls such a transaction back at
  # COMMIT, nothing of it is committed. With a PG::Connection, BEGIN and the
  # acquire go in one round trip. Returns the block's value.
  def job(conn, resource, ttl_ms:, min_validity_ms: 0, wait_ms: 0, fair: false, &block)
    lease_transaction(conn, resource, ttl_ms, min_validity_ms, wait_ms, false, fair, &block)
  end

  # job's guarantees; +keepalive+: true has the server renew the lease
  # while the transaction runs (needs shared_preload_libraries = 'lease_fence').
  def transaction_lease(conn, resource, ttl_ms:, min_validity_ms: 0, wait_ms: 0, keepalive: false, fair: false,
                        &block)
    lease_transaction(conn, resource, ttl_ms, min_validity_ms, wait_ms, keepalive, fair, &block)
  end

  # One transaction whose writes carry +lease+'s generation and fence its
  # resource: BEGIN; SELECT lease_fence.set_generation(generation, resource);
  # the block; COMMIT. +lease+ is a Lease, or a bare generation (an
  # Integer: rows only, unless +resource+ names one). A newer holder's fence
  # on the resource fails it with StaleGeneration before the block runs;
  # refused writes raise FenceError subclasses; the transaction is rolled
  # back (a block that rescues a refused write and goes on raises
  # TransactionRolledBack). Yields the connection; returns the block's value.
  def fenced(conn, lease, resource: nil)
    raise ArgumentError, "fenced needs a block" unless block_given?

    generation = lease
    if lease.is_a?(Lease)
      resource ||= lease.resource
      generation = lease.generation
    end
    check_generation(generation)
    raise ArgumentError, "a resource is a String, got #{resource.class}" unless resource.nil? || resource.is_a?(String)

    db = DB.for(conn)
    fence_errors do
      db.transaction(SET_GENERATION_SQL, [generation, resource]) { yield conn }
    end
  end

  # Hold a session-scoped lease that the server keeps alive while the block
  # runs (needs shared_preload_libraries = 'lease_fence'); yields a
  # KeptAliveLease, returns the block's value.
  #
  # acquire(..., scope => 'session', keepalive => true) on +conn+ (stale
  # retried once unless +retry_stale+ is false), then the block, then
  # release. Write under it with fenced(conn, lease): once the lease is lost
  # those writes (and their COMMIT) raise LeaseLostAtCommit (LF010).
  # +watch+ is *another* idle connection, used by lease.state / lost? /
  # check! (queries on the owner's connection make it look active). At
  # the end the lease is released; not_held there raises LeaseLost (it was
  # lost while the block ran). If the block raised, its exception
  # propagates unchanged (the lease is released all the same).
  def kept_alive_lease(conn, resource, ttl_ms:, min_validity_ms: 0, wait_ms: 0, watch: nil, retry_stale: true,
                       fair: false)
    raise ArgumentError, "kept_alive_lease needs a block" unless block_given?
    if !watch.nil? && watch.equal?(conn)
      raise ArgumentError, "watch must be another connection than the lease owner's: queries on " \
                           "the owner's connection make it look active"
    end

    params = acquire_params(resource, ttl_ms, min_validity_ms, "session", wait_ms, true, fair)
    db = DB.for(conn)
    DB.for(watch) unless watch.nil? # a type error now rather than at the first check
    row = Lease.from_row(db.alone(ACQUIRE_SQL, params))
    row = Lease.from_row(db.alone(ACQUIRE_SQL, params)) if row.status == "stale" && retry_stale
    lease = KeptAliveLease.new(**Translate.acquired(row).to_h)
    lease.watch = watch
    begin
      result = yield lease
    rescue Exception # rubocop:disable Lint/RescueException
      begin
        release(conn, lease)
      rescue StandardError
        nil # keep the block's exception
      end
      raise
    end
    if release(conn, lease) == "not_held"
      raise LeaseLost.new("lost", lease, "kept-alive lease #{resource.inspect} was lost before the " \
                                         "block ended (release: not_held)")
    end
    result
  end

  # lease_fence.keepalive_state: "active", "lost" or nil (no longer kept
  # alive), asked on +watch+, a connection other than the lease owner's.
  def keepalive_state(watch, lease)
    identity = lease.is_a?(Lease) ? lease.identity : lease
    raise ArgumentError, "an identity is a String, got #{identity.inspect}" unless identity.is_a?(String)

    DB.for(watch).alone(KEEPALIVE_STATE_SQL, [identity])["state"]
  end

  # Extend an explicit lease to +ttl_ms+; returns the validity in ms.
  # Raises LeaseLost (gone or someone else's: never recreated), LeaseDenied
  # (insufficient_validity, unreplicated), LeaseUnavailable, LeaseUnknown.
  def renew(conn, lease, ttl_ms:, min_validity_ms: 0)
    check_lease(lease)
    check_ms(ttl_ms, "ttl_ms", 1)
    check_ms(min_validity_ms, "min_validity_ms", 0)
    row = DB.for(conn).alone(RENEW_SQL, [lease.resource, lease.identity, ttl_ms, min_validity_ms])
    Translate.renewed(Lease.bool(row["renewed"]), row["status"], lease, Lease.int(row["validity_ms"]),
                      row["reason"])
  end

  # Release an explicit lease if it still holds lease.identity. Returns the
  # status, a ReleaseStatus ("released", "not_held", "unavailable",
  # "unknown"; +reason+ why for the last two). Never raises for an outcome.
  def release(conn, lease)
    check_lease(lease)
    row = DB.for(conn).alone(RELEASE_SQL, [lease.resource, lease.identity])
    Translate.released(row["status"], row["reason"])
  end

  # ------------------------------------------------------------------
  # helpers
  # ------------------------------------------------------------------

  def acquire_params(resource, ttl_ms, min_validity_ms, scope, wait_ms, keepalive, fair)
    raise ArgumentError, "a resource is a non-empty String, got #{resource.inspect}" unless
      resource.is_a?(String) && !resource.empty?

    check_ms(ttl_ms, "ttl_ms", 1)
    check_ms(min_validity_ms, "min_validity_ms", 0)
    check_ms(wait_ms, "wait_ms", 0)
    check_fair(fair)
    [resource, ttl_ms, min_validity_ms, scope, wait_ms, keepalive ? true : false, fair]
  end

  def acquire_alone(conn, resource, ttl_ms, min_validity_ms, wait_ms, retry_stale, fair)
    params = acquire_params(resource, ttl_ms, min_validity_ms, "explicit", wait_ms, false, fair)
    db = DB.for(conn)
    lease = Lease.from_row(db.alone(ACQUIRE_SQL, params))
    # stale wrote nothing in Redis and moved next_generation() past the
    # stored one: one more try with a fresh generation is safe
    lease = Lease.from_row(db.alone(ACQUIRE_SQL, params)) if lease.status == "stale" && retry_stale
    lease
  end

  def lease_transaction(conn, resource, ttl_ms, min_validity_ms, wait_ms, keepalive, fair)
    raise ArgumentError, "a lease transaction needs a block" unless block_given?

    params = acquire_params(resource, ttl_ms, min_validity_ms, "transaction", wait_ms, keepalive, fair)
    db = DB.for(conn)
    fence_errors do
      db.transaction(ACQUIRE_SQL, params) do |row|
        lease = Lease.from_row(row)
        lease = Lease.from_row(db.query_one(ACQUIRE_SQL, params)) if lease.status == "stale"
        yield Translate.acquired(lease), conn
      end
    end
  end

  def check_ms(value, name, min)
    return if value.is_a?(Integer) && value >= min

    raise ArgumentError, "#{name} is an Integer >= #{min}, got #{value.inspect}"
  end

  def check_fair(value)
    return if [true, false].include?(value)

    raise ArgumentError, "fair is true or false, got #{value.inspect}"
  end

  def check_generation(value)
    return if value.is_a?(Integer) && value >= 0

    raise ArgumentError, "a generation is a non-negative Integer (or a Lease), got #{value.inspect}"
  end

  def check_lease(lease)
    return if lease.is_a?(Lease) && lease.resource.is_a?(String) && lease.identity.is_a?(String)

    raise ArgumentError, "expected a held LeaseFence::Lease, got #{lease.inspect}"
  end

  private_class_method :acquire_params, :acquire_alone, :lease_transaction, :check_ms,
                       :check_generation, :check_lease, :check_fair
end

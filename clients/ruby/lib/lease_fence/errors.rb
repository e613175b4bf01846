# frozen_string_literal: true

require "pg"

module LeaseFence
  # A write or COMMIT that lease_fence refused (SQLSTATE class LF).
  #
  # +sqlstate+, +message+ and +detail+ come from the server; the driver's
  # exception is +cause+. +schema+, +table+ and +column+ name the refused
  # row's table and fence column; +resource+ names a refused resource fence.
  # Each is nil when the server did not send it: they are the error's
  # fields, never parsed from the message. Not retryable with the same
  # generation.
  class FenceError < StandardError
    SQLSTATE = "LF000"
    attr_reader :detail, :schema, :table, :column, :resource

    def self.sqlstate
      self::SQLSTATE
    end

    def initialize(message = nil, detail: nil, schema: nil, table: nil, column: nil, resource: nil)
      message ||= self.class.name
      super(detail ? "#{message} (#{detail})" : message)
      @primary = message
      @detail = detail
      @schema = schema
      @table = table
      @column = column
      @resource = resource
    end

    def sqlstate
      self.class.sqlstate
    end

    # the server's primary message, without the detail
    def primary_message
      @primary
    end
  end

  # LF001: the row (or the resource) holds a newer generation than the one supplied.
  class StaleGeneration < FenceError
    SQLSTATE = "LF001"
  end

  # LF002: a strict table written without a current generation, or a NULL fence.
  class MissingGeneration < FenceError
    SQLSTATE = "LF002"
  end

  # LF003: the statement wrote a fence value other than the current generation.
  class ConflictingGeneration < FenceError
    SQLSTATE = "LF003"
  end

  # LF004: the supplied generation was never issued by this database.
  class UnissuedGeneration < FenceError
    SQLSTATE = "LF004"
  end

  # LF010: the lease this transaction wrote under was lost: the write or
  # COMMIT was refused and the transaction rolled back. Acquire again (a new
  # generation) and redo the work.
  class LeaseLostAtCommit < FenceError
    SQLSTATE = "LF010"
  end

  # The transaction did not commit: a statement in it failed, the block
  # rescued its error and went on (a refused write, say), and PostgreSQL
  # answers the COMMIT of such a transaction with ROLLBACK. It was rolled
  # back: nothing of it was committed and a transaction-scoped lease was
  # released with it, so never treat the work as done. job,
  # transaction_lease and fenced raise it instead of returning (and the
  # Sidekiq middleware, so the job is retried, not marked done). Not a
  # FenceError. +cause+: on an ActiveRecord connection, the error of the
  # statement that failed the transaction (a FenceError when it was a
  # refused write), from ActiveRecord's notifications; nil on a
  # PG::Connection, where the library does not see the block's errors.
  class TransactionRolledBack < StandardError
    MESSAGE = "lease_fence: the transaction was rolled back at COMMIT: a statement in it failed " \
              "and its error was rescued; nothing of it was committed"

    def initialize(message = MESSAGE)
      super
    end
  end

  FENCE_ERRORS = [StaleGeneration, MissingGeneration, ConflictingGeneration,
                  UnissuedGeneration, LeaseLostAtCommit].to_h { |c| [c.sqlstate, c] }.freeze

  # A lease operation that did not succeed. +status+ is the extension's
  # status, +lease+ the Lease concerned (for acquire, the row returned),
  # +reason+ why, for unavailable, unknown and unreplicated (nil otherwise).
  class LeaseError < StandardError
    attr_reader :status, :lease, :reason

    def initialize(status, lease, message, reason = nil)
      super(reason ? "#{message} (#{reason})" : message)
      @status = status
      @lease = lease
      @reason = reason
    end
  end

  # A definite no: busy, unavailable, stale, insufficient_validity, unreplicated, lost.
  class LeaseDenied < LeaseError; end

  # Someone else holds the lease.
  class LeaseBusy < LeaseDenied; end

  # Redis was unreachable or refused the request: definitely not applied.
  class LeaseUnavailable < LeaseDenied; end

  # The lease is no longer ours (renew: the key is gone or someone else's).
  class LeaseLost < LeaseDenied; end

  # acquired / renewed IS NULL: the request may have been applied. Not a
  # LeaseDenied: do not work, and do not treat the resource as free.
  # Releasing +lease+ is safe (conditional).
  class LeaseUnknown < LeaseError; end

  LEASE_ERRORS = { "busy" => LeaseBusy, "unavailable" => LeaseUnavailable,
                   "lost" => LeaseLost, "unknown" => LeaseUnknown }.freeze

  # SQLSTATE XX001, data corrupted: a key in Redis holds what lease_fence
  # never writes there (a generation key that is no generation, one far
  # above what the database issued, an oversized value). Nothing was
  # acquired, and no retry helps: a person must look at the key. Raised by
  # the verbs for the server's XX001 (the driver's exception is +cause+);
  # a PG::DataCorrupted, as before the library named it, with its +result+.
  # Not a LeaseError. Python and Node.js call it DataCorrupted too.
  class DataCorrupted < PG::DataCorrupted
    SQLSTATE = "XX001"

    def sqlstate
      SQLSTATE
    end
  end

  # The DataCorrupted for an exception carrying SQLSTATE XX001 (a PG::Error,
  # or an ActiveRecord::StatementInvalid raised for one), else nil.
  def self.data_corrupted_from(exc)
    return exc if exc.is_a?(DataCorrupted)

    err = exc
    4.times do
      break if err.nil?

      result = err.respond_to?(:result) ? err.result : nil
      if result.respond_to?(:error_field)
        return nil unless result.error_field(PG::PG_DIAG_SQLSTATE) == DataCorrupted::SQLSTATE

        return DataCorrupted.new(err.message, connection: err.connection, result: result)
      end
      err = err.cause
    end
    nil
  end

  # Runs the block (the library's own statements); an exception carrying
  # SQLSTATE XX001 is raised again as DataCorrupted (the original is its
  # +cause+), anything else passes unchanged.
  def self.data_corrupted_errors
    yield
  rescue StandardError => e
    mapped = data_corrupted_from(e)
    raise if mapped.nil? || mapped.equal?(e)

    raise mapped
  end

  # The FenceError for an exception carrying SQLSTATE LF001-LF004 or LF010
  # (a PG::Error, or an ActiveRecord::StatementInvalid raised for one), else
  # nil. Reads the SQLSTATE and the error fields, never the message text.
  def self.fence_error_from(exc)
    return exc if exc.is_a?(FenceError)
    return nil if exc.is_a?(TransactionRolledBack) # its cause is what failed: it stays what it is

    err = exc
    4.times do
      break if err.nil?

      result = err.respond_to?(:result) ? err.result : nil
      if result.respond_to?(:error_field)
        cls = FENCE_ERRORS[result.error_field(PG::PG_DIAG_SQLSTATE)]
        return nil unless cls

        f = ->(code) { result.error_field(code) }
        return cls.new(f.call(PG::PG_DIAG_MESSAGE_PRIMARY) || cls.name,
                       detail: f.call(PG::PG_DIAG_MESSAGE_DETAIL),
                       schema: f.call(PG::PG_DIAG_SCHEMA_NAME),
                       table: f.call(PG::PG_DIAG_TABLE_NAME),
                       column: f.call(PG::PG_DIAG_COLUMN_NAME),
                       resource: f.call(PG::PG_DIAG_CONSTRAINT_NAME))
      end
      err = err.cause
    end
    nil
  end

  # Runs the block; an exception carrying SQLSTATE LF001-LF004/LF010 is
  # raised again as its FenceError subclass (the original is its +cause+),
  # anything else passes unchanged.
  def self.fence_errors
    yield
  rescue StandardError => e
    mapped = fence_error_from(e)
    raise if mapped.nil? || mapped.equal?(e)

    raise mapped
  end
end

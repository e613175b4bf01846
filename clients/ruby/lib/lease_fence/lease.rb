# frozen_string_literal: true

module LeaseFence
  # One row of lease_fence.acquire: +acquired+ is true, false or nil (unknown).
  # +reason+ says why for unavailable, unknown and unreplicated (nil
  # otherwise): text for humans and logs, not for code to parse.
  Lease = Struct.new(:acquired, :status, :resource, :identity, :generation, :validity_ms, :reason,
                     keyword_init: true) do
    def self.from_row(row)
      new(acquired: Lease.bool(row["acquired"]), status: row["status"], resource: row["resource"],
          identity: row["identity"], generation: Lease.int(row["generation"]),
          validity_ms: Lease.int(row["validity_ms"]), reason: row["reason"])
    end

    # a boolean column as text ("t"/"f") or decoded
    def self.bool(value)
      case value
      when nil then nil
      when true, "t", "true" then true
      when false, "f", "false" then false
      else raise ArgumentError, "not a boolean: #{value.inspect}"
      end
    end

    def self.int(value)
      value.nil? ? nil : Integer(value)
    end
  end

  # The Lease of kept_alive_lease: scope session, renewed by the server.
  # +state+, +lost?+ and +check!+ ask lease_fence.keepalive_state on
  # +watch+, the connection given to kept_alive_lease, never on the owner's;
  # without one they raise ArgumentError.
  class KeptAliveLease < Lease
    attr_accessor :watch

    # "active", "lost", or nil (no longer kept alive)
    def state
      raise ArgumentError, "this kept-alive lease has no watch connection: pass watch: <another connection>" if watch.nil?

      LeaseFence.keepalive_state(watch, self)
    end

    # true unless the keep-alive worker still keeps it
    def lost?
      state != "active"
    end

    # raises LeaseLost unless the lease is still kept alive
    def check!
      got = state
      return if got == "active"

      raise LeaseLost.new("lost", self, "kept-alive lease #{resource.inspect}: #{got || "no longer kept alive"}")
    end
  end

  # What release returns: the status ("released", "not_held",
  # "unavailable", "unknown"), a String, with +reason+ (why, for unavailable
  # and unknown; nil otherwise).
  class ReleaseStatus < String
    attr_reader :reason

    def initialize(status, reason = nil)
      super(status)
      @reason = reason
      freeze
    end
  end

  # What each verb does with each status (the repository's
  # scripts/answers.json, "statuses"): one translation for every verb.
  module Translate
    module_function

    def lease_error(status, lease, what, reason)
      cls = LEASE_ERRORS.fetch(status, LeaseDenied)
      cls.new(status, lease, "#{what} of lease #{lease&.resource.inspect}: #{status}", reason)
    end

    # acquire: the lease when acquired; else its LeaseError (acquired NULL is
    # LeaseUnknown whatever the status says)
    def acquired(lease)
      return lease if lease.acquired == true

      status = lease.acquired.nil? ? "unknown" : lease.status
      raise lease_error(status, lease, "acquire", lease.reason)
    end

    # try_acquire: nil when busy, else as acquire
    def try_acquired(lease)
      return nil if lease.acquired == false && lease.status == "busy"

      acquired(lease)
    end

    # renew: the validity when renewed; else its LeaseError
    def renewed(renewed, status, lease, validity_ms, reason)
      return validity_ms if renewed == true && status == "renewed"

      status = "unknown" if renewed.nil?
      raise lease_error(status, lease, "renew", reason)
    end

    # release: the status, never raised
    def released(status, reason)
      ReleaseStatus.new(status, reason)
    end
  end
end

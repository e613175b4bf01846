# frozen_string_literal: true

require "digest"
require "json"
require "lease_fence"

module LeaseFence
  module Sidekiq
    # A Sidekiq server middleware: each job runs inside LeaseFence.job, one
    # transaction holding a transaction-scoped lease named from the job's
    # class and arguments. The job's writes on the thread's connection
    # (ActiveRecord::Base.connection, or the one +connection+ returns) carry
    # the lease's generation; COMMIT verifies the lease. A job that stalls
    # past its lease cannot write: its COMMIT fails with
    # LeaseFence::LeaseLostAtCommit (LF010), a newer holder's fence refuses
    # its writes with LeaseFence::StaleGeneration (LF001), everything is
    # rolled back and Sidekiq sees the exception (retry), never a success.
    # A job that rescues such an error and returns normally has a failed
    # transaction, which PostgreSQL rolls back at COMMIT: it raises
    # LeaseFence::TransactionRolledBack (the rescued error its cause), so
    # Sidekiq retries it rather than marking it done.
    # A job whose lease is busy raises LeaseFence::LeaseBusy (retried later).
    #
    #   Sidekiq.configure_server do |config|
    #     config.server_middleware do |chain|
    #       chain.add LeaseFence::Sidekiq::Middleware, ttl_ms: 60_000
    #     end
    #   end
    #
    # Options (the middleware's, and per worker with lease_fence_options,
    # which win; lease_fence_options false runs the worker without a lease):
    #
    #   class ChargeWorker
    #     include Sidekiq::Worker
    #     extend LeaseFence::Sidekiq::Options
    #     lease_fence_options resource: ->(job) { "account:#{job["args"][0]}" }
    #   end
    #
    # (not sidekiq_options: those are copied into every job's JSON payload,
    # and a lambda is no JSON)
    #   ttl_ms:     the lease's TTL (default 60_000): longer than the job runs
    #   resource:   a lambda taking the job hash, returning the resource name;
    #               default "sidekiq:<class>:<sha256 of the JSON arguments>"
    #   connection: a lambda returning the connection (default
    #               ActiveRecord::Base.connection)
    # The lease is LeaseFence::Sidekiq.current_lease while the job runs.
    class Middleware
      DEFAULT_TTL_MS = 60_000

      def initialize(options = {})
        @options = normalize(options)
      end

      def call(worker, job, _queue, &block)
        per_worker = worker.class.respond_to?(:lease_fence_options) ? worker.class.lease_fence_options : nil
        return yield if per_worker == false

        opts = @options.merge(normalize(per_worker || {}))
        ttl_ms = opts.fetch(:ttl_ms, DEFAULT_TTL_MS)
        resource = opts[:resource] ? opts[:resource].call(job) : Middleware.default_resource(job)
        conn = opts[:connection] ? opts[:connection].call : ::ActiveRecord::Base.connection
        LeaseFence.job(conn, resource, ttl_ms: ttl_ms) do |lease|
          Sidekiq.with_lease(lease, &block)
        end
      end

      # "sidekiq:<class>:<sha256 of the arguments as JSON>"
      def self.default_resource(job)
        klass = job["wrapped"] || job["class"]
        "sidekiq:#{klass}:#{Digest::SHA256.hexdigest(JSON.generate(job["args"]))}"
      end

      private

      def normalize(options)
        raise ArgumentError, "lease_fence options: a Hash, got #{options.class}" unless options.is_a?(Hash)

        out = options.transform_keys(&:to_sym)
        unknown = out.keys - %i[ttl_ms resource connection]
        raise ArgumentError, "lease_fence options: unknown #{unknown.join(", ")}" unless unknown.empty?
        %i[resource connection].each do |k|
          raise ArgumentError, "lease_fence option #{k}: a lambda" if out[k] && !out[k].respond_to?(:call)
        end
        if out.key?(:ttl_ms) && !(out[:ttl_ms].is_a?(Integer) && out[:ttl_ms].positive?)
          raise ArgumentError, "lease_fence option ttl_ms: a positive Integer"
        end
        out
      end
    end

    # Per-worker options of the middleware: extend a worker class with it.
    module Options
      # lease_fence_options(ttl_ms: ..., resource: ->(job) { ... }, connection: -> { ... }),
      # or lease_fence_options(false): no lease for this worker; without
      # arguments, the options set (nil: none)
      def lease_fence_options(options = nil)
        return @lease_fence_options if options.nil?
        unless options == false || options.is_a?(Hash)
          raise ArgumentError, "lease_fence_options: a Hash or false, got #{options.class}"
        end

        @lease_fence_options = options
      end
    end

    # the lease of the job running on this thread (nil outside one)
    def self.current_lease
      Thread.current[:lease_fence_sidekiq_lease]
    end

    def self.with_lease(lease)
      before = Thread.current[:lease_fence_sidekiq_lease]
      Thread.current[:lease_fence_sidekiq_lease] = lease
      yield
    ensure
      Thread.current[:lease_fence_sidekiq_lease] = before
    end
  end
end

# frozen_string_literal: true

# The middleware in Sidekiq's own machinery: jobs pushed with
# Sidekiq::Client into the harness's Redis (Sidekiq's keys in database 7;
# lease_fence's keys are in database 0), fetched by Sidekiq::BasicFetch and
# run by a Sidekiq::Processor — the server middleware chain, retries and
# acknowledgement as a Sidekiq server runs them.
require_relative "test_helper"
require "logger"
require "stringio"
require "lease_fence/active_record"
require "sidekiq"
require "sidekiq/processor"
require "sidekiq/api"
require "lease_fence/sidekiq"

SIDEKIQ_DB = 7
SIDEKIQ_LOG = StringIO.new
SIDEKIQ_REDIS = { path: ENV.fetch("LF_REDIS_SOCK"), db: SIDEKIQ_DB }.freeze
# Sidekiq 7 (Debian 13) configures a server through its default
# configuration and runs jobs in capsules; Sidekiq 6 (Debian 12) through
# module methods. The middleware is the same in both.
if ::Sidekiq::VERSION.to_i >= 7
  SIDEKIQ_CONFIG = Sidekiq.default_configuration
  SIDEKIQ_CONFIG.redis = SIDEKIQ_REDIS
  SIDEKIQ_CONFIG.logger = Logger.new(SIDEKIQ_LOG)
  SIDEKIQ_CONFIG.server_middleware do |chain|
    chain.add LeaseFence::Sidekiq::Middleware, ttl_ms: 60_000
  end
  SIDEKIQ_CAPSULE = SIDEKIQ_CONFIG.default_capsule { |cap| cap.queues = ["lf"] }
else
  Sidekiq.redis = SIDEKIQ_REDIS
  Sidekiq.logger = Logger.new(SIDEKIQ_LOG)
  Sidekiq.server_middleware do |chain|
    chain.add LeaseFence::Sidekiq::Middleware, ttl_ms: 60_000
  end
end

ActiveRecord::Base.establish_connection(LFTest.active_record_config) unless ActiveRecord::Base.connected?

class SidekiqItem < ActiveRecord::Base
  self.table_name = "ruby_item"
  include LeaseFence::Fenced
end

# what the tests hand to a running job, and what it hands back
module JobGate
  LEASES = Queue.new
  GO = Queue.new
end

class RenameWorker
  include Sidekiq::Worker
  sidekiq_options queue: "lf", retry: 3

  def perform(id, name, stall = false)
    lease = LeaseFence::Sidekiq.current_lease
    JobGate::LEASES << lease
    JobGate::GO.pop if stall        # the job stalls here until the test lets it go
    SidekiqItem.find(id).update!(name: name)
  end
end

# rescues the refused write of a stale copy and returns: the job "succeeds"
# while its transaction was rolled back
class RescuingWorker
  include Sidekiq::Worker
  sidekiq_options queue: "lf", retry: 3

  def perform(id)
    JobGate::LEASES << LeaseFence::Sidekiq.current_lease
    JobGate::GO.pop                 # the test writes the row under a newer generation meanwhile
    SidekiqItem.find(id).update!(name: "rescuer")
  rescue LeaseFence::StaleGeneration
    nil                             # "someone else did it": the job goes on
  end
end

class CustomResourceWorker
  include Sidekiq::Worker
  extend LeaseFence::Sidekiq::Options
  sidekiq_options queue: "lf", retry: 3
  lease_fence_options resource: ->(job) { "item:#{job["args"][0]}" }, ttl_ms: 30_000

  def perform(id)
    JobGate::LEASES << LeaseFence::Sidekiq.current_lease
    SidekiqItem.find(id).update!(qty: 7)
  end
end

class SidekiqTest < Minitest::Test
  def setup
    Sidekiq.redis(&:flushdb)                      # database 7 only: Sidekiq's own keys
    JobGate::LEASES.clear
    JobGate::GO.clear
    @fetch = if defined?(SIDEKIQ_CAPSULE)
               Sidekiq::BasicFetch.new(SIDEKIQ_CAPSULE)
             else
               Sidekiq::BasicFetch.new(queues: ["lf"])
             end
  end

  # push with the real client, fetch and process as a Sidekiq server does;
  # the processor's thread raises what Sidekiq saw
  def run_job(klass, *args)
    jid = Sidekiq::Client.push("class" => klass, "args" => args)
    work = @fetch.retrieve_work
    assert work, "the job was not in the queue"
    processor = if defined?(SIDEKIQ_CAPSULE)
                  Sidekiq::Processor.new(SIDEKIQ_CAPSULE)
                else
                  Sidekiq::Processor.new(nil, fetch: @fetch)
                end
    thread = Thread.new { processor.send(:process, work) }
    thread.report_on_exception = false
    [jid, thread]
  end

  def test_a_job_runs_under_a_lease_named_from_class_and_arguments
    item = SidekiqItem.create!(name: "queued")
    _jid, thread = run_job(RenameWorker, item.id, "worked")
    lease = JobGate::LEASES.pop
    thread.join
    assert_equal LeaseFence::Sidekiq::Middleware.default_resource(
      "class" => "RenameWorker", "args" => [item.id, "worked"]
    ), lease.resource
    assert_match(/\Asidekiq:RenameWorker:\h{64}\z/, lease.resource)
    got = SidekiqItem.find(item.id)
    assert_equal ["worked", lease.generation], [got.name, got.fence_generation]
    assert_equal 0, Sidekiq::RetrySet.new.size
    refute LFTest.redis.exists?(LFTest.lease_key(lease.resource)), "the lease outlived the job"
  end

  def test_a_job_that_stalls_past_its_lease_cannot_write
    item = SidekiqItem.create!(name: "before")
    jid, thread = run_job(RenameWorker, item.id, "stalled write", true)
    lease = JobGate::LEASES.pop
    LFTest.expire(lease.resource)                 # the job stalled past its lease
    JobGate::GO << :go
    e = assert_raises(LeaseFence::LeaseLostAtCommit) { thread.value }
    assert_equal "LF010", e.sqlstate
    assert_equal "before", SidekiqItem.find(item.id).name
    retries = Sidekiq::RetrySet.new.to_a
    assert_equal [jid], retries.map(&:jid), "Sidekiq did not schedule the failed job for a retry"
    assert_equal "LeaseFence::LeaseLostAtCommit", retries.first["error_class"]
  end

  # The stalled job's transaction still holds its resource fence: a newer
  # holder's fenced write waits for it, and goes through once the stalled
  # job's COMMIT has failed (LF010) and rolled back.
  def test_a_stalled_job_and_a_newer_holder_only_the_newer_write_stands
    item = SidekiqItem.create!(name: "before")
    _jid, thread = run_job(RenameWorker, item.id, "old job", true)
    lease = JobGate::LEASES.pop
    LFTest.expire(lease.resource)
    pg = LFTest.connect
    writer = Thread.new do                                  # the job's retry, elsewhere
      l = LeaseFence.acquire(pg, lease.resource, ttl_ms: 60_000)
      LeaseFence.fenced(pg, l) do |c|
        c.exec_params("UPDATE ruby_item SET name = 'new job' WHERE id = $1", [item.id])
      end
      l
    end
    writer.report_on_exception = false
    JobGate::GO << :go
    assert_raises(LeaseFence::LeaseLostAtCommit) { thread.value }
    newer = writer.value
    assert_operator newer.generation, :>, lease.generation
    got = SidekiqItem.find(item.id)
    assert_equal ["new job", newer.generation], [got.name, got.fence_generation]
    LeaseFence.release(pg, newer)
  ensure
    pg&.close
  end

  # the job rescues its refused write and returns normally: COMMIT would be
  # answered with ROLLBACK, so LeaseFence.job raises TransactionRolledBack,
  # Sidekiq sees the exception and schedules a retry — the job is not done
  def test_a_job_that_rescues_its_refused_write_is_not_marked_done
    item = SidekiqItem.create!(name: "before")
    jid, thread = run_job(RescuingWorker, item.id)
    lease = JobGate::LEASES.pop
    pg = LFTest.connect
    newer = pg.exec("SELECT lease_fence.next_generation()").getvalue(0, 0).to_i
    assert_operator newer, :>, lease.generation
    LeaseFence.fenced(pg, newer) { |c| c.exec_params("UPDATE ruby_item SET name = 'newer' WHERE id = $1", [item.id]) }
    JobGate::GO << :go
    e = assert_raises(LeaseFence::TransactionRolledBack) { thread.value }
    assert_kind_of LeaseFence::StaleGeneration, e.cause
    assert_equal "newer", SidekiqItem.find(item.id).name
    retries = Sidekiq::RetrySet.new.to_a
    assert_equal [jid], retries.map(&:jid), "Sidekiq marked the rolled-back job done"
    assert_equal "LeaseFence::TransactionRolledBack", retries.first["error_class"]
    refute LFTest.redis.exists?(LFTest.lease_key(lease.resource)), "the lease outlived the job"
  ensure
    pg&.close
  end

  def test_per_worker_resource_and_busy_lease
    item = SidekiqItem.create!(name: "custom")
    pg = LFTest.connect
    held = LeaseFence.acquire(pg, "item:#{item.id}", ttl_ms: 60_000)
    _jid, thread = run_job(CustomResourceWorker, item.id)
    assert_raises(LeaseFence::LeaseBusy) { thread.value }    # another worker holds it: no run
    assert JobGate::LEASES.empty?
    LeaseFence.release(pg, held)
    Sidekiq.redis(&:flushdb)
    _jid, thread = run_job(CustomResourceWorker, item.id)
    thread.join
    assert_equal "item:#{item.id}", JobGate::LEASES.pop.resource
    assert_equal 7, SidekiqItem.find(item.id).qty
  ensure
    pg&.close
  end
end

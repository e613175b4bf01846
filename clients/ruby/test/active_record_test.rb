# frozen_string_literal: true

require_relative "test_helper"
require "lease_fence/active_record"

ActiveRecord::Base.establish_connection(LFTest.active_record_config)
ActiveRecord::Base.logger = nil

# ruby_item: id, name, qty, lock_version, and the fence column protect() added
class RubyItem < ActiveRecord::Base
  self.table_name = "ruby_item"
  include LeaseFence::Fenced
  fence_column :fence
end

class ActiveRecordTest < Minitest::Test
  def setup
    @ar = ActiveRecord::Base.connection
    @pg = LFTest.connect
  end

  def teardown
    @pg&.close
  end

  def two_holders(tag)
    res = LFTest.resource(tag)
    a = LeaseFence.acquire(@ar, res, ttl_ms: 60_000)
    LFTest.expire(res)
    b = LeaseFence.acquire(@pg, res, ttl_ms: 60_000)
    [a, b]
  end

  def test_save_inside_fenced_writes_the_generation
    item = RubyItem.create!(name: "new")
    lease = LeaseFence.acquire(@ar, LFTest.resource("ar-save"), ttl_ms: 60_000)
    LeaseFence.fenced(@ar, lease) do
      item.qty = 3
      item.save!
      item.name = "twice"
      item.save!                     # one object saved twice in one fenced transaction
    end
    item.reload
    assert_equal [3, "twice", lease.generation], [item.qty, item.name, item.fence_generation]
    LeaseFence.release(@ar, lease)
  end

  def test_a_stale_holders_model_save_raises_stale_generation
    item = RubyItem.create!(name: "shared")
    a, b = two_holders("ar-stale")
    stale_copy = RubyItem.find(item.id)       # A loaded the row
    LeaseFence.fenced(@pg, b) { |c| c.exec_params("UPDATE ruby_item SET name = 'b' WHERE id = $1", [item.id]) }
    e = assert_raises(LeaseFence::StaleGeneration) do
      LeaseFence.fenced(@ar, a.generation) do      # rows only: the row itself refuses A
        stale_copy.name = "a"
        stale_copy.save
      end
    end
    assert_equal %w[ruby_item fence], [e.table, e.column]
    assert_kind_of ActiveRecord::StatementInvalid, e.cause
    assert_equal "b", RubyItem.find(item.id).name
    refute @ar.transaction_open?
  end

  def test_lock_version_alongside_the_fence
    item = RubyItem.create!(name: "locked")
    assert_equal 0, item.lock_version
    a, b = two_holders("ar-lock")
    # the new holder saves: lock_version moves on, the fence becomes b's
    mine = RubyItem.find(item.id)
    LeaseFence.fenced(@ar, b) { mine.update!(qty: 1) }
    mine.reload
    assert_equal [1, 1, b.generation], [mine.qty, mine.lock_version, mine.fence_generation]
    # a concurrent edit of the same holder with the old lock_version:
    # optimistic locking still says so
    old = RubyItem.find(item.id)
    LeaseFence.fenced(@ar, b) { RubyItem.find(item.id).update!(qty: 2) }
    assert_raises(ActiveRecord::StaleObjectError) do
      LeaseFence.fenced(@ar, b) { old.update!(qty: 99) }
    end
    # the stale holder with the current lock_version: the fence says no
    fresh = RubyItem.find(item.id)
    assert_raises(LeaseFence::StaleGeneration) do
      LeaseFence.fenced(@ar, a) { fresh.update!(qty: 42) }
    end
    final = RubyItem.find(item.id)
    assert_equal [2, 2, b.generation], [final.qty, final.lock_version, final.fence_generation]
  end

  def test_save_in_a_job_commits_under_its_lease
    item = RubyItem.create!(name: "job")
    gen = LeaseFence.job(@ar, LFTest.resource("ar-job"), ttl_ms: 60_000) do |lease|
      item.update!(name: "done")
      lease.generation
    end
    assert_equal ["done", gen], RubyItem.find(item.id).then { |i| [i.name, i.fence_generation] }
  end

  def test_a_job_whose_lease_is_lost_cannot_commit_its_save
    item = RubyItem.create!(name: "before")
    res = LFTest.resource("ar-lf010")
    assert_raises(LeaseFence::LeaseLostAtCommit) do
      LeaseFence.job(@ar, res, ttl_ms: 60_000) do
        item.update!(name: "after")
        LFTest.expire(res)
      end
    end
    assert_equal "before", RubyItem.find(item.id).name
    refute @ar.transaction_open?
  end

  # a job whose block rescues a refused save and goes on: ActiveRecord
  # would send COMMIT and PostgreSQL roll the transaction back in silence;
  # the job raises TransactionRolledBack, the refused save's error its cause
  def test_a_job_that_rescues_a_refused_save_raises_transaction_rolled_back
    mine = RubyItem.create!(name: "mine")
    theirs = RubyItem.create!(name: "theirs")
    res = LFTest.resource("ar-rescued")
    rescued = nil
    e = assert_raises(LeaseFence::TransactionRolledBack) do
      LeaseFence.job(@ar, res, ttl_ms: 60_000) do
        mine.update!(name: "job")
        newer = @pg.exec("SELECT lease_fence.next_generation()").getvalue(0, 0).to_i
        LeaseFence.fenced(@pg, newer) { |c| c.exec_params("UPDATE ruby_item SET name = 'newer' WHERE id = $1", [theirs.id]) }
        begin
          RubyItem.find(theirs.id).update!(name: "stale")
        rescue LeaseFence::StaleGeneration => err
          rescued = err                         # and the job goes on
        end
        :done
      end
    end
    assert_equal "LF001", rescued&.sqlstate
    assert_kind_of LeaseFence::StaleGeneration, e.cause, "the refused save, as the cause"
    assert_equal %w[ruby_item fence], [e.cause.table, e.cause.column]
    assert_kind_of ActiveRecord::StatementInvalid, e.cause.cause
    assert_equal "mine", RubyItem.find(mine.id).name, "nothing committed"
    refute @ar.transaction_open?
    refute LFTest.redis.exists?(LFTest.lease_key(res)), "the lease outlived its transaction"
  end

  # a COMMIT refused with LF010 ends the transaction: no ROLLBACK is sent
  # after it, so PostgreSQL does not warn "there is no transaction in
  # progress" (SQLSTATE 25P01); ActiveRecord's own block would send one
  def test_a_refused_commit_is_not_followed_by_a_rollback
    pool = ActiveRecord::Base.connection_pool
    ar = pool.checkout
    notices = []
    ar.raw_connection.set_notice_receiver { |r| notices << r.error_field(PG::PG_DIAG_SQLSTATE) }
    sent = []
    sub = ActiveSupport::Notifications.subscribe("sql.active_record") do |*, payload|
      sent << payload[:sql] if payload[:connection].equal?(ar)
    end
    item = RubyItem.create!(name: "before")
    res = LFTest.resource("ar-no-rollback")
    assert_raises(LeaseFence::LeaseLostAtCommit) do
      LeaseFence.job(ar, res, ttl_ms: 60_000) do
        ar.exec_update("UPDATE ruby_item SET name = 'after' WHERE id = #{Integer(item.id)}")
        LFTest.expire(res)
      end
    end
    assert_equal "COMMIT", sent.last, "nothing after the refused COMMIT: #{sent.inspect}"
    refute_includes notices, "25P01", "PostgreSQL warned: there is no transaction in progress"
    refute ar.transaction_open?
    assert_equal "before", RubyItem.find(item.id).name
    assert_equal 1, ar.select_value("SELECT 1").to_i, "the connection is fit for use"
  ensure
    ActiveSupport::Notifications.unsubscribe(sub) if sub
    pool.checkin(ar) if ar
  end

  # the server's XX001 through ActiveRecord (a StatementInvalid around the
  # PG::DataCorrupted) is DataCorrupted too; the connection stays usable
  def test_corrupt_generation_key_on_an_activerecord_connection_is_data_corrupted
    res = LFTest.resource("ar-corrupt")
    LFTest.redis.set("#{LFTest.lease_key(res)}:gen", LFTest::CORRUPT_GENERATION)
    e = assert_raises(LeaseFence::DataCorrupted) { LeaseFence.acquire(@ar, res, ttl_ms: 10_000) }
    assert_equal "XX001", e.sqlstate
    assert_kind_of ActiveRecord::StatementInvalid, e.cause
    assert_raises(LeaseFence::DataCorrupted) do
      LeaseFence.job(@ar, res, ttl_ms: 10_000) { flunk "the job ran under a corrupt generation key" }
    end
    refute @ar.transaction_open?
    assert_equal 1, @ar.select_value("SELECT 1")
  ensure
    LFTest.redis.del("#{LFTest.lease_key(res)}:gen")
  end

  def test_transaction_lease_on_an_activerecord_connection
    item = RubyItem.create!(name: "txl")
    res = LFTest.resource("ar-txl")
    LeaseFence.transaction_lease(@ar, res, ttl_ms: 60_000) do |lease|
      assert_equal "acquired", lease.status
      item.update!(qty: 5)
    end
    assert_equal 5, RubyItem.find(item.id).qty
    ActiveRecord::Base.transaction do
      assert_raises(LeaseFence::ConnectionError) { LeaseFence.acquire(@ar, res, ttl_ms: 1000) }
    end
  end

  # the concern itself, outside LeaseFence's blocks: the application's own
  # transaction sets the generation (as the ORM guide shows) and saves
  def test_the_model_translates_a_refused_save_in_its_own_transaction
    item = RubyItem.create!(name: "own")
    a, b = two_holders("ar-own")
    LeaseFence.fenced(@ar, b) { RubyItem.find(item.id).update!(name: "b") }
    stale_copy = RubyItem.find(item.id)      # the current lock_version: only the fence can say no
    e = assert_raises(LeaseFence::StaleGeneration) do
      ActiveRecord::Base.transaction do
        @ar.select_value("SELECT lease_fence.set_generation(#{Integer(a.generation)}, NULL)")
        stale_copy.name = "a"
        stale_copy.save!
      end
    end
    assert_equal "LF001", e.sqlstate
    assert_kind_of ActiveRecord::StatementInvalid, e.cause
    assert_equal "b", RubyItem.find(item.id).name
    # and destroy
    assert_raises(LeaseFence::StaleGeneration) do
      ActiveRecord::Base.transaction do
        @ar.select_value("SELECT lease_fence.set_generation(#{Integer(a.generation)}, NULL)")
        RubyItem.find(item.id).destroy
      end
    end
    assert RubyItem.exists?(item.id)
  end
end

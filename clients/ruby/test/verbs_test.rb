# frozen_string_literal: true

require_relative "test_helper"

class VerbsTest < Minitest::Test
  def setup
    @conn = LFTest.connect
    @other = LFTest.connect
  end

  def teardown
    @conn&.close
    @other&.close
  end

  # the story of the library: two holders of one resource
  def test_two_holders_stale_write_refused_new_holders_write_stands
    res = LFTest.resource("two")
    id = LFTest.new_account(@conn)
    a = LeaseFence.acquire(@conn, res, ttl_ms: 60_000)
    LFTest.expire(res)                         # holder A stalls past its lease
    b = LeaseFence.acquire(@other, res, ttl_ms: 60_000)
    assert_operator b.generation, :>, a.generation
    LeaseFence.fenced(@other, b) do |c|
      c.exec_params("UPDATE account SET owner = 'b' WHERE id = $1", [id])
    end
    e = assert_raises(LeaseFence::StaleGeneration) do
      LeaseFence.fenced(@conn, a) do |c|
        c.exec_params("UPDATE account SET owner = 'a' WHERE id = $1", [id])
      end
    end
    assert_equal "LF001", e.sqlstate
    assert_equal res, e.resource                 # the resource fence refused it
    assert_kind_of PG::Error, e.cause
    assert_equal({ owner: "b", balance: 0, fence: b.generation }, LFTest.account(@conn, id))
    assert_equal PG::PQTRANS_IDLE, @conn.transaction_status
    assert_equal "released", LeaseFence.release(@other, b)
  end

  def test_stale_row_write_names_table_and_column
    res = LFTest.resource("row")
    id = LFTest.new_account(@conn)
    a = LeaseFence.acquire(@conn, res, ttl_ms: 60_000)
    LFTest.expire(res)
    b = LeaseFence.acquire(@other, res, ttl_ms: 60_000)
    LeaseFence.fenced(@other, b.generation) { |c| c.exec_params("UPDATE account SET balance = 2 WHERE id = $1", [id]) }
    # a bare generation fences rows only: the row refuses it
    e = assert_raises(LeaseFence::StaleGeneration) do
      LeaseFence.fenced(@conn, a.generation) { |c| c.exec_params("UPDATE account SET balance = 1 WHERE id = $1", [id]) }
    end
    assert_equal %w[public account fence], [e.schema, e.table, e.column]
    assert_nil e.resource
    assert_equal 2, LFTest.account(@conn, id)[:balance]
  end

  def test_acquire_renew_release
    res = LFTest.resource("arr")
    lease = LeaseFence.acquire(@conn, res, ttl_ms: 60_000)
    assert_equal [true, "acquired", res], [lease.acquired, lease.status, lease.resource]
    assert_kind_of Integer, lease.generation
    assert_match(/\A\h+\z/, lease.identity)
    assert_equal lease.identity, LFTest.redis.get(LFTest.lease_key(res))
    validity = LeaseFence.renew(@conn, lease, ttl_ms: 120_000)
    assert_operator validity, :>, 60_000
    assert_equal "released", LeaseFence.release(@conn, lease)
    refute LFTest.redis.exists?(LFTest.lease_key(res))
  end

  def test_renew_of_a_lost_lease_raises_lease_lost_release_says_not_held
    res = LFTest.resource("lost")
    lease = LeaseFence.acquire(@conn, res, ttl_ms: 60_000)
    LFTest.expire(res)
    e = assert_raises(LeaseFence::LeaseLost) { LeaseFence.renew(@conn, lease, ttl_ms: 60_000) }
    assert_kind_of LeaseFence::LeaseDenied, e
    assert_equal "lost", e.status
    refute LFTest.redis.exists?(LFTest.lease_key(res)), "renew recreated a lost lease"
    status = LeaseFence.release(@conn, lease)
    assert_equal "not_held", status
  end

  def test_try_acquire_busy_returns_nil_acquire_raises_lease_busy
    res = LFTest.resource("busy")
    held = LeaseFence.acquire(@other, res, ttl_ms: 60_000)
    assert_nil LeaseFence.try_acquire(@conn, res, ttl_ms: 60_000)
    e = assert_raises(LeaseFence::LeaseBusy) { LeaseFence.acquire(@conn, res, ttl_ms: 60_000) }
    assert_kind_of LeaseFence::LeaseDenied, e
    assert_equal ["busy", false], [e.status, e.lease.acquired]
    LeaseFence.release(@other, held)
    got = LeaseFence.try_acquire(@conn, res, ttl_ms: 60_000)
    assert_equal true, got.acquired
    LeaseFence.release(@conn, got)
  end

  # fair: true, two waiters queued in a known order (the second starts
  # only once the first is visibly queued): the holder's release grants the
  # first one; the second still waits, first in the queue now, and gets it
  # (with a higher generation) when the first releases
  def test_fair_acquire_grants_waiters_in_arrival_order
    res = LFTest.resource("fair")
    held = LeaseFence.acquire(@other, res, ttl_ms: 600_000)
    first_conn = LFTest.connect
    second_conn = LFTest.connect
    first = Thread.new { LeaseFence.acquire(first_conn, res, ttl_ms: 600_000, wait_ms: 600_000, fair: true) }
    LFTest.wait_queued(res, 1)
    assert_equal [[1, first_conn.backend_pid]], LFTest.queue(res)
    second = Thread.new { LeaseFence.acquire(second_conn, res, ttl_ms: 600_000, wait_ms: 600_000, fair: true) }
    LFTest.wait_queued(res, 2)
    assert_equal [[1, first_conn.backend_pid], [2, second_conn.backend_pid]], LFTest.queue(res)

    assert_equal "released", LeaseFence.release(@other, held)
    a = first.value
    assert_equal true, a.acquired
    assert_operator a.generation, :>, held.generation
    assert_equal [[1, second_conn.backend_pid]], LFTest.queue(res), "the second waiter is next"
    assert second.alive?, "the second waiter was granted while the first holds the lease"

    assert_equal "released", LeaseFence.release(first_conn, a)
    b = second.value
    assert_equal true, b.acquired
    assert_operator b.generation, :>, a.generation
    assert_empty LFTest.queue(res)
    LeaseFence.release(second_conn, b)
  ensure
    [first, second].each { |t| t&.kill }
    [first_conn, second_conn].each { |c| c&.close }
  end

  # every other verb that acquires sends fair: too (job and
  # transaction_lease: BEGIN and the acquire in one string): each, waiting
  # while another session holds the lease, is visibly queued, and is
  # granted when the holder releases
  def test_every_acquiring_verb_takes_fair
    res = LFTest.resource("fairverbs")
    verbs = {
      "try_acquire" => lambda { |c|
        l = LeaseFence.try_acquire(c, res, ttl_ms: 60_000, wait_ms: 600_000, fair: true)
        LeaseFence.release(c, l)
        l.generation
      },
      "job" => ->(c) { LeaseFence.job(c, res, ttl_ms: 60_000, wait_ms: 600_000, fair: true) { |l| l.generation } },
      "transaction_lease" => lambda { |c|
        LeaseFence.transaction_lease(c, res, ttl_ms: 60_000, wait_ms: 600_000, fair: true) { |l| l.generation }
      },
      "kept_alive_lease" => lambda { |c|
        LeaseFence.kept_alive_lease(c, res, ttl_ms: 60_000, wait_ms: 600_000, fair: true, &:generation)
      }
    }
    verbs.each do |name, call|
      held = LeaseFence.acquire(@other, res, ttl_ms: 600_000)
      c = LFTest.connect
      begin
        waiter = Thread.new { call.call(c) }
        LFTest.wait_queued(res, 1)
        assert_equal [[1, c.backend_pid]], LFTest.queue(res), name
        assert_equal "released", LeaseFence.release(@other, held)
        assert_operator waiter.value, :>, held.generation, name
      ensure
        waiter&.kill
        c.close
      end
    end
  end

  # a generation key that holds no generation: the server's XX001 is
  # DataCorrupted (still a PG::DataCorrupted), for every verb that acquires
  def test_corrupt_generation_key_is_data_corrupted
    res = LFTest.resource("corrupt")
    LFTest.redis.set("#{LFTest.lease_key(res)}:gen", LFTest::CORRUPT_GENERATION)
    [-> { LeaseFence.acquire(@conn, res, ttl_ms: 10_000) },
     -> { LeaseFence.try_acquire(@conn, res, ttl_ms: 10_000) },
     -> { LeaseFence.job(@conn, res, ttl_ms: 10_000) { flunk "the job ran under a corrupt generation key" } }]
      .each do |call|
      e = assert_raises(LeaseFence::DataCorrupted) { call.call }
      assert_kind_of PG::DataCorrupted, e
      refute_kind_of LeaseFence::LeaseError, e
      assert_equal "XX001", e.sqlstate
      assert_equal "XX001", e.result.error_field(PG::PG_DIAG_SQLSTATE)
      assert_kind_of PG::DataCorrupted, e.cause
    end
    assert_equal PG::PQTRANS_IDLE, @conn.transaction_status
    refute LFTest.redis.exists?(LFTest.lease_key(res)), "a lease key was set"
  ensure
    LFTest.redis.del("#{LFTest.lease_key(res)}:gen")
  end

  def test_redis_down_is_lease_unavailable
    noredis = LFTest.connect(user: ENV.fetch("LF_NOREDIS_USER"))
    res = LFTest.resource("down")
    e = assert_raises(LeaseFence::LeaseUnavailable) { LeaseFence.acquire(noredis, res, ttl_ms: 60_000) }
    assert_kind_of LeaseFence::LeaseDenied, e
    assert_equal "unavailable", e.status
    refute_nil e.reason
    assert_raises(LeaseFence::LeaseUnavailable) { LeaseFence.try_acquire(noredis, res, ttl_ms: 60_000) }
    assert_raises(LeaseFence::LeaseUnavailable) do
      LeaseFence.job(noredis, res, ttl_ms: 60_000) { flunk "the job ran without its lease" }
    end
    assert_equal PG::PQTRANS_IDLE, noredis.transaction_status
  ensure
    noredis&.close
  end

  def test_job_commits_the_row_under_the_generation_and_releases
    res = LFTest.resource("job")
    id = LFTest.new_account(@conn)
    gen = LeaseFence.job(@conn, res, ttl_ms: 60_000) do |lease, c|
      assert LFTest.redis.exists?(LFTest.lease_key(res))
      c.exec_params("UPDATE account SET balance = 7 WHERE id = $1", [id])
      lease.generation
    end
    assert_equal({ owner: "nobody", balance: 7, fence: gen }, LFTest.account(@conn, id))
    refute LFTest.redis.exists?(LFTest.lease_key(res)), "COMMIT did not release the lease"
  end

  def test_job_lease_lost_before_commit_raises_lf010_and_writes_nothing
    res = LFTest.resource("lf010")
    id = LFTest.new_account(@conn)
    e = assert_raises(LeaseFence::LeaseLostAtCommit) do
      LeaseFence.job(@conn, res, ttl_ms: 60_000) do |_lease, c|
        c.exec_params("UPDATE account SET balance = 9 WHERE id = $1", [id])
        LFTest.expire(res)
      end
    end
    assert_equal "LF010", e.sqlstate
    assert_kind_of PG::Error, e.cause
    assert_equal 0, LFTest.account(@conn, id)[:balance]
    assert_equal PG::PQTRANS_IDLE, @conn.transaction_status
  end

  def test_transaction_lease_commits_and_busy_raises_before_the_block
    res = LFTest.resource("txl")
    id = LFTest.new_account(@conn)
    LeaseFence.transaction_lease(@conn, res, ttl_ms: 60_000) do |lease, c|
      c.exec_params("UPDATE account SET owner = 'txl' WHERE id = $1", [id])
      held = LeaseFence.try_acquire(@other, res, ttl_ms: 60_000)
      assert_nil held, "a transaction-scoped lease is held until COMMIT"
      assert_equal "acquired", lease.status
    end
    assert_equal "txl", LFTest.account(@conn, id)[:owner]
    held = LeaseFence.acquire(@other, res, ttl_ms: 60_000)
    ran = false
    assert_raises(LeaseFence::LeaseBusy) do
      LeaseFence.transaction_lease(@conn, res, ttl_ms: 60_000) { ran = true }
    end
    refute ran
    assert_equal PG::PQTRANS_IDLE, @conn.transaction_status
    LeaseFence.release(@other, held)
  end

  def test_transaction_lease_lost_before_commit_raises_lf010
    res = LFTest.resource("txl010")
    id = LFTest.new_account(@conn)
    assert_raises(LeaseFence::LeaseLostAtCommit) do
      LeaseFence.transaction_lease(@conn, res, ttl_ms: 60_000) do |_l, c|
        c.exec_params("UPDATE account SET owner = 'gone' WHERE id = $1", [id])
        LFTest.expire(res)
      end
    end
    assert_equal "nobody", LFTest.account(@conn, id)[:owner]
  end

  # the block rescues a refused write and goes on: its transaction is failed
  # and PostgreSQL would answer COMMIT with ROLLBACK; job, transaction_lease
  # and fenced raise TransactionRolledBack instead of returning, nothing of
  # the transaction committed, the lease released
  def test_a_block_that_rescues_a_refused_write_raises_transaction_rolled_back
    %i[job transaction_lease fenced].each do |verb|
      res = LFTest.resource("rescued-#{verb}")
      id = LFTest.new_account(@conn)
      mine = LFTest.new_account(@conn)
      explicit = verb == :fenced ? LeaseFence.acquire(@other, res, ttl_ms: 60_000) : nil
      rescued = nil
      body = lambda do |c|
        c.exec_params("UPDATE account SET owner = 'job' WHERE id = $1", [mine])
        newer = @other.exec("SELECT lease_fence.next_generation()").getvalue(0, 0).to_i
        LeaseFence.fenced(@other, newer) { |o| o.exec_params("UPDATE account SET owner = 'newer' WHERE id = $1", [id]) }
        begin
          LeaseFence.fence_errors { c.exec_params("UPDATE account SET owner = 'stale' WHERE id = $1", [id]) }
        rescue LeaseFence::StaleGeneration => e
          rescued = e                          # and the block goes on as if nothing happened
        end
        :done
      end
      e = assert_raises(LeaseFence::TransactionRolledBack, verb.to_s) do
        case verb
        when :job then LeaseFence.job(@conn, res, ttl_ms: 60_000) { |_l, c| body.call(c) }
        when :transaction_lease then LeaseFence.transaction_lease(@conn, res, ttl_ms: 60_000) { |_l, c| body.call(c) }
        else LeaseFence.fenced(@conn, explicit) { |c| body.call(c) }
        end
      end
      assert_equal "LF001", rescued&.sqlstate, "#{verb}: the block rescued the refused write"
      refute_kind_of LeaseFence::FenceError, e
      assert_nil e.cause, "#{verb}: a PG::Connection does not show the library what the block rescued"
      assert_equal "nobody", LFTest.account(@conn, mine)[:owner], "#{verb}: nothing committed"
      assert_equal PG::PQTRANS_IDLE, @conn.transaction_status
      if explicit
        assert_equal "released", LeaseFence.release(@other, explicit)
      else
        refute LFTest.redis.exists?(LFTest.lease_key(res)), "#{verb}: the lease outlived its transaction"
      end
    end
  end

  def test_an_exception_in_a_job_rolls_back_and_releases
    res = LFTest.resource("raise")
    id = LFTest.new_account(@conn)
    assert_raises(RuntimeError) do
      LeaseFence.job(@conn, res, ttl_ms: 60_000) do |_l, c|
        c.exec_params("UPDATE account SET balance = 5 WHERE id = $1", [id])
        raise "boom"
      end
    end
    assert_equal 0, LFTest.account(@conn, id)[:balance]
    refute LFTest.redis.exists?(LFTest.lease_key(res))
  end

  def test_strict_table_without_generation_is_missing_generation
    e = assert_raises(LeaseFence::MissingGeneration) do
      LeaseFence.fence_errors { @conn.exec("INSERT INTO ledger (note) VALUES ('no generation')") }
    end
    assert_equal ["LF002", "ledger"], [e.sqlstate, e.table]
  end

  def test_writing_another_fence_value_is_conflicting_generation
    res = LFTest.resource("conflict")
    id = LFTest.new_account(@conn)
    lease = LeaseFence.acquire(@conn, res, ttl_ms: 60_000)
    e = assert_raises(LeaseFence::ConflictingGeneration) do
      LeaseFence.fenced(@conn, lease) do |c|
        c.exec_params("UPDATE account SET fence = $2 WHERE id = $1", [id, lease.generation + 1000])
      end
    end
    assert_equal "LF003", e.sqlstate
    LeaseFence.release(@conn, lease)
  end

  def test_bad_input_raises_before_anything_is_sent
    res = LFTest.resource("bad")
    assert_raises(ArgumentError) { LeaseFence.acquire(@conn, res, ttl_ms: 0) }
    assert_raises(ArgumentError) { LeaseFence.acquire(@conn, res, ttl_ms: "1000") }
    assert_raises(ArgumentError) { LeaseFence.acquire(@conn, "", ttl_ms: 1000) }
    assert_raises(ArgumentError) { LeaseFence.fenced(@conn, -1) { flunk "ran" } }
    assert_raises(ArgumentError) { LeaseFence.job(@conn, res, ttl_ms: 1000) }   # no block
    assert_raises(ArgumentError) { LeaseFence.acquire(@conn, res, ttl_ms: 1000, fair: "yes") }
    assert_raises(ArgumentError) { LeaseFence.job(@conn, res, ttl_ms: 1000, fair: nil) { flunk "ran" } }
    assert_raises(LeaseFence::ConnectionError) { LeaseFence.acquire(Object.new, res, ttl_ms: 1000) }
    @conn.exec("BEGIN")
    assert_raises(LeaseFence::ConnectionError) { LeaseFence.acquire(@conn, res, ttl_ms: 1000) }
    assert_raises(LeaseFence::ConnectionError) { LeaseFence.fenced(@conn, 1) { flunk "ran" } }
    assert_raises(LeaseFence::ConnectionError) { LeaseFence.job(@conn, res, ttl_ms: 1000) { flunk "ran" } }
    # the caller's transaction is left alone, not rolled back
    assert_equal PG::PQTRANS_INTRANS, @conn.transaction_status
    @conn.exec("ROLLBACK")
    refute LFTest.redis.exists?(LFTest.lease_key(res)), "a refused call took a lease"
  end

  def test_kept_alive_lease_writes_and_is_released_at_the_end
    res = LFTest.resource("ka")
    id = LFTest.new_account(@conn)
    watch = LFTest.connect
    got = LeaseFence.kept_alive_lease(@conn, res, ttl_ms: 3000, watch: watch) do |lease|
      assert_kind_of LeaseFence::KeptAliveLease, lease
      assert_equal "active", lease.state
      refute lease.lost?
      lease.check!
      LeaseFence.fenced(@conn, lease) { |c| c.exec_params("UPDATE account SET owner = 'kept' WHERE id = $1", [id]) }
      lease
    end
    assert_equal({ owner: "kept", balance: 0, fence: got.generation }, LFTest.account(@conn, id))
    refute LFTest.redis.exists?(LFTest.lease_key(res)), "released at the end"
    assert_nil got.state, "no longer kept alive"
    assert_raises(ArgumentError) { LeaseFence.kept_alive_lease(@conn, res, ttl_ms: 3000, watch: @conn) { flunk "ran" } }
  ensure
    watch&.close
  end

  def test_kept_alive_lease_lost_refuses_writes_and_raises_lease_lost_at_the_end
    res = LFTest.resource("kalost")
    id = LFTest.new_account(@conn)
    watch = LFTest.connect
    thief = "f" * 32
    kept = nil
    e = assert_raises(LeaseFence::LeaseLost) do
      LeaseFence.kept_alive_lease(@conn, res, ttl_ms: 3000, watch: watch) do |lease|
        kept = lease
        LeaseFence.fenced(@conn, lease) { |c| c.exec_params("UPDATE account SET owner = 'before' WHERE id = $1", [id]) }
        LFTest.redis.set(LFTest.lease_key(res), thief, px: 60_000)     # someone else's now
        LFTest.wait_until("the watch to see the loss") { lease.lost? }
        assert_equal "lost", lease.state
        assert_raises(LeaseFence::LeaseLost) { lease.check! }
        lf010 = assert_raises(LeaseFence::LeaseLostAtCommit) do
          LeaseFence.fenced(@conn, lease) { |c| c.exec_params("UPDATE account SET owner = 'after' WHERE id = $1", [id]) }
        end
        assert_equal "LF010", lf010.sqlstate
      end
    end
    assert_equal ["lost", kept], [e.status, e.lease]
    assert_equal "before", LFTest.account(@conn, id)[:owner]
    assert_equal thief, LFTest.redis.get(LFTest.lease_key(res)), "the other identity's key is untouched"
    LFTest.redis.del(LFTest.lease_key(res))
  ensure
    watch&.close
  end

  def test_kept_alive_lease_released_when_the_block_raises
    res = LFTest.resource("karaise")
    assert_raises(ZeroDivisionError) do
      LeaseFence.kept_alive_lease(@conn, res, ttl_ms: 3000) do |lease|
        assert_raises(ArgumentError) { lease.state }    # no watch connection
        1 / 0
      end
    end
    refute LFTest.redis.exists?(LFTest.lease_key(res))
  end

  # what the client sent until the block stops the trace, from libpq's
  # protocol trace (the message types the frontend sent)
  def frontend_messages(path)
    File.open(path, "w") do |io|
      @conn.trace(io)
      tracing = true
      stop = lambda do
        @conn.untrace if tracing
        tracing = false
      end
      begin
        yield stop
      ensure
        stop.call
      end
    end
    File.readlines(path).filter_map { |l| l.split("\t")[3] if l.split("\t")[1] == "F" }
  end

  def test_job_and_fenced_send_begin_with_their_first_statement_in_one_round_trip
    Dir.mktmpdir do |dir|
      res = LFTest.resource("rt")
      sent = frontend_messages(File.join(dir, "job.trace")) do |stop|
        LeaseFence.job(@conn, res, ttl_ms: 60_000) { stop.call }
      end
      assert_equal ["Query"], sent, "job: BEGIN and the acquire are one message"
      lease = LeaseFence.acquire(@conn, res, ttl_ms: 60_000)
      sent = frontend_messages(File.join(dir, "fenced.trace")) do |stop|
        LeaseFence.fenced(@conn, lease) { stop.call }
      end
      assert_equal ["Query"], sent, "fenced: BEGIN and set_generation are one message"
      LeaseFence.release(@conn, lease)
    end
  end
end

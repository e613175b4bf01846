# frozen_string_literal: true

require_relative "test_helper"

# Leader election (LeaseFence.leadership / campaign) and take_over against
# the real servers. The frozen-leader story forks the old leader into a
# process of its own and freezes it with SIGSTOP.
class LeadershipTest < Minitest::Test
  def setup
    @conns = []
  end

  def teardown
    @conns.each { |c| c.close unless c.finished? }
    if @child
      begin
        Process.kill("CONT", @child)
        Process.kill("KILL", @child)
        Process.wait(@child)
      rescue Errno::ESRCH, Errno::ECHILD
        nil
      end
    end
  end

  def conn
    c = LFTest.connect
    @conns << c
    c
  end

  def leader_row(c, election)
    c.exec_params("SELECT held, term, value, identity FROM lease_fence.leader($1)", [election]).first
  end

  def self.kind(err)
    case err
    when nil then "ok"
    when LeaseFence::LeadershipLost then "LeadershipLost"
    when LeaseFence::StaleGeneration then "StaleGeneration:#{err.resource}"
    else "error:#{err.class}:#{err.message.tr("\n", " ")}"
    end
  end

  def self.attempt
    yield
    "ok"
  rescue StandardError => e
    kind(e)
  end

  # The old leader, in the forked child: leadership; "leader <term>"; waits
  # for "write"; "first <kind>" (its write through lead.fenced at once);
  # "lost <status>" once lead.lost?; "fenced <kind>" (lead.fenced again);
  # "raw <kind>" (the same write under its term without the library's
  # check); "leadership <kind>" (what leadership raised). exit! keeps the
  # parent's connections and minitest's at_exit out of the child.
  def self.old_leader(election, id, input, output)
    code = 1
    begin
      c = LFTest.connect
      work = LFTest.connect
      write = ->(w) { w.exec_params("UPDATE account SET owner = 'old leader' WHERE id = $1", [id]) }
      result = attempt do
        LeaseFence.leadership(c, election, ttl_ms: 1500, value: "child") do |lead|
          output.puts "leader #{lead.term}"
          exit!(1) unless input.gets&.chomp == "write"
          output.puts "first #{attempt { lead.fenced(work, &write) }}"
          sleep 0.01 until lead.lost?
          output.puts "lost #{lead.lost_by.status}"
          output.puts "fenced #{attempt { lead.fenced(work, &write) }}"
          output.puts "raw #{attempt { LeaseFence.fenced(work, lead.term, resource: election, &write) }}"
        end
      end
      output.puts "leadership #{result}"
      code = 0
    rescue Exception => e # rubocop:disable Lint/RescueException
      output.puts "error #{e.class}: #{e.message}"
    ensure
      output.flush
      exit!(code)
    end
  end

  def field(out, name)
    line = out.gets
    refute_nil line, "the child ended before #{name}"
    got, rest = line.chomp.split(" ", 2)
    assert_equal name, got, "the child said #{line.inspect}"
    rest
  end

  # The story: A leads (a forked process) and is frozen by SIGSTOP; B,
  # waiting in campaign, wins once A's lease runs out (A cannot renew), with
  # a higher term, and writes. A is woken: its write through lead.fenced is
  # refused — LeadershipLost when it saw the loss first, else
  # StaleGeneration against the election's fence (B's win raised it); once
  # lead.lost? lead.fenced raises LeadershipLost before sending anything;
  # the same write under A's term without the library's check is refused by
  # the database (LF001 on the election's resource fence); leadership raises
  # LeadershipLost. B's write stands.
  def test_frozen_leader_is_fenced_out
    check = conn
    election = LFTest.resource("frozen")
    id = LFTest.new_account(check, "nobody", 100)
    child_in, to_child = IO.pipe     # [read end, write end]
    from_child, child_out = IO.pipe
    @child = fork do
      to_child.close
      from_child.close
      self.class.old_leader(election, id, child_in, child_out)
    end
    child_in.close
    child_out.close
    a_term = Integer(field(from_child, "leader"))

    b_conn = conn
    b_won = Thread.new { LeaseFence.campaign(b_conn, election, ttl_ms: 60_000, value: "B") }
    Process.kill("STOP", @child)
    b = b_won.value
    begin
      assert_operator b.term, :>, a_term
      b.fenced(conn) { |c| c.exec_params("UPDATE account SET owner = 'new leader' WHERE id = $1", [id]) }

      Process.kill("CONT", @child)
      to_child.puts "write"
      to_child.flush
      first = field(from_child, "first")
      assert_includes ["LeadershipLost", "StaleGeneration:#{election}"], first, "A's write when woken"
      assert_includes %w[expired lost], field(from_child, "lost")
      assert_equal "LeadershipLost", field(from_child, "fenced")
      assert_equal "StaleGeneration:#{election}", field(from_child, "raw")
      assert_equal "LeadershipLost", field(from_child, "leadership")
      _, status = Process.wait2(@child)
      @child = nil
      assert status.success?
      assert_equal({ owner: "new leader", balance: 100, fence: b.term }, LFTest.account(check, id))
    ensure
      b.resign
    end
  end

  def wait_campaigning(check, pid)
    LFTest.wait_until("the campaign") do
      check.exec_params("SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND state = 'active' " \
                        "AND query LIKE '%lease_fence.campaign%'", [pid]).getvalue(0, 0) == "1"
    end
  end

  # A resigns while B waits in campaign: B wins. A renews its lease (TTL 10
  # minutes) until it resigns, so only the resign can have handed it over.
  def test_resign_hands_over_at_once
    check = conn
    election = LFTest.resource("resign")
    a = LeaseFence.campaign(conn, election, ttl_ms: 600_000)
    b_conn = conn
    b_won = Thread.new { LeaseFence.campaign(b_conn, election, ttl_ms: 600_000) }
    wait_campaigning(check, b_conn.backend_pid)
    assert_equal "released", a.resign
    assert a.lost?
    assert_raises(LeaseFence::LeadershipLost) { a.check! }
    b = b_won.value
    assert_operator b.term, :>, a.term
    assert_equal "released", b.resign
  end

  # fair: true, two candidates queued in a known order behind the leader:
  # its resign makes the first one leader, the second is then first in the
  # queue and still waits; it leads after the first resigns, with a higher term
  def test_fair_campaign_elects_candidates_in_arrival_order
    election = LFTest.resource("fair")
    a = LeaseFence.campaign(conn, election, ttl_ms: 600_000)
    b_conn = conn
    c_conn = conn
    b_won = Thread.new { LeaseFence.campaign(b_conn, election, ttl_ms: 600_000, fair: true) }
    LFTest.wait_queued(election, 1)
    c_won = Thread.new { LeaseFence.campaign(c_conn, election, ttl_ms: 600_000, fair: true) }
    LFTest.wait_queued(election, 2)
    assert_equal [[1, b_conn.backend_pid], [2, c_conn.backend_pid]], LFTest.queue(election)

    assert_equal "released", a.resign
    b = b_won.value
    assert_operator b.term, :>, a.term
    assert_equal [[1, c_conn.backend_pid]], LFTest.queue(election), "the second candidate is next"
    assert c_won.alive?, "the second candidate won while the first leads"

    assert_equal "released", b.resign
    c = c_won.value
    assert_operator c.term, :>, b.term
    assert_equal "released", c.resign
  ensure
    [b_won, c_won].each { |t| t&.kill }
  end

  # leadership: the value (a newline, quotes, multibyte), term and identity
  # are what lease_fence.leader() shows while it leads; its fenced write
  # commits; at the end it resigned (leader() shows nobody, the last term).
  def test_value_is_visible_in_leader
    check = conn
    election = LFTest.resource("value")
    id = LFTest.new_account(check, "nobody", 100)
    value = "host-1:8080\n'quoted' \"twice\" — é"
    work = conn
    term = LeaseFence.leadership(conn, election, ttl_ms: 60_000, value: value) do |lead|
      row = leader_row(check, election)
      assert_equal ["t", lead.term.to_s, value], [row["held"], row["term"], row["value"]]
      assert_equal lead.identity, row["identity"] if row["identity"]
      assert_equal value, lead.value
      lead.fenced(work) { |c| c.exec_params("UPDATE account SET owner = 'leader' WHERE id = $1", [id]) }
      lead.term
    end
    assert_equal({ owner: "leader", balance: 100, fence: term }, LFTest.account(check, id))
    row = leader_row(check, election)
    assert_equal ["f", term.to_s, nil], [row["held"], row["term"], row["value"]]
  end

  # Another identity overwrites the election's key: the heartbeat's next
  # renew answers lost, lead.lost? turns true, lead.fenced raises
  # LeadershipLost (a LeaseLost) without running its block, and leadership
  # raises it; the other identity's key is untouched.
  def test_lost_renew_is_signalled_and_fenced_raises
    election = LFTest.resource("lost")
    thief = "f" * 32
    work = conn
    e = assert_raises(LeaseFence::LeadershipLost) do
      LeaseFence.leadership(conn, election, ttl_ms: 900) do |lead|
        LFTest.redis.set(LFTest.lease_key(election), thief, px: 60_000)
        LFTest.wait_until("the loss") { lead.lost? }
        assert_equal "lost", lead.lost_by.status
        f = assert_raises(LeaseFence::LeadershipLost) { lead.fenced(work) { flunk "ran" } }
        assert_kind_of LeaseFence::LeaseLost, f
      end
    end
    assert_equal "lost", e.status
    assert_equal thief, LFTest.redis.get(LFTest.lease_key(election))
    LFTest.redis.del(LFTest.lease_key(election))
  end

  # take_over takes a held lease: a generation above the holder's, the
  # holder's renew raises LeaseLost, its fenced write is refused by the
  # resource fence, the new holder's write stands.
  def test_take_over_takes_a_held_lease
    check = conn
    victim_conn = conn
    res = LFTest.resource("take")
    id = LFTest.new_account(check, "nobody", 100)
    victim = LeaseFence.acquire(victim_conn, res, ttl_ms: 60_000)
    taken = LeaseFence.take_over(conn, res, ttl_ms: 60_000)
    assert_equal [true, "acquired"], [taken.acquired, taken.status]
    assert_operator taken.generation, :>, victim.generation
    assert_raises(LeaseFence::LeaseLost) { LeaseFence.renew(victim_conn, victim, ttl_ms: 60_000) }
    e = assert_raises(LeaseFence::StaleGeneration) do
      LeaseFence.fenced(victim_conn, victim) { |c| c.exec_params("UPDATE account SET owner = 'victim' WHERE id = $1", [id]) }
    end
    assert_equal res, e.resource
    LeaseFence.fenced(check, taken) { |c| c.exec_params("UPDATE account SET owner = 'taker' WHERE id = $1", [id]) }
    assert_equal({ owner: "taker", balance: 100, fence: taken.generation }, LFTest.account(check, id))
    assert_equal "released", LeaseFence.release(check, taken)
  end

  # A job's transaction holds the resource (its transaction-scoped lease
  # fences it) and does not end: take_over with timeout_ms 100 raises
  # TakeOverTimeout (55P03) and takes nothing: the key still holds the job's
  # identity, and the job commits.
  def test_take_over_timeout_takes_nothing
    check = conn
    job_conn = conn
    res = LFTest.resource("timeout")
    id = LFTest.new_account(check, "nobody", 100)
    inside = Queue.new
    finish = Queue.new
    job = Thread.new do
      LeaseFence.job(job_conn, res, ttl_ms: 60_000) do |lease, c|
        c.exec_params("UPDATE account SET owner = 'job' WHERE id = $1", [id])
        inside << lease
        finish.pop
        lease
      end
    end
    lease = inside.pop
    e = assert_raises(LeaseFence::TakeOverTimeout) { LeaseFence.take_over(conn, res, ttl_ms: 60_000, timeout_ms: 100) }
    assert_kind_of LeaseFence::LeaseDenied, e
    assert_equal "timeout", e.status
    assert_equal "55P03", e.cause.result.error_field(PG::PG_DIAG_SQLSTATE)
    assert_equal lease.identity, LFTest.redis.get(LFTest.lease_key(res)), "nothing was taken"
    finish << true
    job.value
    assert_equal({ owner: "job", balance: 100, fence: lease.generation }, LFTest.account(check, id))
  end

  # A healthy idle leader keeps the election: TTL 600 ms, and after three
  # TTLs the key still holds its identity (its heartbeat renewed it), it is
  # not lost, and its fenced write commits.
  def test_heartbeat_keeps_an_idle_leader
    check = conn
    election = LFTest.resource("idle")
    id = LFTest.new_account(check, "nobody", 100)
    lead = LeaseFence.campaign(conn, election, ttl_ms: 600)
    sleep 1.8 # three TTLs, idle
    assert_equal lead.identity, LFTest.redis.get(LFTest.lease_key(election))
    refute lead.lost?
    lead.fenced(check) { |c| c.exec_params("UPDATE account SET owner = 'idle leader' WHERE id = $1", [id]) }
    assert_equal "released", lead.resign
    assert_equal({ owner: "idle leader", balance: 100, fence: lead.term }, LFTest.account(check, id))
  end

  # Bad arguments are ArgumentError, with nothing sent: the "connection" is
  # an object that fails the test at any call.
  def test_bad_arguments_are_refused_before_anything_is_sent
    untouchable = BasicObject.new
    def untouchable.method_missing(name, *) = ::Kernel.raise("the connection was used: #{name}")
    big = "x" * 1025
    [
      -> { LeaseFence.campaign(untouchable, "e", ttl_ms: 0) },
      -> { LeaseFence.campaign(untouchable, "", ttl_ms: 1000) },
      -> { LeaseFence.campaign(untouchable, nil, ttl_ms: 1000) },
      -> { LeaseFence.campaign(untouchable, "e", ttl_ms: 1000, wait_ms: -1) },
      -> { LeaseFence.campaign(untouchable, "e", ttl_ms: 1000, value: big) },
      -> { LeaseFence.campaign(untouchable, "e", ttl_ms: 1000, value: "é" * 513) },
      -> { LeaseFence.campaign(untouchable, "e", ttl_ms: 1000, scope: "transaction") },
      -> { LeaseFence.campaign(untouchable, "e", ttl_ms: 1000, fair: "yes") },
      -> { LeaseFence.leadership(untouchable, "e", ttl_ms: 1000, fair: nil) { flunk "ran" } },
      -> { LeaseFence.leadership(untouchable, "e", ttl_ms: 1000) },
      -> { LeaseFence.leadership(untouchable, "e", ttl_ms: -1) { flunk "ran" } },
      -> { LeaseFence.take_over(untouchable, "r", ttl_ms: 0) },
      -> { LeaseFence.take_over(untouchable, "", ttl_ms: 1000) },
      -> { LeaseFence.take_over(untouchable, "r", ttl_ms: 1000, timeout_ms: -1) },
      -> { LeaseFence.take_over(untouchable, "r", ttl_ms: 1000, scope: "transaction") }
    ].each_with_index do |call, i|
      assert_raises(ArgumentError, "call #{i}") { call.call }
    end
    # 1024 bytes is the limit, not over it
    lead = LeaseFence.campaign(conn, LFTest.resource("limit"), ttl_ms: 60_000, value: "x" * 1024, wait_ms: 1)
    assert_equal "released", lead.resign
  end
end

# frozen_string_literal: true

module LeaseFence
  CAMPAIGN_SQL = "SELECT status, identity, term, validity_ms, reason " \
                 "FROM lease_fence.campaign($1::text, $2::bigint, $3::bigint, $4::text, $5::text, $6::boolean)"
  RESIGN_SQL = "SELECT released, status, reason FROM lease_fence.resign($1::text, $2::text)"
  TAKE_OVER_SQL = "SELECT acquired, status, resource, identity, generation, validity_ms, reason " \
                  "FROM lease_fence.take_over($1::text, $2::bigint, $3::bigint, $4::text)"
  # the longest value a campaign takes, in bytes
  MAX_LEADER_VALUE = 1024

  # The leadership of an election was lost: a heartbeat renew answered
  # "lost" or "insufficient_validity", no renew was confirmed before the
  # lease's validity ran out ("expired"), or the leader resigned
  # ("resigned"). Raised by Leader#fenced and Leader#check! (nothing sent)
  # and by leadership when it was lost while the block ran. A LeaseLost.
  class LeadershipLost < LeaseLost; end

  # take_over: a transaction that fenced the resource did not end within
  # timeout_ms (SQLSTATE 55P03, the driver's error is +cause+). Nothing was
  # taken: a definite no, status "timeout".
  class TakeOverTimeout < LeaseDenied; end

  # A won election (LeaseFence.campaign / LeaseFence.leadership): +term+
  # (the generation the election's resource fence was raised to),
  # +identity+, +value+. A thread renews the election's lease every
  # ttl_ms / 3 on the campaign's connection, which is the election's until
  # resign: work on other connections. Lost when a renew answers lost or
  # insufficient_validity, or when no renew was confirmed before the
  # validity of the last one ran out (lost? reads the clock too); the
  # heartbeat then stops. A frozen process does not renew: its leadership
  # ends with the TTL.
  class Leader
    attr_reader :election, :identity, :term, :value, :validity_ms, :ttl_ms

    def initialize(conn, election, identity, term, value, ttl_ms, validity_ms, valid_until)
      @conn = conn
      @election = election
      @identity = identity
      @term = term
      @value = value
      @ttl_ms = ttl_ms
      @validity_ms = validity_ms
      @valid_until = valid_until
      @lease = Lease.new(acquired: true, status: "acquired", resource: election, identity: identity,
                         generation: term, validity_ms: validity_ms)
      @mutex = Mutex.new
      @wake = ConditionVariable.new
      @lost = nil
      @stopping = false
      @heartbeat = Thread.new { beat }
      @heartbeat.report_on_exception = false
    end

    # the election's lease (resource = election, generation = term)
    def lease
      @lease
    end

    # true once the leadership is lost (or resigned); sends nothing
    def lost?
      !lost_by.nil?
    end

    # the LeadershipLost of the loss, or nil
    def lost_by
      @mutex.synchronize do
        if @lost.nil? && LeaseFence.monotonic_ms >= @valid_until
          lose("expired", "no renew was confirmed before the lease's validity ran out")
        end
        @lost
      end
    end

    # raises LeadershipLost once the leadership is lost; sends nothing
    def check!
      e = lost_by
      raise LeadershipLost.new(e.status, @lease, e.message) if e
    end

    # One transaction on +work_conn+ (not the campaign's connection) whose
    # writes carry the term and that checks the election's resource fence:
    # LeaseFence.fenced(work_conn, term, resource: election). LeadershipLost
    # first, with nothing sent, once the loss is known; a newer leader's
    # term in the fence raises StaleGeneration. Yields the connection.
    def fenced(work_conn, &block)
      raise ArgumentError, "fenced needs a block" unless block

      check!
      if work_conn.equal?(@conn)
        raise ArgumentError, "the campaign's connection is the election's: write on another connection"
      end

      LeaseFence.fenced(work_conn, @term, resource: @election, &block)
    end

    # Stops the heartbeat, marks the leadership ended and runs
    # lease_fence.resign(election, identity) on the campaign's connection:
    # a waiting campaign wins at once. Returns the ReleaseStatus
    # ("released"; "not_held" when it was lost already; "unavailable" /
    # "unknown": it then ends by its TTL). Calling it again is safe.
    def resign
      stop
      @mutex.synchronize { lose("resigned", nil) }
      row = DB.for(@conn).alone(RESIGN_SQL, [@election, @identity])
      Translate.released(row["status"], row["reason"])
    end

    # stops the heartbeat and waits for it
    def stop
      @mutex.synchronize do
        @stopping = true
        @wake.broadcast
      end
      @heartbeat.join unless Thread.current.equal?(@heartbeat)
      nil
    end

    def inspect
      "#<LeaseFence::Leader election=#{@election.inspect} term=#{@term}#{@lost ? " lost" : ""}>"
    end

    private

    # with @mutex held
    def lose(status, reason)
      return if @lost

      @lost = LeadershipLost.new(status, @lease, "leadership of election #{@election.inspect} " \
                                                 "(term #{@term}) lost: #{status}", reason)
    end

    def beat
      every = [@ttl_ms / 3, 1].max
      loop do
        @mutex.synchronize do
          left = @valid_until - LeaseFence.monotonic_ms
          @wake.wait(@mutex, [every, left].min / 1000.0) if !@stopping && @lost.nil? && left.positive?
          return if @stopping || @lost

          if LeaseFence.monotonic_ms >= @valid_until
            lose("expired", "no renew was confirmed before the lease's validity ran out")
            return
          end
        end
        sent = LeaseFence.monotonic_ms
        begin
          validity = LeaseFence.renew(@conn, @lease, ttl_ms: @ttl_ms)
          @mutex.synchronize { @valid_until = sent + validity if @lost.nil? }
        rescue LeaseError => e
          if %w[lost insufficient_validity].include?(e.status)
            @mutex.synchronize { lose(e.status, "renew answered #{e.status}") }
            return
          end
          # unavailable, unknown, unreplicated: not confirmed; again until the validity ends
        rescue StandardError => e
          if @conn.respond_to?(:finished?) && @conn.finished?
            @mutex.synchronize { lose("expired", "the election's connection is closed: #{e.message}") }
            return
          end
        end
      end
    end
  end

  module_function

  def monotonic_ms
    Process.clock_gettime(Process::CLOCK_MONOTONIC, :millisecond)
  end

  # Wait on +conn+ to become the leader of +election+ (lease_fence.campaign:
  # woken by the leader's resign or its lease's end, no polling) and return
  # the Leader; its heartbeat then renews the lease on +conn+ every
  # ttl_ms / 3: +conn+ is the election's until lead.resign. +wait_ms+: give
  # up as a follower after that long (LeaseBusy); nil waits until the
  # statement is cancelled. +value+ (at most 1024 bytes) is shown by
  # lease_fence.leader() while this candidate leads. +scope+ "session"
  # (released when conn's session ends) or "explicit" (behind a
  # transaction-pooling proxy: kept until resign or the TTL).
  #
  # +fair+: true queues this candidate behind those that came before it
  # (lease_fence.campaign's fair: granted in arrival order).
  #
  # Raises ArgumentError before anything is sent; LeaseBusy (wait_ms ran
  # out), LeaseUnavailable (Redis unreachable: never a silent follower),
  # LeaseDenied (unreplicated, stale twice), LeaseUnknown (the server
  # released what it may have won).
  def campaign(conn, election, ttl_ms:, value: nil, wait_ms: nil, scope: "session", fair: false)
    params = campaign_params(election, ttl_ms, value, wait_ms, scope, fair)
    db = DB.for(conn)
    row = nil
    sent = nil
    2.times do
      sent = monotonic_ms
      row = db.alone(CAMPAIGN_SQL, params)
      break unless row["status"] == "stale" # stale wrote nothing: one more try is safe
    end
    lease = Lease.new(acquired: campaign_acquired(row["status"]), status: row["status"], resource: election,
                      identity: row["identity"], generation: Lease.int(row["term"]),
                      validity_ms: Lease.int(row["validity_ms"]), reason: row["reason"])
    raise Translate.lease_error(lease.acquired.nil? ? "unknown" : lease.status, lease, "campaign", lease.reason) unless
      lease.acquired == true && lease.identity && lease.generation

    Leader.new(conn, election, lease.identity, lease.generation, value, ttl_ms, lease.validity_ms || 0,
               sent + (lease.validity_ms || 0))
  end

  # Campaign on +conn+ (campaign), yield the Leader to the block, resign
  # at the end; returns the block's value. The block works on other
  # connections and writes with lead.fenced(work_conn) { |c| ... }. When
  # the leadership is lost, lead.lost? turns true and the next lead.fenced
  # (or lead.check!) raises LeadershipLost before sending anything; when
  # the block ends after a loss, leadership raises LeadershipLost. An
  # exception of the block propagates (the leader resigns all the same).
  def leadership(conn, election, ttl_ms:, value: nil, wait_ms: nil, scope: "session", fair: false)
    raise ArgumentError, "leadership needs a block" unless block_given?

    lead = campaign(conn, election, ttl_ms: ttl_ms, value: value, wait_ms: wait_ms, scope: scope, fair: fair)
    begin
      result = yield lead
    rescue Exception # rubocop:disable Lint/RescueException
      begin
        lead.resign
      rescue StandardError
        nil # keep the block's exception
      end
      raise
    end
    lead.stop
    lost = lead.lost_by
    lead.resign
    raise LeadershipLost.new(lost.status, lead.lease, lost.message, lost.reason) if lost

    result
  end

  # lease_fence.take_over, for operators and supervisors (EXECUTE is not
  # granted to PUBLIC): the lease on +resource+ whether or not someone
  # holds it, with a generation above every one granted for it, the
  # resource's fence raised to it. Returns the Lease. The victim's renew
  # raises LeaseLost; its fenced writes are refused.
  #
  # Raises ArgumentError before anything is sent; TakeOverTimeout (55P03: a
  # transaction that fenced the resource did not end within +timeout_ms+),
  # LeaseUnavailable (08006), LeaseUnknown (08007: the server released what
  # it may have taken) — each having taken nothing; the driver's error
  # otherwise (42501 without the grant).
  def take_over(conn, resource, ttl_ms:, timeout_ms: 5000, scope: "explicit")
    raise ArgumentError, "a resource is a non-empty String, got #{resource.inspect}" unless
      resource.is_a?(String) && !resource.empty?

    check_ms(ttl_ms, "ttl_ms", 1)
    check_ms(timeout_ms, "timeout_ms", 0)
    raise ArgumentError, "scope is \"explicit\" or \"session\", got #{scope.inspect}" unless
      %w[explicit session].include?(scope)

    db = DB.for(conn)
    row = begin
      db.alone(TAKE_OVER_SQL, [resource, ttl_ms, timeout_ms, scope])
    rescue StandardError => e
      mapped = take_over_error(resource, e)
      raise if mapped.nil?

      raise mapped
    end
    Translate.acquired(Lease.from_row(row))
  end

  # take_over's SQLSTATEs as the library's errors, else nil
  def take_over_error(resource, exc)
    state, message = sqlstate_of(exc)
    klass, status = { "55P03" => [TakeOverTimeout, "timeout"], "08006" => [LeaseUnavailable, "unavailable"],
                      "08007" => [LeaseUnknown, "unknown"] }[state]
    return nil unless klass

    lease = Lease.new(acquired: status == "unknown" ? nil : false, status: status, resource: resource)
    klass.new(status, lease, "take_over of lease #{resource.inspect}: #{status}", message)
  end

  # [SQLSTATE, primary message] of a PG::Error (or an error caused by one)
  def sqlstate_of(exc)
    err = exc
    4.times do
      break if err.nil?

      result = err.respond_to?(:result) ? err.result : nil
      if result.respond_to?(:error_field)
        return [result.error_field(PG::PG_DIAG_SQLSTATE), result.error_field(PG::PG_DIAG_MESSAGE_PRIMARY)]
      end

      err = err.cause
    end
    [nil, nil]
  end

  def campaign_acquired(status)
    case status
    when "acquired" then true
    when "unknown" then nil
    else false
    end
  end

  def campaign_params(election, ttl_ms, value, wait_ms, scope, fair)
    raise ArgumentError, "an election is a non-empty String, got #{election.inspect}" unless
      election.is_a?(String) && !election.empty?

    check_ms(ttl_ms, "ttl_ms", 1)
    check_ms(wait_ms, "wait_ms", 0) unless wait_ms.nil?
    raise ArgumentError, "a value is a String or nil, got #{value.class}" unless value.nil? || value.is_a?(String)
    if value && value.bytesize > MAX_LEADER_VALUE
      raise ArgumentError, "a leader's value is at most #{MAX_LEADER_VALUE} bytes, got #{value.bytesize}"
    end
    raise ArgumentError, "scope is \"session\" or \"explicit\", got #{scope.inspect}" unless
      %w[session explicit].include?(scope)
    check_fair(fair)

    [election, ttl_ms, wait_ms, value, scope, fair]
  end

  private_class_method :campaign_params, :campaign_acquired, :take_over_error, :sqlstate_of
end

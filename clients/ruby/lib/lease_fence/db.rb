# frozen_string_literal: true

module LeaseFence
  # Raised when a verb is handed a connection it cannot use: in a
  # transaction already, or of an unknown kind. Nothing was sent.
  class ConnectionError < ArgumentError; end

  ACQUIRE_SQL = "SELECT acquired, status, resource, identity, generation, validity_ms, reason " \
                "FROM lease_fence.acquire($1::text, $2::bigint, $3::bigint, $4::text, $5::bigint, $6::boolean, $7::boolean)"
  SET_GENERATION_SQL = "SELECT lease_fence.set_generation($1::bigint, $2::text)"
  RENEW_SQL = "SELECT renewed, status, validity_ms, reason " \
              "FROM lease_fence.renew($1::text, $2::text, $3::bigint, $4::bigint)"
  KEEPALIVE_STATE_SQL = "SELECT lease_fence.keepalive_state($1::text) AS state"
  RELEASE_SQL = "SELECT released, status, reason FROM lease_fence.release($1::text, $2::text)"

  BUSY_MSG = "lease_fence needs a connection that is not in a transaction (commit first)"

  # How the verbs talk to one kind of connection.
  module DB
    module_function

    def for(conn)
      if defined?(::PG::Connection) && conn.is_a?(::PG::Connection)
        PGConn.new(conn)
      elsif defined?(::ActiveRecord::ConnectionAdapters::AbstractAdapter) &&
            conn.is_a?(::ActiveRecord::ConnectionAdapters::AbstractAdapter)
        ARConn.new(conn)
      else
        raise ConnectionError, "expected a PG::Connection or an ActiveRecord connection, got #{conn.class}"
      end
    end

    # A PG::Connection: BEGIN / COMMIT / ROLLBACK sent by us.
    class PGConn
      def initialize(conn)
        @conn = conn
      end

      def check_idle
        raise ConnectionError, BUSY_MSG unless @conn.transaction_status == ::PG::PQTRANS_IDLE
      end

      def query_one(sql, params)
        LeaseFence.data_corrupted_errors { @conn.exec_params(sql, params).first }
      end

      # BEGIN and the first statement in one round trip: one simple-query
      # string, the values as literals (integers checked, text escaped by
      # the connection); the last statement's row
      def begin_with(sql, params)
        check_idle
        n = 0
        text = sql.gsub(/\$(\d+)/) do
          n += 1
          literal(params[Regexp.last_match(1).to_i - 1])
        end
        raise ArgumentError, "bad statement" unless n == params.size

        LeaseFence.data_corrupted_errors { @conn.exec("BEGIN; #{text}").first }
      end

      def literal(value)
        case value
        when nil then "NULL"
        when true then "true"
        when false then "false"
        when Integer then value.to_s
        when String then @conn.escape_literal(value)
        else raise ArgumentError, "cannot send #{value.class}"
        end
      end

      # BEGIN; the statement; the block; COMMIT (ROLLBACK on any exception).
      # A transaction that failed while the block went on (a statement
      # raised and the block rescued it) would be rolled back by COMMIT: it
      # is rolled back and TransactionRolledBack raised instead.
      def transaction(sql, params)
        check_idle # a caller's transaction is refused, never rolled back
        begin
          row = begin_with(sql, params)
          result = yield row
          if @conn.transaction_status == ::PG::PQTRANS_INERROR
            raise TransactionRolledBack, TransactionRolledBack::MESSAGE, cause: nil
          end

          @conn.exec("COMMIT")
          result
        rescue Exception # rubocop:disable Lint/RescueException
          rollback
          raise
        end
      end

      # ROLLBACK, unless the server has ended the transaction already (a
      # failed COMMIT ends it: a ROLLBACK then only draws a warning)
      def rollback
        return if @conn.transaction_status == ::PG::PQTRANS_IDLE

        @conn.exec("ROLLBACK")
      rescue StandardError
        nil # the connection broke: the server rolled back; keep the first error
      end

      # one statement, alone, on the idle connection (autocommit)
      def alone(sql, params)
        check_idle
        query_one(sql, params)
      end
    end

    # An ActiveRecord connection: its own transaction (so that models saved
    # in the block join it), our statements through exec_query with binds.
    class ARConn
      def initialize(conn)
        @conn = conn
      end

      def check_idle
        raise ConnectionError, BUSY_MSG if @conn.transaction_open?
      end

      def query_one(sql, params)
        binds = params.each_with_index.map do |v, i|
          ::ActiveRecord::Relation::QueryAttribute.new("$#{i + 1}", v, ::ActiveRecord::Type::Value.new)
        end
        LeaseFence.data_corrupted_errors do
          @conn.exec_query(sql, "LeaseFence", binds, prepare: false).first
        end
      end

      # ActiveRecord's transaction, begun, committed and rolled back through
      # its transaction manager (as ActiveRecord's own transaction block
      # does), so that:
      #   - a transaction that failed while the block went on (a statement
      #     raised, the block rescued it) raises TransactionRolledBack, rolled
      #     back, with that statement's error as cause — ActiveRecord would
      #     send COMMIT and PostgreSQL silently roll it back;
      #   - a COMMIT the server refused (LF010), which ends the transaction,
      #     is not followed by a ROLLBACK: ActiveRecord's own block sends one,
      #     and PostgreSQL warns "there is no transaction in progress".
      def transaction(sql, params)
        check_idle
        errors = StatementErrors.new(@conn)
        manager = @conn.transaction_manager
        @conn.lock.synchronize do
          tx = manager.begin_transaction(joinable: true)
          begin
            result = yield query_one(sql, params)
            if failed?
              raise TransactionRolledBack, TransactionRolledBack::MESSAGE, cause: errors.last_failure
            end
          rescue Exception # rubocop:disable Lint/RescueException
            manager.rollback_transaction
            raise
          end
          begin
            manager.commit_transaction # pops the transaction, whatever COMMIT answers
          rescue Exception # rubocop:disable Lint/RescueException
            # the refused COMMIT ended the transaction: no ROLLBACK after it
            # (ActiveRecord's rollback_transaction would send one); it is
            # rolled back, and its records' rollback callbacks run
            tx.state.full_rollback!
            tx.rollback_records
            raise
          end
          result
        end
      ensure
        errors&.stop
      end

      # whether the server has the transaction failed (libpq's status of the
      # adapter's PG::Connection); raw_connection turns off lazy transactions
      # until the connection is checked in: turned on again here
      def failed?
        manager = @conn.transaction_manager
        lazy = manager.lazy_transactions_enabled?
        raw = @conn.raw_connection
        manager.enable_lazy_transactions! if lazy
        raw.respond_to?(:transaction_status) && raw.transaction_status == ::PG::PQTRANS_INERROR
      end

      def alone(sql, params)
        check_idle
        query_one(sql, params)
      end
    end

    # The errors of the statements one ActiveRecord connection runs, from
    # its "sql.active_record" notifications, while a transaction runs.
    class StatementErrors
      IN_FAILED_TRANSACTION = "25P02"

      def initialize(conn)
        @conn = conn
        @errors = []
        @subscriber = ::ActiveSupport::Notifications.subscribe("sql.active_record") do |*, payload|
          err = payload[:exception_object]
          @errors << err if err && payload[:connection].equal?(@conn)
        end
      end

      # the error that failed the transaction: the last one recorded that is
      # not "current transaction is aborted" (the statements after it), as
      # a FenceError when it carries an LF SQLSTATE
      def last_failure
        err = @errors.reverse.find { |e| sqlstate(e) != IN_FAILED_TRANSACTION }
        mapped = err && LeaseFence.fence_error_from(err)
        return err unless mapped

        begin
          raise mapped, cause: err # as fence_errors raises it: the statement's error its cause
        rescue FenceError => e
          e
        end
      end

      def stop
        ::ActiveSupport::Notifications.unsubscribe(@subscriber)
      end

      private

      def sqlstate(err)
        result = err.cause.respond_to?(:result) ? err.cause.result : nil
        result.respond_to?(:error_field) ? result.error_field(::PG::PG_DIAG_SQLSTATE) : nil
      end
    end
  end
end

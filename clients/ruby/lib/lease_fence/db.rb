# frozen_string_literal: true

module LeaseFence
  # Raised when a verb is handed a connection it cannot use: in a
  # transaction already, or of an unknown kind. Nothing was sent.
  class ConnectionError < ArgumentError; end

  ACQUIRE_SQL = "SELECT acquired, status, resource, identity, generation, validity_ms, reason " \
                "FROM lease_fence.acquire($1::text, $2::bigint, $3::bigint, $4::text, $5::bigint, $6::boolean)"
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
        @conn.exec_params(sql, params).first
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

        @conn.exec("BEGIN; #{text}").first
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

      # BEGIN; the statement; the block; COMMIT (ROLLBACK on any exception)
      def transaction(sql, params)
        check_idle # a caller's transaction is refused, never rolled back
        begin
          row = begin_with(sql, params)
          result = yield row
          @conn.exec("COMMIT")
          result
        rescue Exception # rubocop:disable Lint/RescueException
          rollback
          raise
        end
      end

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
        @conn.exec_query(sql, "LeaseFence", binds, prepare: false).first
      end

      def transaction(sql, params)
        check_idle
        @conn.transaction do
          yield query_one(sql, params)
        end
      end

      def alone(sql, params)
        check_idle
        query_one(sql, params)
      end
    end
  end
end

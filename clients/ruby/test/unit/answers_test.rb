# frozen_string_literal: true

# The row -> result translation of every verb, without a server, against
# the answer table's "statuses" rows (scripts/answers.json; LF_ANSWERS
# names another copy): what acquire / try_acquire / renew / release do
# with a row of each status: return, nil ("none"), or which exception.
require "json"
require "minitest/autorun"
require "lease_fence/errors"
require "lease_fence/lease"

ANSWERS = ENV.fetch("LF_ANSWERS") { File.expand_path("../../../../scripts/answers.json", __dir__) }
STATUSES = JSON.parse(File.read(ANSWERS)).fetch("statuses")

class AnswersStatusesTest < Minitest::Test
  def self.row_lease(row)
    got = row["acquired"]
    LeaseFence::Lease.new(acquired: got, status: row["status"], resource: "r",
                          identity: got == false ? nil : "0" * 32,
                          generation: got == false ? nil : 42,
                          validity_ms: got ? 900 : nil, reason: nil)
  end

  def self.held_lease
    LeaseFence::Lease.new(acquired: true, status: "acquired", resource: "r", identity: "0" * 32,
                          generation: 42, validity_ms: 900)
  end

  def check(expect, &call)
    case expect
    when "return"
      refute_nil call.call
    when "none"
      assert_nil call.call
    else
      e = assert_raises(LeaseFence::LeaseError, &call)
      assert_equal expect, e.class.name.split("::").last, "expected #{expect}, raised #{e.class}"
    end
  end

  def test_the_table_has_a_row_for_each_verb
    %w[acquire renew release].each do |op|
      assert STATUSES.any? { |r| r["operation"] == op }, "no statuses row for #{op}"
    end
  end

  STATUSES.each do |row|
    op = row["operation"]
    status = row["status"]
    case op
    when "acquire"
      define_method("test_acquire_#{status}") do
        check(row["acquire"]) { LeaseFence::Translate.acquired(self.class.row_lease(row)) }
      end
      define_method("test_try_acquire_#{status}") do
        check(row["try_acquire"]) { LeaseFence::Translate.try_acquired(self.class.row_lease(row)) }
      end
    when "renew"
      define_method("test_renew_#{status}") do
        check(row["renew"]) do
          LeaseFence::Translate.renewed(row["renewed"], status, self.class.held_lease,
                                        row["renewed"] ? 900 : nil, nil)
        end
      end
    when "release"
      define_method("test_release_#{status}") do
        check(row["release"]) do
          got = LeaseFence::Translate.released(status, nil)
          assert_equal status, got
          got
        end
      end
    else
      define_method("test_unknown_operation_#{op}_#{status}") { flunk "unknown operation #{op}" }
    end
  end
end

# frozen_string_literal: true

# Two holders of one lease: the first stalls past its lease, a second takes
# it over and writes; the first one's late write is refused
# (LeaseFence::StaleGeneration) and the second one's write stands.
#
# Run against a database with lease_fence and a table "account" protected
# with lease_fence.protect('account'); connection from the PG* variables:
#   PGHOST=... PGDATABASE=appdb PGUSER=app ruby two_holders.rb
require "pg"
require "securerandom"
require "lease_fence"

resource = "example:two-holders:#{SecureRandom.hex(4)}"
first = PG.connect
second = PG.connect
id = first.exec("INSERT INTO account (owner) VALUES ('nobody') RETURNING id").getvalue(0, 0).to_i

a = LeaseFence.acquire(first, resource, ttl_ms: 30_000)
puts "first holder: generation #{a.generation}"

# the first holder stalls (a GC pause, a slow network) and its lease runs
# out; here it is given up, as if it had expired
LeaseFence.release(first, a)

b = LeaseFence.acquire(second, resource, ttl_ms: 30_000)
puts "second holder: generation #{b.generation}"
LeaseFence.fenced(second, b) do |c|
  c.exec_params("UPDATE account SET owner = 'second' WHERE id = $1", [id])
end

begin
  LeaseFence.fenced(first, a) do |c|
    c.exec_params("UPDATE account SET owner = 'first' WHERE id = $1", [id])
  end
  abort "the stale holder's write was accepted"
rescue LeaseFence::StaleGeneration => e
  puts "first holder's late write refused: #{e.class} (#{e.sqlstate}, resource #{e.resource})"
end

owner = second.exec_params("SELECT owner FROM account WHERE id = $1", [id]).getvalue(0, 0)
abort "the new holder's write did not stand (owner #{owner})" unless owner == "second"
puts "the row keeps the second holder's write"
LeaseFence.release(second, b)

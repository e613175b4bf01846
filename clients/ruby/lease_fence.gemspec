# frozen_string_literal: true

require_relative "lib/lease_fence/version"

Gem::Specification.new do |s|
  s.name = "lease_fence"
  s.version = LeaseFence::VERSION
  s.summary = "Fenced writes for Redis leases, checked by PostgreSQL (the lease_fence extension)"
  s.description = <<~TEXT
    The Ruby client of lease_fence, the PostgreSQL extension that fences stale
    writers: acquire, renew and release Redis leases through the extension,
    run transactions whose writes carry the lease's generation, and get the
    extension's refusals as exceptions mapped by SQLSTATE. Works with a
    PG::Connection or an ActiveRecord connection; an ActiveRecord model
    concern and a Sidekiq server middleware are included (both optional).
  TEXT
  s.license = "PostgreSQL"
  s.authors = ["lease_fence contributors"]
  s.files = Dir["lib/**/*.rb"] + ["README.md", "lease_fence.gemspec"]
  s.require_paths = ["lib"]
  s.required_ruby_version = ">= 2.7"
  s.add_runtime_dependency "pg", "~> 1.1"
  # optional, used only when the application loads them:
  #   activerecord >= 6.1 (lease_fence/active_record), sidekiq >= 6.4 (lease_fence/sidekiq)
end

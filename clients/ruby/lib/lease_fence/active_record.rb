# frozen_string_literal: true

require "active_record"
require "lease_fence"

module LeaseFence
  # A model concern for a table protected with lease_fence.protect(...):
  #
  #   class Account < ActiveRecord::Base
  #     include LeaseFence::Fenced
  #     fence_column :fence            # the default
  #   end
  #
  #   LeaseFence.fenced(ActiveRecord::Base.connection, lease) do
  #     account.update!(balance: 10)   # the row's fence becomes lease.generation
  #   end
  #
  # Inside LeaseFence.fenced / job / transaction_lease the transaction has a
  # current generation: the extension's trigger fences every row the model
  # saves (the fence column becomes the generation; a row holding a newer
  # one is refused). The concern makes the fence column read-only for the
  # model (the server writes it; reload to see it) and turns the
  # extension's refusals of save / save! / destroy / touch into
  # LeaseFence::FenceError subclasses (by SQLSTATE, the
  # ActiveRecord::StatementInvalid as +cause+). Optimistic locking
  # (lock_version) works alongside: ActiveRecord::StaleObjectError when the
  # row was changed since it was loaded, LeaseFence::StaleGeneration when a
  # newer lease holder fenced it.
  module Fenced
    extend ActiveSupport::Concern

    included do
      class_attribute :lease_fence_column, instance_writer: false, default: "fence"
      attr_readonly :fence
    end

    class_methods do
      # names the fence column (lease_fence.protect's column; "fence" by default)
      def fence_column(name)
        name = name.to_s
        raise ArgumentError, "fence_column: a column name, got #{name.inspect}" if name.empty?

        self.lease_fence_column = name
        attr_readonly name
      end
    end

    # the generation the row was last written under, as loaded
    def fence_generation
      self[self.class.lease_fence_column]
    end

    def save(*args, **options, &block)
      LeaseFence.fence_errors { super }
    end

    def save!(*args, **options, &block)
      LeaseFence.fence_errors { super }
    end

    def destroy
      LeaseFence.fence_errors { super }
    end

    def touch(*args, **options)
      LeaseFence.fence_errors { super }
    end
  end
end

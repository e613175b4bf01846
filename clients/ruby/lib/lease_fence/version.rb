# frozen_string_literal: true

module LeaseFence
  VERSION = "1.5.0"
end

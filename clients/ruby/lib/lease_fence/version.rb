# frozen_string_literal: true

module LeaseFence
  VERSION = "1.4.0"
end

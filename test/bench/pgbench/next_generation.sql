SELECT lease_fence.next_generation();

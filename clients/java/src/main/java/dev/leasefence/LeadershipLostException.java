package dev.leasefence;

/**
 * The leadership of an election was lost: a heartbeat renew answered
 * {@code lost} or {@code insufficient_validity}, no renew was confirmed before
 * the lease's validity ran out ({@code expired}), or the leader resigned
 * ({@code resigned}). Thrown by {@link Leader#check()} and
 * {@link Leader#fenced} (before anything is sent) and by
 * {@link LeaseFence#leadership} when it was lost while the work ran. A
 * {@link LeaseLostException}; {@link #lease()} carries the election, the
 * identity and the term (as generation).
 */
public class LeadershipLostException extends LeaseLostException {
    private static final long serialVersionUID = 1L;

    /** See {@link LeaseException#LeaseException}. */
    public LeadershipLostException(String status, Lease lease, String message, String reason) {
        super(status, lease, message, reason);
    }

    /** The election's name. */
    public String election() {
        return lease() == null ? null : lease().resource();
    }

    /** The term that was lost. */
    public Long term() {
        return lease() == null ? null : lease().generation();
    }
}

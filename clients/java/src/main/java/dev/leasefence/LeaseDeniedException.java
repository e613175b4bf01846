package dev.leasefence;

/**
 * A definite no: {@code acquired} / {@code renewed} is false. Thrown as is for
 * {@code stale}, {@code insufficient_validity} and {@code unreplicated}; its
 * subclasses are {@link LeaseBusyException}, {@link LeaseUnavailableException}
 * and {@link LeaseLostException}. Safe to treat as "not mine".
 */
public class LeaseDeniedException extends LeaseException {
    private static final long serialVersionUID = 1L;

    /** See {@link LeaseException#LeaseException}. */
    public LeaseDeniedException(String status, Lease lease, String message, String reason) {
        super(status, lease, message, reason);
    }
}

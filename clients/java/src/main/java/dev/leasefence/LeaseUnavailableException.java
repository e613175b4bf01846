package dev.leasefence;

/**
 * Nothing was sent (Redis unreachable or refusing): definitely not applied.
 * {@link #reason()} says why.
 */
public class LeaseUnavailableException extends LeaseDeniedException {
    private static final long serialVersionUID = 1L;

    /** See {@link LeaseException#LeaseException}. */
    public LeaseUnavailableException(String status, Lease lease, String message, String reason) {
        super(status, lease, message, reason);
    }
}

package dev.leasefence;

/**
 * Someone else holds the lease (after {@code waitMs}, if one was given).
 */
public class LeaseBusyException extends LeaseDeniedException {
    private static final long serialVersionUID = 1L;

    /** See {@link LeaseException#LeaseException}. */
    public LeaseBusyException(String status, Lease lease, String message, String reason) {
        super(status, lease, message, reason);
    }
}

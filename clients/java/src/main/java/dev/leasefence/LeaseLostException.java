package dev.leasefence;

/**
 * renew: the key is gone or holds another identity; it was not recreated.
 * Stop working under the lease.
 */
public class LeaseLostException extends LeaseDeniedException {
    private static final long serialVersionUID = 1L;

    /** See {@link LeaseException#LeaseException}. */
    public LeaseLostException(String status, Lease lease, String message, String reason) {
        super(status, lease, message, reason);
    }
}

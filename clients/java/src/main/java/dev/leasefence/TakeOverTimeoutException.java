package dev.leasefence;

/**
 * {@link LeaseFence#takeOver}: a transaction that fenced the resource (the
 * holder's job or transaction-scoped lease, or its {@code fence_resource})
 * did not end within the timeout (SQLSTATE 55P03, the driver's exception is
 * the cause). Nothing was taken: a definite no, status {@code timeout}.
 */
public class TakeOverTimeoutException extends LeaseDeniedException {
    private static final long serialVersionUID = 1L;

    /** See {@link LeaseException#LeaseException}. */
    public TakeOverTimeoutException(String status, Lease lease, String message, String reason) {
        super(status, lease, message, reason);
    }
}

package dev.leasefence;

/**
 * The request may have been applied ({@code acquired IS NULL}, status
 * {@code unknown}): a timeout after sending, a lost connection. Not a
 * {@link LeaseDeniedException}: do not proceed, and do not treat the resource
 * as free — it may be held under {@code lease().identity()} until its TTL runs
 * out. The backend already tried a bounded conditional release;
 * {@code LeaseFence.release(conn, e.lease())} is safe to call again. Retry
 * later with a new acquire, never a forced DEL.
 */
public class LeaseUnknownException extends LeaseException {
    private static final long serialVersionUID = 1L;

    /** See {@link LeaseException#LeaseException}. */
    public LeaseUnknownException(String status, Lease lease, String message, String reason) {
        super(status, lease, message, reason);
    }
}

package dev.leasefence;

import java.sql.SQLException;

/**
 * A lease operation ({@code acquire}, {@code renew}) that did not succeed.
 *
 * <p>The split that matters is <em>no</em> versus <em>don't know</em>:
 * {@link LeaseDeniedException} (busy, unavailable, lost, stale,
 * insufficient_validity, unreplicated) is a definite no; {@link LeaseUnknownException}
 * (the extension answered {@code acquired IS NULL}) means the request may
 * have been applied, and is deliberately not a LeaseDeniedException.
 *
 * <p>An {@link SQLException} (SQLSTATE null) so that one {@code throws SQLException}
 * covers the library; catch the subclasses you mean.
 */
public class LeaseException extends SQLException {
    private static final long serialVersionUID = 1L;

    private final String status;
    private final transient Lease lease;
    private final String reason;

    /**
     * @param status  the extension's status ({@code busy}, {@code unknown}, ...)
     * @param lease   the lease concerned: for acquire, the row it returned
     * @param message what failed
     * @param reason  why, for unavailable, unknown and unreplicated; else null
     */
    public LeaseException(String status, Lease lease, String message, String reason) {
        super(reason == null ? message : message + " (" + reason + ")");
        this.status = status;
        this.lease = lease;
        this.reason = reason;
    }

    /** The extension's status: {@code busy}, {@code unavailable}, {@code unknown}, {@code lost}, ... */
    public String status() {
        return status;
    }

    /** The lease concerned: for acquire the row it returned (identity and
     * generation are set for {@code unknown}), for renew the lease passed. */
    public Lease lease() {
        return lease;
    }

    /** Why, for {@code unavailable}, {@code unknown} and {@code unreplicated}
     * (text for humans and logs); null otherwise. */
    public String reason() {
        return reason;
    }
}

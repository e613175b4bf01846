package dev.leasefence;

/**
 * What {@code lease_fence.release} answered. {@link LeaseFence#releaseOutcome}
 * also gives the reason.
 */
public enum ReleaseStatus {
    /** Deleted: the key held this identity. */
    RELEASED("released"),
    /** The key is gone (expired) or someone else's: left alone. */
    NOT_HELD("not_held"),
    /** Nothing was sent (Redis unreachable or refusing): the lease expires by its TTL;
     * calling release again is safe. */
    UNAVAILABLE("unavailable"),
    /** The request may have been applied: the lease expires by its TTL; calling
     * release again is safe. */
    UNKNOWN("unknown");

    private final String status;

    ReleaseStatus(String status) {
        this.status = status;
    }

    /** The extension's status text: {@code released}, {@code not_held}, ... */
    public String status() {
        return status;
    }

    /**
     * The constant for the extension's status text.
     *
     * @throws IllegalArgumentException for a status release does not report
     */
    public static ReleaseStatus of(String status) {
        for (ReleaseStatus s : values()) {
            if (s.status.equals(status)) {
                return s;
            }
        }
        throw new IllegalArgumentException("not a release status: " + status);
    }

    @Override
    public String toString() {
        return status;
    }
}

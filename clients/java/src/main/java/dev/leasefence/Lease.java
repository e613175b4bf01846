package dev.leasefence;

/**
 * A lease: one row of {@code lease_fence.acquire}.
 *
 * <p>For a granted lease {@code acquired} is {@code TRUE}, {@code status} is
 * {@code "acquired"}, and {@code identity}, {@code generation} and
 * {@code validityMs} are set. The row in a {@link LeaseException} may be any
 * outcome: {@code acquired} is {@code FALSE} for a definite no and
 * {@code null} for {@code unknown} (then identity and generation are set).
 * {@code reason} says why for {@code unavailable}, {@code unknown} and
 * {@code unreplicated}, and is null otherwise.
 *
 * <p>For the explicit scope keep {@code resource}, {@code identity} and
 * {@code generation} (e.g. across processes or behind PgBouncer) and rebuild
 * the lease with {@link #Lease(String, String, long, long)}.
 *
 * @param resource   the resource name
 * @param identity   the 128-bit random identity (32 lower-case hex digits), or null
 * @param generation the lease's generation, or null when none was drawn
 * @param validityMs the validity left when granted, in ms, or null
 * @param acquired   TRUE, FALSE, or null (unknown)
 * @param status     the extension's status
 * @param reason     why, for unavailable / unknown / unreplicated; else null
 */
public record Lease(String resource, String identity, Long generation, Long validityMs,
                    Boolean acquired, String status, String reason) {

    /** A granted lease from its parts (e.g. kept by the application between transactions). */
    public Lease(String resource, String identity, long generation, long validityMs) {
        this(resource, identity, generation, validityMs, Boolean.TRUE, "acquired", null);
    }

    /** True when the lease was granted ({@code acquired IS TRUE}). */
    public boolean isAcquired() {
        return Boolean.TRUE.equals(acquired);
    }

    /** True when the outcome is unknown ({@code acquired IS NULL}). */
    public boolean isUnknown() {
        return acquired == null;
    }
}

package dev.leasefence;

/**
 * One row of {@code lease_fence.release}.
 *
 * @param released TRUE (released), FALSE (not_held, unavailable) or null (unknown)
 * @param status   the status
 * @param reason   why, for unavailable and unknown; else null
 */
public record ReleaseOutcome(Boolean released, ReleaseStatus status, String reason) {
}

package dev.leasefence;

/**
 * The options of the verbs that acquire a lease ({@link LeaseFence#acquire},
 * {@link LeaseFence#tryAcquire}, {@link LeaseFence#acquireOutcome},
 * {@link LeaseFence#transactionLease}, {@link LeaseFence#job},
 * {@link LeaseFence#keptAliveLease}) beyond their positional arguments:
 * immutable; start from {@link #DEFAULTS} and change with {@link #fair(boolean)}.
 *
 * @param fair wait in the resource's queue ({@code lease_fence.acquire}'s
 *             {@code fair}): waiters are granted in the order they came, and
 *             a wait of 0 answers busy while anyone is queued too
 */
public record LeaseOptions(boolean fair) {

    /** Not fair: what the verbs without options send. */
    public static final LeaseOptions DEFAULTS = new LeaseOptions(false);

    /** These options with {@code fair}. */
    public LeaseOptions fair(boolean fair) {
        return new LeaseOptions(fair);
    }
}

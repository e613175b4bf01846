package dev.leasefence;

/**
 * A session-scoped lease that the server's keep-alive worker renews while
 * {@link LeaseFence#keptAliveLease} runs its work, and that a watcher thread
 * checks with {@code lease_fence.keepalive_state(identity)} on another
 * connection.
 *
 * <p>{@link #isLost()} and {@link #check()} read what the watcher last saw;
 * they send nothing. Thread-safe.
 */
public final class KeptAliveLease {
    private final Lease lease;
    private volatile LeaseException stopped;

    KeptAliveLease(Lease lease) {
        this.lease = lease;
    }

    /** The granted lease (status {@code acquired}, scope session). */
    public Lease lease() {
        return lease;
    }

    /** The resource name. */
    public String resource() {
        return lease.resource();
    }

    /** The lease's identity. */
    public String identity() {
        return lease.identity();
    }

    /** The lease's generation. */
    public long generation() {
        return lease.generation();
    }

    /**
     * True once the watcher saw the lease no longer kept alive
     * ({@code keepalive_state} {@code lost} or null), or could not ask.
     */
    public boolean isLost() {
        return stopped != null;
    }

    /**
     * Throws what stopped the work, if anything did: a {@link LeaseLostException}
     * (status {@code lost}) when the lease is no longer kept alive, a
     * {@link LeaseUnknownException} when the watch connection failed (its
     * cause the driver's exception). Returns quietly while the lease is kept alive.
     */
    public void check() throws LeaseException {
        LeaseException e = stopped;
        if (e != null) {
            throw fresh(e);
        }
    }

    /** A new exception like e (thrown here, not on the watcher's thread), e its cause. */
    static LeaseException fresh(LeaseException e) {
        LeaseException t = e instanceof LeaseUnknownException
                ? new LeaseUnknownException(e.status(), e.lease(), e.getMessage(), null)
                : new LeaseLostException(e.status(), e.lease(), e.getMessage(), null);
        t.initCause(e);
        return t;
    }

    /** What stopped the work, or null. */
    LeaseException stoppedBy() {
        return stopped;
    }

    void stop(LeaseException e) {
        stopped = e;
    }

    @Override
    public String toString() {
        return "KeptAliveLease[" + lease + (stopped != null ? ", lost" : "") + "]";
    }
}

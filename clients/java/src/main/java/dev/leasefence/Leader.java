package dev.leasefence;

import java.sql.Connection;
import java.sql.SQLException;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;

import org.postgresql.PGConnection;

/**
 * A won election ({@link LeaseFence#campaign}, {@link LeaseFence#leadership}):
 * its term (the generation the election's resource fence was raised to),
 * identity and value.
 *
 * <p>A daemon thread renews the election's lease with
 * {@code lease_fence.renew(election, identity, ttlMs)} every {@code ttlMs / 3}
 * on the campaign's connection, which is the election's until {@link #resign()}:
 * work on other connections. The leadership is lost when a renew answers
 * {@code lost} or {@code insufficient_validity}, or when no renew was
 * confirmed before the validity of the last one ran out (a renew still
 * running then is cancelled); the heartbeat then stops, {@link #isLost()}
 * turns true, and the thread running {@link LeaseFence#leadership}'s work is
 * interrupted. A frozen process does not renew: its leadership ends with the
 * TTL. Thread-safe.
 */
public final class Leader implements AutoCloseable {
    private static final ScheduledExecutorService DEADLINES = Executors.newSingleThreadScheduledExecutor(r -> {
        Thread t = new Thread(r, "lease_fence leader deadlines");
        t.setDaemon(true);
        return t;
    });

    private final Connection conn;
    private final String election;
    private final String identity;
    private final long term;
    private final String value;
    private final long ttlMs;
    private final long validityMs;
    private final Lease lease;
    private final Object lock = new Object();
    private volatile LeadershipLostException lost;
    private boolean stopping;
    private Thread heartbeat;
    private Thread workThread;
    private boolean interruptedWork;

    Leader(Connection conn, String election, String identity, long term, String value, long ttlMs,
           long validityMs) {
        this.conn = conn;
        this.election = election;
        this.identity = identity;
        this.term = term;
        this.value = value;
        this.ttlMs = ttlMs;
        this.validityMs = validityMs;
        this.lease = new Lease(election, identity, term, validityMs);
    }

    /** The election's name. */
    public String election() {
        return election;
    }

    /** The leader's identity (of the election's lease). */
    public String identity() {
        return identity;
    }

    /** The term: the generation of this leadership. */
    public long term() {
        return term;
    }

    /** The value given to the campaign, or null. */
    public String value() {
        return value;
    }

    /** The validity left when won, in ms. */
    public long validityMs() {
        return validityMs;
    }

    /** The election's lease (resource = election, generation = term). */
    public Lease lease() {
        return lease;
    }

    /** True once the leadership is lost (or resigned). Sends nothing. */
    public boolean isLost() {
        return lost != null;
    }

    /** Throws a {@link LeadershipLostException} once the leadership is lost; sends nothing. */
    public void check() throws LeadershipLostException {
        LeadershipLostException e = lost;
        if (e != null) {
            LeadershipLostException t = new LeadershipLostException(e.status(), lease,
                    e.getMessage(), null);
            t.initCause(e);
            throw t;
        }
    }

    /**
     * One transaction on {@code workConn} whose writes carry the term and that
     * checks the election's resource fence:
     * {@link LeaseFence#fenced(Connection, long, String, FencedWork) fenced(workConn, term, election, work)}.
     * Throws {@link LeadershipLostException} first, with nothing sent, once the
     * loss is known; a newer leader's term in the fence throws
     * {@link StaleGenerationException}.
     *
     * @throws IllegalArgumentException workConn is the election's connection
     */
    public <T> T fenced(Connection workConn, FencedWork<T> work) throws SQLException {
        check();
        if (workConn == conn) {
            throw new IllegalArgumentException("the campaign's connection is the election's: "
                    + "write on another connection");
        }
        return LeaseFence.fenced(workConn, term, election, work);
    }

    /**
     * Stops the heartbeat, marks the leadership ended and runs
     * {@code lease_fence.resign(election, identity)} on the campaign's
     * connection: a waiting campaign wins at once. Returns
     * {@link ReleaseStatus#RELEASED}, {@link ReleaseStatus#NOT_HELD} (it was lost
     * already), {@link ReleaseStatus#UNAVAILABLE} or {@link ReleaseStatus#UNKNOWN}
     * (it then ends by its TTL). Calling it again is safe.
     */
    public ReleaseStatus resign() throws SQLException {
        stopHeartbeat();
        lose("resigned", "resigned");
        return LeaseFence.resignOutcome(conn, election, identity).status();
    }

    /** {@link #resign()}. */
    @Override
    public void close() throws SQLException {
        resign();
    }

    /** The exception of the loss, or null. */
    LeadershipLostException lostBy() {
        return lost;
    }

    void startHeartbeat(long validUntilNanos, Thread work) {
        synchronized (lock) {
            workThread = work;
            heartbeat = new Thread(() -> beat(validUntilNanos), "lease_fence leader heartbeat");
            heartbeat.setDaemon(true);
            heartbeat.start();
        }
    }

    private void lose(String status, String why) {
        synchronized (lock) {
            if (lost != null) {
                return;
            }
            lost = new LeadershipLostException(status, lease, "leadership of election \""
                    + election + "\" (term " + term + ") lost: " + status, why);
            if (workThread != null && !stopping) {
                interruptedWork = true;
                workThread.interrupt();
            }
        }
    }

    private void beat(long validUntil) {
        long every = Math.max(1, ttlMs / 3);
        for (;;) {
            long leftMs = TimeUnit.NANOSECONDS.toMillis(validUntil - System.nanoTime());
            synchronized (lock) {
                if (!stopping && leftMs > 0) {
                    try {
                        lock.wait(Math.min(every, leftMs));
                    } catch (InterruptedException e) {
                        return;
                    }
                }
                if (stopping) {
                    return;
                }
            }
            if (System.nanoTime() - validUntil >= 0) {
                lose("expired", "no renew was confirmed before the lease's validity ran out");
                return;
            }
            // a renew may not outlive the validity: cancelled at its end
            ScheduledFuture<?> deadline = DEADLINES.schedule(this::cancelRenew,
                    validUntil - System.nanoTime(), TimeUnit.NANOSECONDS);
            long sent = System.nanoTime();
            try {
                long v = LeaseFence.renew(conn, lease, ttlMs);
                validUntil = sent + TimeUnit.MILLISECONDS.toNanos(v);
            } catch (LeaseException e) {
                if ("lost".equals(e.status()) || "insufficient_validity".equals(e.status())) {
                    lose(e.status(), "renew answered " + e.status());
                    return;
                }
                // unavailable, unknown, unreplicated: not confirmed; again until the validity ends
            } catch (SQLException | RuntimeException e) {
                try {
                    if (conn.isClosed()) {
                        lose("expired", "the election's connection is closed: " + e.getMessage());
                        return;
                    }
                } catch (SQLException closed) {
                    lose("expired", "the election's connection failed: " + e.getMessage());
                    return;
                }
            } finally {
                deadline.cancel(false);
            }
        }
    }

    private void cancelRenew() {
        try {
            if (conn.isWrapperFor(PGConnection.class)) {
                conn.unwrap(PGConnection.class).cancelQuery();
            }
        } catch (SQLException e) {
            // the loss is declared by the heartbeat at the validity's end
        }
    }

    /** Stops the heartbeat and waits for it; clears the interrupt it caused on this thread. */
    void stopHeartbeat() {
        Thread t;
        synchronized (lock) {
            stopping = true;
            lock.notifyAll();
            t = heartbeat;
        }
        boolean otherInterrupt = false;
        while (t != null && t != Thread.currentThread()) {
            try {
                t.join();
                break;
            } catch (InterruptedException e) {
                otherInterrupt = true;
            }
        }
        boolean ours;
        synchronized (lock) {
            ours = interruptedWork && workThread == Thread.currentThread();
        }
        boolean pending = Thread.interrupted();
        if (!ours && (otherInterrupt || pending)) {
            Thread.currentThread().interrupt();
        }
    }

    @Override
    public String toString() {
        return "Leader[election=" + election + ", term=" + term + (lost != null ? ", lost" : "") + "]";
    }
}

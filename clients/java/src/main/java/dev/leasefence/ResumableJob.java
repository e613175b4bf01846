package dev.leasefence;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;

/**
 * A job running under an explicit lease with a fenced checkpoint
 * ({@link LeaseFence#resumableJob}).
 *
 * <p>Its {@link #connection()} is inside a transaction that fenced
 * {@link #resource()} at {@link #generation()}: every write the body makes
 * there carries the lease's generation, and the resource's fence row stays
 * locked until the transaction ends, so that a successor's fence waits for
 * it. {@link #checkpoint(String)} commits the body's writes together with the
 * new checkpoint and opens the next transaction. Not thread-safe: use it
 * from the thread that runs the body.
 */
public final class ResumableJob {

    private final Connection conn;
    private final Lease lease;
    private final long ttlMs;
    private final String resumeFrom;
    private final Long resumedGeneration;
    /** the first failure of a checkpoint: the job cannot go on after it */
    private SQLException broken;

    ResumableJob(Connection conn, Lease lease, long ttlMs, String resumeFrom,
                 Long resumedGeneration) {
        this.conn = conn;
        this.lease = lease;
        this.ttlMs = ttlMs;
        this.resumeFrom = resumeFrom;
        this.resumedGeneration = resumedGeneration;
    }

    /** The connection the lease was taken on; the body writes here, inside the open transaction. */
    public Connection connection() {
        return conn;
    }

    /** The explicit lease the job runs under. */
    public Lease lease() {
        return lease;
    }

    /** The lease's resource. */
    public String resource() {
        return lease.resource();
    }

    /** The lease's generation: the job's writes and checkpoints carry it. */
    public long generation() {
        return lease.generation();
    }

    /** The lease's identity (32 hex digits). */
    public String identity() {
        return lease.identity();
    }

    /**
     * The newest committed checkpoint of the resource when the job started,
     * as JSON text (PostgreSQL's {@code jsonb} text form), or null when there
     * was none: where a job that a previous holder left unfinished resumes.
     */
    public String resumeFrom() {
        return resumeFrom;
    }

    /** The generation that wrote {@link #resumeFrom()}, or null when there was none. */
    public Long resumedGeneration() {
        return resumedGeneration;
    }

    /** The failure that ended the job early, or null (package-private: resumableJob). */
    SQLException broken() {
        return broken;
    }

    /**
     * Records progress: renews the lease for the job's TTL
     * ({@code lease_fence.renew}), writes {@code jsonState} as the resource's
     * checkpoint at this generation ({@code lease_fence.checkpoint}), COMMITs
     * — the body's writes since the last checkpoint commit with it, atomically
     * — and opens the next fenced transaction
     * ({@code lease_fence.set_generation(generation, resource)}).
     *
     * <p>On any failure the transaction is rolled back (the writes since the
     * last checkpoint are gone) and the job cannot go on: every later
     * checkpoint throws the same exception, and {@code resumableJob} throws it
     * even if the body returns.
     *
     * @param jsonState the state as JSON text (an object, array, string, number, ...)
     * @return the generation the checkpoint was written at
     * @throws LeaseLostException        the lease is gone (expired or taken): nothing written
     * @throws LeaseUnknownException     the renew's outcome is unknown: nothing written
     * @throws LeaseUnavailableException Redis unavailable: nothing written
     * @throws StaleGenerationException  LF001: a newer generation fenced the resource
     * @throws LeaseLostAtCommitException LF010: the lease was lost in this transaction
     * @throws SQLException              22023 for JSON over 1 MB, 22P02 for text that is not JSON, ...
     * @throws IllegalArgumentException  a null state (nothing sent)
     */
    public long checkpoint(String jsonState) throws SQLException {
        if (jsonState == null) {
            throw new IllegalArgumentException("checkpoint needs a state (JSON text), got null");
        }
        if (broken != null) {
            throw broken;
        }
        try {
            try (PreparedStatement ps = conn.prepareStatement(
                    "SELECT renewed, status, validity_ms, reason FROM lease_fence.renew("
                    + "CAST(? AS text), CAST(? AS text), CAST(? AS bigint), CAST(? AS bigint))")) {
                ps.setString(1, lease.resource());
                ps.setString(2, lease.identity());
                ps.setLong(3, ttlMs);
                ps.setLong(4, 0);
                try (ResultSet rs = ps.executeQuery()) {
                    if (!rs.next()) {
                        throw new SQLException("lease_fence.renew returned no row");
                    }
                    boolean renewed = rs.getBoolean("renewed");
                    Boolean r = rs.wasNull() ? null : renewed;
                    long v = rs.getLong("validity_ms");
                    Long validity = rs.wasNull() ? null : v;
                    LeaseFence.renewResult(lease, r, rs.getString("status"), validity,
                            rs.getString("reason"));
                }
            }
            long written;
            try (PreparedStatement ps = conn.prepareStatement(
                    "SELECT lease_fence.checkpoint(CAST(? AS text), CAST(? AS jsonb))")) {
                ps.setString(1, lease.resource());
                ps.setString(2, jsonState);
                try (ResultSet rs = ps.executeQuery()) {
                    rs.next();
                    written = rs.getLong(1);
                }
            }
            conn.commit();
            LeaseFence.setGeneration(conn, lease.generation(), lease.resource());
            return written;
        } catch (SQLException e) {
            SQLException mapped = LeaseFence.translate(e);
            try {
                conn.rollback();
            } catch (SQLException r) {
                mapped.addSuppressed(r);
            }
            broken = mapped;
            throw mapped;
        }
    }
}

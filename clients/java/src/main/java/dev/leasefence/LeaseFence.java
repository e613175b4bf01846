package dev.leasefence;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Types;
import java.util.ArrayList;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Optional;
import java.util.Set;

import org.postgresql.core.BaseConnection;
import org.postgresql.core.TransactionState;
import org.postgresql.util.PSQLException;
import org.postgresql.util.ServerErrorMessage;

/**
 * lease_fence from Java, over plain JDBC with pgjdbc.
 *
 * <p>Nothing here talks to Redis: the extension does, from inside PostgreSQL.
 * These static methods call {@code lease_fence.acquire / renew / release},
 * set the generation, and turn the extension's answers into exceptions.
 *
 * <p>Each method runs its own transaction on the connection it is given, and
 * refuses (SQLSTATE 25001) to start inside one the caller opened: use a
 * connection in autocommit mode, or one whose transaction was committed.
 * A connection is not thread-safe: use one per thread.
 *
 * <ul>
 * <li>{@link #acquire} / {@link #tryAcquire}: an explicit-scope lease; it outlives
 *     the transaction and is released with {@link #release}.</li>
 * <li>{@link #fenced}: one transaction whose writes carry the lease's generation,
 *     fencing its resource too.</li>
 * <li>{@link #renew}, {@link #release}, {@link #releaseOutcome}.</li>
 * <li>{@link #transactionLease}: a transaction-scoped lease for one transaction.</li>
 * <li>{@link #job}: the same, for a job that is one transaction, in the fewest
 *     round trips.</li>
 * <li>{@link #translate} / {@link #fenceException}: any SQLException (or a
 *     framework's wrapper) to a {@link FenceException}, for code that writes
 *     outside {@link #fenced} (Spring, Hibernate, jOOQ).</li>
 * </ul>
 */
public final class LeaseFence {

    /** The library's version. */
    public static final String VERSION = "1.3.0";

    private LeaseFence() {
    }

    // ------------------------------------------------------------------
    // Fence errors
    // ------------------------------------------------------------------

    /**
     * The {@link FenceException} for {@code e}, or {@code e} itself.
     *
     * <p>Looks at {@code e}, its causes and its {@link SQLException#getNextException()
     * next exceptions} (a {@code BatchUpdateException}'s), for the first one whose
     * SQLSTATE is LF001, LF002, LF003, LF004 or LF010, and returns the matching
     * {@link StaleGenerationException}, ... with the error's fields (schema,
     * table, column, and the constraint as the resource) from pgjdbc's
     * {@link ServerErrorMessage}, and that driver exception as cause. Any other
     * exception is returned unchanged. Never reads the message text.
     */
    public static SQLException translate(SQLException e) {
        if (e == null) {
            return null;
        }
        Optional<FenceException> mapped = fenceException(e);
        return mapped.isPresent() ? mapped.get() : e;
    }

    /**
     * The {@link FenceException} in {@code t} (itself, its causes, next
     * exceptions of SQLExceptions among them), if any: for framework exceptions
     * that wrap the driver's, such as Spring's {@code DataAccessException} or
     * Hibernate's {@code JDBCException}.
     */
    public static Optional<FenceException> fenceException(Throwable t) {
        // the first exception with an LF SQLSTATE and the server's fields; a
        // BatchUpdateException carries the SQLSTATE without them, the driver's
        // exception with them is its next exception: prefer that one
        List<SQLException> found = new ArrayList<>();
        Set<Throwable> seen = Collections.newSetFromMap(new IdentityHashMap<>());
        collect(t, seen, found, 0);
        SQLException best = null;
        for (SQLException e : found) {
            if (e instanceof FenceException) {
                return Optional.of((FenceException) e);
            }
            if (serverMessage(e) != null) {
                best = e;
                break;
            }
            if (best == null) {
                best = e;
            }
        }
        return best == null ? Optional.empty() : Optional.of(fromDriver(best));
    }

    private static final Set<String> FENCE_STATES = Set.of(StaleGenerationException.SQLSTATE,
            MissingGenerationException.SQLSTATE, ConflictingGenerationException.SQLSTATE,
            UnissuedGenerationException.SQLSTATE, LeaseLostAtCommitException.SQLSTATE);

    /** SQLExceptions with a fence SQLSTATE in t, its causes and next exceptions, in order. */
    private static void collect(Throwable t, Set<Throwable> seen, List<SQLException> found,
                                int depth) {
        for (; t != null && depth < 64 && seen.add(t); t = t.getCause(), depth++) {
            if (t instanceof FenceException) {
                found.add((SQLException) t);
                return;
            }
            if (t instanceof SQLException) {
                SQLException e = (SQLException) t;
                if (e.getSQLState() != null && FENCE_STATES.contains(e.getSQLState())) {
                    found.add(e);
                }
                SQLException next = e.getNextException();
                if (next != null) {
                    collect(next, seen, found, depth + 1);
                }
            }
        }
    }

    private static ServerErrorMessage serverMessage(SQLException e) {
        return e instanceof PSQLException ? ((PSQLException) e).getServerErrorMessage() : null;
    }

    /** The FenceException for one driver exception, by its SQLSTATE and fields; else null. */
    private static FenceException fromDriver(SQLException e) {
        String state = e.getSQLState();
        if (state == null || !state.startsWith("LF")) {
            return null;
        }
        ServerErrorMessage m = serverMessage(e);
        String message = m != null && m.getMessage() != null ? m.getMessage() : e.getMessage();
        String detail = m != null ? m.getDetail() : null;
        String schema = m != null ? m.getSchema() : null;
        String table = m != null ? m.getTable() : null;
        String column = m != null ? m.getColumn() : null;
        String resource = m != null ? m.getConstraint() : null;
        switch (state) {
            case StaleGenerationException.SQLSTATE:
                return new StaleGenerationException(message, detail, schema, table, column, resource, e);
            case MissingGenerationException.SQLSTATE:
                return new MissingGenerationException(message, detail, schema, table, column, resource, e);
            case ConflictingGenerationException.SQLSTATE:
                return new ConflictingGenerationException(message, detail, schema, table, column, resource, e);
            case UnissuedGenerationException.SQLSTATE:
                return new UnissuedGenerationException(message, detail, schema, table, column, resource, e);
            case LeaseLostAtCommitException.SQLSTATE:
                return new LeaseLostAtCommitException(message, detail, schema, table, column, resource, e);
            default:
                return null;
        }
    }

    // ------------------------------------------------------------------
    // Lease outcomes
    // ------------------------------------------------------------------

    /** The LeaseException for a status that is not a success (package-private: tests). */
    static LeaseException leaseError(Boolean ok, String status, Lease lease, String what,
                                     String resource, String reason) {
        String message = what + " of lease \"" + resource + "\": " + status;
        if (ok == null || "unknown".equals(status)) {
            // acquired / renewed IS NULL: it may have been applied, whatever the text says
            return new LeaseUnknownException(status, lease, message, reason);
        }
        switch (status == null ? "" : status) {
            case "busy":
                return new LeaseBusyException(status, lease, message, reason);
            case "unavailable":
                return new LeaseUnavailableException(status, lease, message, reason);
            case "lost":
                return new LeaseLostException(status, lease, message, reason);
            default:
                return new LeaseDeniedException(status, lease, message, reason);
        }
    }

    private static final String ACQUIRE_SQL =
            "SELECT acquired, status, resource, identity, generation, validity_ms, reason "
            + "FROM lease_fence.acquire(CAST(? AS text), CAST(? AS bigint), CAST(? AS bigint), "
            + "CAST(? AS text), CAST(? AS bigint), CAST(? AS boolean))";

    private static Long getLong(ResultSet rs, String column) throws SQLException {
        long v = rs.getLong(column);
        return rs.wasNull() ? null : v;
    }

    private static Boolean getBoolean(ResultSet rs, String column) throws SQLException {
        boolean v = rs.getBoolean(column);
        return rs.wasNull() ? null : v;
    }

    private static Lease acquireRow(Connection conn, String resource, long ttlMs,
                                    long minValidityMs, String scope, long waitMs,
                                    boolean keepalive) throws SQLException {
        try (PreparedStatement ps = conn.prepareStatement(ACQUIRE_SQL)) {
            ps.setString(1, resource);
            ps.setLong(2, ttlMs);
            ps.setLong(3, minValidityMs);
            ps.setString(4, scope);
            ps.setLong(5, waitMs);
            ps.setBoolean(6, keepalive);
            try (ResultSet rs = ps.executeQuery()) {
                if (!rs.next()) {
                    throw new SQLException("lease_fence.acquire returned no row");
                }
                return new Lease(rs.getString("resource"), rs.getString("identity"),
                        getLong(rs, "generation"), getLong(rs, "validity_ms"),
                        getBoolean(rs, "acquired"), rs.getString("status"),
                        rs.getString("reason"));
            }
        }
    }

    /** acquire; 'stale' once more if retryStale; then the lease, or null for busy
     * when busyIsEmpty, or the exception. */
    private static Lease acquireChecked(Connection conn, String resource, long ttlMs,
                                        long minValidityMs, String scope, long waitMs,
                                        boolean keepalive, boolean retryStale,
                                        boolean busyIsNull) throws SQLException {
        Lease lease = acquireRow(conn, resource, ttlMs, minValidityMs, scope, waitMs, keepalive);
        if ("stale".equals(lease.status()) && Boolean.FALSE.equals(lease.acquired()) && retryStale) {
            // stale left nothing in Redis and moved next_generation() past the
            // stored one: one more try with a fresh generation is safe
            lease = acquireRow(conn, resource, ttlMs, minValidityMs, scope, waitMs, keepalive);
        }
        if (lease.isAcquired()) {
            return lease;
        }
        if (busyIsNull && Boolean.FALSE.equals(lease.acquired()) && "busy".equals(lease.status())) {
            return null;
        }
        throw leaseError(lease.acquired(), lease.status(), lease, "acquire", resource,
                lease.reason());
    }

    /** {@link #acquire(Connection, String, long, long, long, boolean)} with no
     * minimum validity, no wait, and one retry of {@code stale}. */
    public static Lease acquire(Connection conn, String resource, long ttlMs) throws SQLException {
        return acquire(conn, resource, ttlMs, 0, 0, true);
    }

    /** {@link #acquire(Connection, String, long, long, long, boolean)} with one
     * retry of {@code stale}. */
    public static Lease acquire(Connection conn, String resource, long ttlMs, long minValidityMs,
                                long waitMs) throws SQLException {
        return acquire(conn, resource, ttlMs, minValidityMs, waitMs, true);
    }

    /**
     * Takes an explicit-scope lease, in its own transaction, and returns it.
     * The lease outlives the transaction: write under it with {@link #fenced},
     * extend it with {@link #renew}, end it with {@link #release}.
     *
     * @param ttlMs         the lease's time to live
     * @param minValidityMs the validity it must have left when granted (0 .. ttlMs)
     * @param waitMs        while someone else holds it, wait up to this long (woken by
     *                      the holder's release or its TTL's end); 0 answers at once
     * @param retryStale    try once more after {@code stale} (safe: nothing was set)
     * @throws LeaseBusyException        someone else holds it
     * @throws LeaseUnavailableException nothing was sent (Redis down or refusing)
     * @throws LeaseDeniedException      stale, insufficient_validity, unreplicated
     * @throws LeaseUnknownException     the outcome is unknown: it may be held (see there)
     * @throws SQLException              anything else (22023 for bad input, 57014 when
     *                                   a statement_timeout ends a wait, ...)
     */
    public static Lease acquire(Connection conn, String resource, long ttlMs, long minValidityMs,
                                long waitMs, boolean retryStale) throws SQLException {
        return ownTransaction(conn, c -> acquireChecked(c, resource, ttlMs, minValidityMs,
                "explicit", waitMs, false, retryStale, false));
    }

    /** {@link #tryAcquire(Connection, String, long, long, long)} with no minimum
     * validity and no wait. */
    public static Optional<Lease> tryAcquire(Connection conn, String resource, long ttlMs)
            throws SQLException {
        return tryAcquire(conn, resource, ttlMs, 0, 0);
    }

    /**
     * As {@link #acquire}, but {@code busy} is an empty Optional instead of a
     * {@link LeaseBusyException}. Every other outcome that is not a grant still
     * throws: unknown ({@link LeaseUnknownException}) is never "not acquired",
     * and unavailable is not busy.
     */
    public static Optional<Lease> tryAcquire(Connection conn, String resource, long ttlMs,
                                             long minValidityMs, long waitMs) throws SQLException {
        return Optional.ofNullable(ownTransaction(conn, c -> acquireChecked(c, resource, ttlMs,
                minValidityMs, "explicit", waitMs, false, true, true)));
    }

    /**
     * The row of an explicit-scope {@code lease_fence.acquire}, whatever the
     * outcome: never throws for one. {@code acquired()} is TRUE, FALSE (busy,
     * stale, unavailable, insufficient_validity, unreplicated) or null (unknown).
     */
    public static Lease acquireOutcome(Connection conn, String resource, long ttlMs,
                                       long minValidityMs, long waitMs) throws SQLException {
        return ownTransaction(conn, c -> acquireRow(c, resource, ttlMs, minValidityMs,
                "explicit", waitMs, false));
    }

    /** {@link #transactionLease(Connection, String, long, long, long, boolean, LeaseWork)}
     * with no minimum validity, no wait, no keep-alive. */
    public static <T> T transactionLease(Connection conn, String resource, long ttlMs,
                                         LeaseWork<T> work) throws SQLException {
        return transactionLease(conn, resource, ttlMs, 0, 0, false, work);
    }

    /**
     * Runs {@code work} in one transaction that holds a transaction-scoped lease.
     *
     * <p>BEGIN; {@code lease_fence.acquire(..., scope => 'transaction')}: its
     * generation becomes the transaction's generation, so every fenced write in
     * {@code work} carries it, and the resource is fenced; {@code work}; COMMIT,
     * which verifies the lease is still ours with at least {@code minValidityMs}
     * left ({@link LeaseLostAtCommitException} otherwise) and releases it. A
     * failed acquire throws as {@link #acquire} does, before {@code work} runs;
     * any exception rolls back (and releases the lease). Autocommit is turned
     * off for the transaction and restored afterwards.
     *
     * @param keepalive the server's keep-alive worker renews the lease while the
     *                  transaction runs (needs {@code shared_preload_libraries})
     */
    public static <T> T transactionLease(Connection conn, String resource, long ttlMs,
                                         long minValidityMs, long waitMs, boolean keepalive,
                                         LeaseWork<T> work) throws SQLException {
        return inTransaction(conn, c -> {
            Lease lease = acquireChecked(c, resource, ttlMs, minValidityMs, "transaction",
                    waitMs, keepalive, true, false);
            return work.run(lease, c);
        });
    }

    /** {@link #job(Connection, String, long, long, long, LeaseWork)} with no minimum
     * validity and no wait. */
    public static <T> T job(Connection conn, String resource, long ttlMs, LeaseWork<T> work)
            throws SQLException {
        return job(conn, resource, ttlMs, 0, 0, work);
    }

    /**
     * A fenced job: {@link #transactionLease}'s guarantees in the fewest round trips.
     *
     * <p>Runs {@code work} in one transaction that holds a transaction-scoped
     * lease on {@code resource}: its generation fences every write of
     * {@code work.run(lease, conn)}, and COMMIT verifies the lease and releases
     * it. Autocommit is turned off for the job and restored afterwards. pgjdbc
     * sends the {@code BEGIN} of a transaction in the same message as its first
     * statement, {@code lease_fence.acquire(..., scope => 'transaction')}, with
     * one Sync: one round trip before {@code work}, then {@code work}'s
     * statements, then COMMIT.
     *
     * <p>Outcomes, as {@link #transactionLease}: a failed acquire throws
     * {@link LeaseBusyException}, {@link LeaseUnavailableException},
     * {@link LeaseDeniedException} or {@link LeaseUnknownException} before
     * {@code work} runs, the transaction rolled back ({@code stale} is retried
     * once, in the same transaction); an exception from {@code work} rolls back
     * (releasing the lease) and is rethrown, SQLSTATE LF001-LF004 as
     * {@link FenceException} subclasses and anything else unchanged; a lease
     * lost before COMMIT throws {@link LeaseLostAtCommitException}, rolled back.
     *
     * @param waitMs while the lease is busy, wait up to this long (0: answer at once)
     */
    public static <T> T job(Connection conn, String resource, long ttlMs, long minValidityMs,
                            long waitMs, LeaseWork<T> work) throws SQLException {
        return inTransaction(conn, c -> {
            Lease lease = acquireChecked(c, resource, ttlMs, minValidityMs, "transaction",
                    waitMs, false, true, false);
            return work.run(lease, c);
        });
    }

    /** {@link #renew(Connection, Lease, long, long)} with no minimum validity. */
    public static long renew(Connection conn, Lease lease, long ttlMs) throws SQLException {
        return renew(conn, lease, ttlMs, 0);
    }

    /**
     * Extends an explicit lease to {@code ttlMs} if its key still holds
     * {@code lease.identity()}; returns the validity left, in ms.
     *
     * @throws LeaseLostException        the key is gone or someone else's (never recreated)
     * @throws LeaseDeniedException      insufficient_validity, unreplicated
     * @throws LeaseUnavailableException nothing was sent
     * @throws LeaseUnknownException     the outcome is unknown
     */
    public static long renew(Connection conn, Lease lease, long ttlMs, long minValidityMs)
            throws SQLException {
        return ownTransaction(conn, c -> {
            try (PreparedStatement ps = c.prepareStatement(
                    "SELECT renewed, status, validity_ms, reason FROM lease_fence.renew("
                    + "CAST(? AS text), CAST(? AS text), CAST(? AS bigint), CAST(? AS bigint))")) {
                ps.setString(1, lease.resource());
                ps.setString(2, lease.identity());
                ps.setLong(3, ttlMs);
                ps.setLong(4, minValidityMs);
                try (ResultSet rs = ps.executeQuery()) {
                    if (!rs.next()) {
                        throw new SQLException("lease_fence.renew returned no row");
                    }
                    Boolean renewed = getBoolean(rs, "renewed");
                    if (!Boolean.TRUE.equals(renewed)) {
                        throw leaseError(renewed, rs.getString("status"), lease, "renew",
                                lease.resource(), rs.getString("reason"));
                    }
                    return rs.getLong("validity_ms");
                }
            }
        });
    }

    /**
     * Releases an explicit lease if its key still holds {@code lease.identity()}:
     * {@link ReleaseStatus#RELEASED}, {@link ReleaseStatus#NOT_HELD} (expired or
     * someone else's: left alone), {@link ReleaseStatus#UNAVAILABLE} or
     * {@link ReleaseStatus#UNKNOWN} (it then expires by its TTL; calling release
     * again is safe). Never throws for an outcome; {@link #releaseOutcome} also
     * says why.
     */
    public static ReleaseStatus release(Connection conn, Lease lease) throws SQLException {
        return releaseOutcome(conn, lease).status();
    }

    /** {@link #release}, with the {@code released} boolean and the reason. */
    public static ReleaseOutcome releaseOutcome(Connection conn, Lease lease) throws SQLException {
        return ownTransaction(conn, c -> {
            try (PreparedStatement ps = c.prepareStatement(
                    "SELECT released, status, reason FROM lease_fence.release("
                    + "CAST(? AS text), CAST(? AS text))")) {
                ps.setString(1, lease.resource());
                ps.setString(2, lease.identity());
                try (ResultSet rs = ps.executeQuery()) {
                    if (!rs.next()) {
                        throw new SQLException("lease_fence.release returned no row");
                    }
                    String status = rs.getString("status");
                    ReleaseStatus s;
                    try {
                        s = ReleaseStatus.of(status);
                    } catch (IllegalArgumentException e) {
                        throw new SQLException("lease_fence.release answered an unexpected status: "
                                + status, e);
                    }
                    return new ReleaseOutcome(getBoolean(rs, "released"), s, rs.getString("reason"));
                }
            }
        });
    }

    /**
     * {@code lease_fence.keepalive_state(identity)}: {@code "active"}, {@code "lost"},
     * or null (no kept-alive lease has it). Ask on another connection than the
     * lease owner's: a query on the owner's makes its session look active.
     */
    public static String keepaliveState(Connection conn, String identity) throws SQLException {
        return ownTransaction(conn, c -> {
            try (PreparedStatement ps = c.prepareStatement(
                    "SELECT lease_fence.keepalive_state(CAST(? AS text))")) {
                ps.setString(1, identity);
                try (ResultSet rs = ps.executeQuery()) {
                    rs.next();
                    return rs.getString(1);
                }
            }
        });
    }

    // ------------------------------------------------------------------
    // Fenced transactions
    // ------------------------------------------------------------------

    /**
     * One transaction whose writes carry the lease's generation, fencing its resource.
     *
     * <p>Turns autocommit off (if it was on), runs
     * {@code SELECT lease_fence.set_generation(lease.generation(), lease.resource())}
     * — one statement with bind parameters, sent once per transaction; pgjdbc
     * sends the BEGIN in the same message, so it is one round trip — then
     * {@code work.run(conn)}, then COMMIT; returns what {@code work} returned.
     * On any exception it rolls back and rethrows, SQLSTATE LF001/2/3/4/LF010 as
     * {@link FenceException} subclasses (COMMIT's too); autocommit is restored
     * either way.
     *
     * <p>The resource fence fails ({@link StaleGenerationException} with
     * {@code resource()} set) before {@code work} runs when a newer holder fenced
     * the resource, and otherwise holds the resource to COMMIT, so that a newer
     * holder's fence waits: the whole transaction is fenced, not only the rows
     * it updates. The generation ends with the transaction, so this is safe
     * behind a transaction-pooling proxy.
     *
     * @throws IllegalArgumentException the lease has no generation
     */
    public static <T> T fenced(Connection conn, Lease lease, FencedWork<T> work)
            throws SQLException {
        if (lease.generation() == null) {
            throw new IllegalArgumentException("lease has no generation (status "
                    + lease.status() + ")");
        }
        return fenced(conn, lease.generation(), lease.resource(), work);
    }

    /**
     * As {@link #fenced(Connection, Lease, FencedWork)}, with a bare generation:
     * {@code resource} null fences rows only.
     *
     * @throws IllegalArgumentException a negative generation
     */
    public static <T> T fenced(Connection conn, long generation, String resource,
                               FencedWork<T> work) throws SQLException {
        if (generation < 0) {
            throw new IllegalArgumentException("a generation is non-negative, got " + generation);
        }
        return inTransaction(conn, c -> {
            try (PreparedStatement ps = c.prepareStatement(
                    "SELECT lease_fence.set_generation(CAST(? AS bigint), CAST(? AS text))")) {
                ps.setLong(1, generation);
                if (resource == null) {
                    ps.setNull(2, Types.VARCHAR);
                } else {
                    ps.setString(2, resource);
                }
                try (ResultSet rs = ps.executeQuery()) {
                    rs.next();
                }
            }
            return work.run(c);
        });
    }

    // ------------------------------------------------------------------
    // Transactions
    // ------------------------------------------------------------------

    /** SQLSTATE 25001 unless the connection is outside a transaction (pgjdbc
     * tells; a connection that cannot be unwrapped to pgjdbc's is trusted). */
    private static void requireIdle(Connection conn) throws SQLException {
        if (conn.isWrapperFor(BaseConnection.class)) {
            TransactionState state = conn.unwrap(BaseConnection.class).getTransactionState();
            if (state != TransactionState.IDLE) {
                throw new SQLException("lease_fence needs a connection that is not in a transaction"
                        + " (use autocommit, or commit first); it is " + state, "25001");
            }
        }
    }

    /**
     * One statement's worth of work in its own transaction: with autocommit on,
     * as is (one round trip); with it off, followed by COMMIT (ROLLBACK on error).
     */
    private static <T> T ownTransaction(Connection conn, FencedWork<T> work) throws SQLException {
        requireIdle(conn);
        if (conn.getAutoCommit()) {
            return work.run(conn);
        }
        return inTransaction(conn, work);
    }

    /** BEGIN (autocommit off); work; COMMIT — or ROLLBACK; restores autocommit;
     * LF errors as FenceException. */
    private static <T> T inTransaction(Connection conn, FencedWork<T> work) throws SQLException {
        requireIdle(conn);
        boolean autoCommit = conn.getAutoCommit();
        if (autoCommit) {
            conn.setAutoCommit(false);
        }
        Throwable failure = null;
        try {
            T result = work.run(conn);
            conn.commit();
            return result;
        } catch (SQLException e) {
            failure = e;
            rollback(conn, e);
            SQLException mapped = translate(e);
            if (mapped != e) {
                failure = mapped;
            }
            throw mapped;
        } catch (RuntimeException | Error e) {
            failure = e;
            rollback(conn, e);
            throw e;
        } finally {
            if (autoCommit) {
                try {
                    conn.setAutoCommit(true);
                } catch (SQLException e) {
                    if (failure != null) {
                        failure.addSuppressed(e);
                    } else {
                        throw e;
                    }
                }
            }
        }
    }

    private static void rollback(Connection conn, Throwable failure) {
        try {
            conn.rollback();
        } catch (SQLException e) {
            failure.addSuppressed(e);
        }
    }
}

package dev.leasefence;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.sql.Types;
import java.util.ArrayList;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Optional;
import java.util.Set;

import javax.sql.DataSource;

import org.postgresql.PGConnection;
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
 * <li>{@link #resumableJob}: a long job under an explicit lease, in fenced
 *     transactions, resuming from the last checkpoint its holders committed.</li>
 * <li>{@link #keptAliveLease}: a session-scoped lease the server keeps alive
 *     while the work runs, watched from another connection; a lost lease
 *     stops the work.</li>
 * <li>{@link #leadership} / {@link #campaign}: leader election, the lease
 *     renewed by a heartbeat on the campaign's connection, writes fenced by
 *     the term; {@link #takeOver}: take a lease from a stuck holder.</li>
 * <li>{@link #translate} / {@link #fenceException}: any SQLException (or a
 *     framework's wrapper) to a {@link FenceException}, for code that writes
 *     outside {@link #fenced} (Spring, Hibernate, jOOQ).</li>
 * </ul>
 */
public final class LeaseFence {

    /** The library's version. */
    public static final String VERSION = "1.5.0";

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

    /** {@code e} as a {@link DataCorruptedException} when its SQLSTATE is XX001,
     * else {@code e} (package-private: tests). */
    static SQLException dataCorrupted(SQLException e) {
        if (e instanceof DataCorruptedException
                || !DataCorruptedException.SQLSTATE.equals(e.getSQLState())) {
            return e;
        }
        ServerErrorMessage m = serverMessage(e);
        return new DataCorruptedException(
                m != null && m.getMessage() != null ? m.getMessage() : e.getMessage(),
                m != null ? m.getDetail() : null, e);
    }

    /** The statement of a lease verb: its XX001 as DataCorruptedException. */
    private static ResultSet query(PreparedStatement ps) throws SQLException {
        try {
            return ps.executeQuery();
        } catch (SQLException e) {
            throw dataCorrupted(e);
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
            + "CAST(? AS text), CAST(? AS bigint), CAST(? AS boolean), CAST(? AS boolean))";

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
                                    boolean keepalive, boolean fair) throws SQLException {
        try (PreparedStatement ps = conn.prepareStatement(ACQUIRE_SQL)) {
            ps.setString(1, resource);
            ps.setLong(2, ttlMs);
            ps.setLong(3, minValidityMs);
            ps.setString(4, scope);
            ps.setLong(5, waitMs);
            ps.setBoolean(6, keepalive);
            ps.setBoolean(7, fair);
            try (ResultSet rs = query(ps)) {
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
                                        boolean keepalive, boolean fair, boolean retryStale,
                                        boolean busyIsNull) throws SQLException {
        Lease lease = acquireRow(conn, resource, ttlMs, minValidityMs, scope, waitMs, keepalive,
                fair);
        if ("stale".equals(lease.status()) && Boolean.FALSE.equals(lease.acquired()) && retryStale) {
            // stale left nothing in Redis and moved next_generation() past the
            // stored one: one more try with a fresh generation is safe
            lease = acquireRow(conn, resource, ttlMs, minValidityMs, scope, waitMs, keepalive,
                    fair);
        }
        return acquireResult(lease, busyIsNull);
    }

    /**
     * What {@link #acquire} ({@code busyIsNull} false) and {@link #tryAcquire}
     * ({@code busyIsNull} true) make of one row of {@code lease_fence.acquire}:
     * the lease when granted, null for {@code busy} when {@code busyIsNull},
     * else the exception for its status. No connection: the unit tests call it
     * with every status of the answer table.
     */
    static Lease acquireResult(Lease row, boolean busyIsNull) throws LeaseException {
        if (row.isAcquired()) {
            return row;
        }
        if (busyIsNull && Boolean.FALSE.equals(row.acquired()) && "busy".equals(row.status())) {
            return null;
        }
        throw leaseError(row.acquired(), row.status(), row, "acquire", row.resource(),
                row.reason());
    }

    /**
     * What {@link #renew} makes of one row of {@code lease_fence.renew}: the
     * validity left when renewed, else the exception for its status (no
     * connection: for the unit tests).
     */
    static long renewResult(Lease lease, Boolean renewed, String status, Long validityMs,
                            String reason) throws LeaseException {
        if (!Boolean.TRUE.equals(renewed)) {
            throw leaseError(renewed, status, lease, "renew", lease.resource(), reason);
        }
        return validityMs == null ? 0 : validityMs;
    }

    /**
     * What {@link #releaseOutcome} makes of one row of {@code lease_fence.release}:
     * every status the extension answers is returned, never thrown; a status it
     * never answers is an SQLException (no connection: for the unit tests).
     */
    static ReleaseOutcome releaseResult(Boolean released, String status, String reason)
            throws SQLException {
        ReleaseStatus s;
        try {
            s = ReleaseStatus.of(status);
        } catch (IllegalArgumentException e) {
            throw new SQLException("lease_fence.release answered an unexpected status: "
                    + status, e);
        }
        return new ReleaseOutcome(released, s, reason);
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
        return acquire(conn, resource, ttlMs, minValidityMs, waitMs, retryStale,
                LeaseOptions.DEFAULTS);
    }

    /**
     * {@link #acquire(Connection, String, long, long, long, boolean)} with
     * {@code options}: {@code LeaseOptions.DEFAULTS.fair(true)} waits in the
     * resource's queue, granted in the order the waiters came.
     */
    public static Lease acquire(Connection conn, String resource, long ttlMs, long minValidityMs,
                                long waitMs, boolean retryStale, LeaseOptions options)
            throws SQLException {
        boolean fair = fair(options);
        return ownTransaction(conn, c -> acquireChecked(c, resource, ttlMs, minValidityMs,
                "explicit", waitMs, false, fair, retryStale, false));
    }

    /** {@code options.fair()}; null options are refused before anything is sent. */
    private static boolean fair(LeaseOptions options) {
        if (options == null) {
            throw new IllegalArgumentException("options are needed (LeaseOptions.DEFAULTS)");
        }
        return options.fair();
    }

    /** {@link #tryAcquire(Connection, String, long, long, long)} with no minimum
     * validity and no wait. */
    public static Optional<Lease> tryAcquire(Connection conn, String resource, long ttlMs)
            throws SQLException {
        return tryAcquire(conn, resource, ttlMs, 0, 0);
    }

    /**
     * As {@link #acquire}, but {@code busy} is an empty Optional instead of a
     * {@link LeaseBusyException}. Every other outcome that is not a grant
     * throws what {@link #acquire} throws: unknown ({@link LeaseUnknownException})
     * is never "not acquired", unavailable ({@link LeaseUnavailableException})
     * is not busy, stale, insufficient_validity and unreplicated are
     * {@link LeaseDeniedException}.
     *
     * @return the lease when granted; empty when someone else holds it
     */
    public static Optional<Lease> tryAcquire(Connection conn, String resource, long ttlMs,
                                             long minValidityMs, long waitMs) throws SQLException {
        return tryAcquire(conn, resource, ttlMs, minValidityMs, waitMs, LeaseOptions.DEFAULTS);
    }

    /** {@link #tryAcquire(Connection, String, long, long, long)} with {@code options}
     * ({@link LeaseOptions#fair(boolean)}). */
    public static Optional<Lease> tryAcquire(Connection conn, String resource, long ttlMs,
                                             long minValidityMs, long waitMs,
                                             LeaseOptions options) throws SQLException {
        boolean fair = fair(options);
        return Optional.ofNullable(ownTransaction(conn, c -> acquireChecked(c, resource, ttlMs,
                minValidityMs, "explicit", waitMs, false, fair, true, true)));
    }

    /**
     * The row of an explicit-scope {@code lease_fence.acquire}, whatever the
     * outcome: never throws for one. {@code acquired()} is TRUE, FALSE (busy,
     * stale, unavailable, insufficient_validity, unreplicated) or null (unknown).
     */
    public static Lease acquireOutcome(Connection conn, String resource, long ttlMs,
                                       long minValidityMs, long waitMs) throws SQLException {
        return acquireOutcome(conn, resource, ttlMs, minValidityMs, waitMs, LeaseOptions.DEFAULTS);
    }

    /** {@link #acquireOutcome(Connection, String, long, long, long)} with {@code options}
     * ({@link LeaseOptions#fair(boolean)}). */
    public static Lease acquireOutcome(Connection conn, String resource, long ttlMs,
                                       long minValidityMs, long waitMs, LeaseOptions options)
            throws SQLException {
        boolean fair = fair(options);
        return ownTransaction(conn, c -> acquireRow(c, resource, ttlMs, minValidityMs,
                "explicit", waitMs, false, fair));
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
     * any exception rolls back (and releases the lease). Work that catches a
     * failed statement's exception and returns makes the transaction fail: it
     * is rolled back and {@link TransactionRolledBackException} thrown, never
     * a return as if committed. Autocommit is turned off for the transaction
     * and restored afterwards.
     *
     * @param keepalive the server's keep-alive worker renews the lease while the
     *                  transaction runs (needs {@code shared_preload_libraries})
     */
    public static <T> T transactionLease(Connection conn, String resource, long ttlMs,
                                         long minValidityMs, long waitMs, boolean keepalive,
                                         LeaseWork<T> work) throws SQLException {
        return transactionLease(conn, resource, ttlMs, minValidityMs, waitMs, keepalive,
                LeaseOptions.DEFAULTS, work);
    }

    /** {@link #transactionLease(Connection, String, long, long, long, boolean, LeaseWork)}
     * with {@code options} ({@link LeaseOptions#fair(boolean)}). */
    public static <T> T transactionLease(Connection conn, String resource, long ttlMs,
                                         long minValidityMs, long waitMs, boolean keepalive,
                                         LeaseOptions options, LeaseWork<T> work)
            throws SQLException {
        boolean fair = fair(options);
        return inTransaction(conn, c -> {
            Lease lease = acquireChecked(c, resource, ttlMs, minValidityMs, "transaction",
                    waitMs, keepalive, fair, true, false);
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
     * lost before COMMIT throws {@link LeaseLostAtCommitException}, rolled back;
     * work that caught a failed statement's exception (a refused write) and
     * returned throws {@link TransactionRolledBackException}, rolled back.
     *
     * @param waitMs while the lease is busy, wait up to this long (0: answer at once)
     */
    public static <T> T job(Connection conn, String resource, long ttlMs, long minValidityMs,
                            long waitMs, LeaseWork<T> work) throws SQLException {
        return job(conn, resource, ttlMs, minValidityMs, waitMs, LeaseOptions.DEFAULTS, work);
    }

    /** {@link #job(Connection, String, long, long, long, LeaseWork)} with {@code options}
     * ({@link LeaseOptions#fair(boolean)}). */
    public static <T> T job(Connection conn, String resource, long ttlMs, long minValidityMs,
                            long waitMs, LeaseOptions options, LeaseWork<T> work)
            throws SQLException {
        boolean fair = fair(options);
        return inTransaction(conn, c -> {
            Lease lease = acquireChecked(c, resource, ttlMs, minValidityMs, "transaction",
                    waitMs, false, fair, true, false);
            return work.run(lease, c);
        });
    }

    // ------------------------------------------------------------------
    // Resumable jobs: an explicit lease, fenced transactions, a checkpoint
    // ------------------------------------------------------------------

    /** {@link #resumableJob(Connection, String, long, long, LeaseOptions, ResumableWork)}
     * with no wait, not fair. */
    public static <T> T resumableJob(Connection conn, String resource, long ttlMs,
                                     ResumableWork<T> work) throws Exception {
        return resumableJob(conn, resource, ttlMs, 0, LeaseOptions.DEFAULTS, work);
    }

    /** {@link #resumableJob(Connection, String, long, long, LeaseOptions, ResumableWork)}
     * with no wait. */
    public static <T> T resumableJob(Connection conn, String resource, long ttlMs,
                                     LeaseOptions options, ResumableWork<T> work)
            throws Exception {
        return resumableJob(conn, resource, ttlMs, 0, options, work);
    }

    /**
     * A job that resumes where its last holder stopped, and whose effects
     * happen under one generation at a time.
     *
     * <p>On the one connection given, in this order:
     * <ol>
     * <li>{@code lease_fence.acquire(resource, ttlMs, scope => 'explicit',
     *     wait_ms, fair)} in a statement of its own; not granted:
     *     {@link LeaseBusyException}, {@link LeaseUnavailableException},
     *     {@link LeaseDeniedException} or {@link LeaseUnknownException}
     *     before anything else runs ({@code stale} is tried once more; after
     *     {@code unknown} a conditional release is sent, as the lease may be
     *     held);</li>
     * <li>BEGIN; {@code lease_fence.set_generation(generation, resource)};
     *     {@code lease_fence.last_checkpoint(resource)}: the job's
     *     {@link ResumableJob#resumeFrom()} and
     *     {@link ResumableJob#resumedGeneration()};</li>
     * <li>{@code work.run(job)}: its writes go on {@code conn}, inside the open
     *     transaction, fenced at the lease's generation;
     *     {@link ResumableJob#checkpoint(String)} renews the lease, writes the
     *     checkpoint, commits and begins again;</li>
     * <li>the work returns: COMMIT, then {@code lease_fence.release} (its
     *     answer does not change the result: {@code not_held} is normal after
     *     a takeover; an error of it is ignored, the lease then ends by its
     *     TTL). The work throws: ROLLBACK, release, and its exception is
     *     rethrown (SQLSTATE LF001-LF004/LF010 as {@link FenceException}
     *     subclasses).</li>
     * </ol>
     * A holder that freezes inside its open transaction past the lease is
     * ended by the server (FATAL 25P03, its transaction rolled back), and its
     * successor's fence, which waited for it, proceeds; one that freezes
     * between transactions is refused ({@link StaleGenerationException}) at
     * its next fence once a successor has fenced. {@code ttlMs} must exceed
     * the longest stretch between two checkpoints. Autocommit is turned off
     * for the job and restored afterwards.
     *
     * @param waitMs while the lease is busy, wait up to this long (0: answer at once)
     * @return what {@code work} returned
     * @throws IllegalArgumentException bad arguments (nothing sent)
     * @throws TransactionRolledBackException the work caught a failed statement's
     *                                        exception and returned: rolled back
     * @throws Exception                the work's own exceptions, unchanged
     *                                  (SQLExceptions translated as above)
     */
    public static <T> T resumableJob(Connection conn, String resource, long ttlMs, long waitMs,
                                     LeaseOptions options, ResumableWork<T> work)
            throws Exception {
        boolean fair = fair(options);
        if (conn == null || work == null) {
            throw new IllegalArgumentException("resumableJob needs a connection and the work");
        }
        if (resource == null || resource.isEmpty()) {
            throw new IllegalArgumentException("resumableJob needs a resource name");
        }
        if (ttlMs <= 0 || waitMs < 0) {
            throw new IllegalArgumentException("resumableJob needs ttlMs > 0 and waitMs >= 0; got "
                    + "ttlMs " + ttlMs + ", waitMs " + waitMs);
        }
        requireIdle(conn);
        Lease lease;
        try {
            lease = ownTransaction(conn, c -> acquireChecked(c, resource, ttlMs, 0, "explicit",
                    waitMs, false, fair, true, false));
        } catch (LeaseUnknownException e) {
            throw releaseMaybeHeld(conn, e);
        }

        boolean autoCommit = conn.getAutoCommit();
        Throwable failure = null;
        try {
            if (autoCommit) {
                conn.setAutoCommit(false);
            }
            ResumableJob job = startJob(conn, lease, ttlMs);
            T result = work.run(job);
            if (job.broken() != null) {
                // a checkpoint failed and the work went on: nothing more commits
                throw job.broken();
            }
            if (failed(conn)) {
                throw new TransactionRolledBackException();
            }
            conn.commit();
            return result;
        } catch (SQLException e) {
            failure = translate(e);
        } catch (Exception | Error e) {
            failure = e;
        } finally {
            if (failure != null) {
                rollback(conn, failure);
            }
            if (autoCommit) {
                try {
                    conn.setAutoCommit(true);
                } catch (SQLException e) {
                    if (failure != null) {
                        failure.addSuppressed(e);
                    }
                }
            }
            try {
                releaseOutcome(conn, lease);
            } catch (SQLException | RuntimeException e) {
                if (failure != null) {
                    failure.addSuppressed(e);
                }
                // after a COMMIT the result stands: the lease ends by its TTL
            }
        }
        if (failure instanceof Exception) {
            throw (Exception) failure;
        }
        throw (Error) failure;
    }

    private static final String START_JOB_SQL =
            "SELECT lease_fence.set_generation(CAST(? AS bigint), CAST(? AS text));"
            + "SELECT state::text, generation, written_at "
            + "FROM lease_fence.last_checkpoint(CAST(? AS text))";

    /** BEGIN; set_generation; last_checkpoint — one message, one round trip. */
    private static ResumableJob startJob(Connection conn, Lease lease, long ttlMs)
            throws SQLException {
        try (PreparedStatement ps = conn.prepareStatement(START_JOB_SQL)) {
            ps.setLong(1, lease.generation());
            ps.setString(2, lease.resource());
            ps.setString(3, lease.resource());
            ps.execute();
            // the first result: set_generation's row; then last_checkpoint's rows
            if (!ps.getMoreResults()) {
                throw new SQLException("lease_fence.last_checkpoint returned no result");
            }
            try (ResultSet rs = ps.getResultSet()) {
                if (rs.next()) {
                    return new ResumableJob(conn, lease, ttlMs, rs.getString(1),
                            getLong(rs, "generation"));
                }
                return new ResumableJob(conn, lease, ttlMs, null, null);
            }
        }
    }

    /** {@code SELECT lease_fence.set_generation(generation, resource)} on conn, in
     * its open transaction (package-private: ResumableJob). */
    static void setGeneration(Connection conn, long generation, String resource)
            throws SQLException {
        try (PreparedStatement ps = conn.prepareStatement(
                "SELECT lease_fence.set_generation(CAST(? AS bigint), CAST(? AS text))")) {
            ps.setLong(1, generation);
            ps.setString(2, resource);
            try (ResultSet rs = ps.executeQuery()) {
                rs.next();
            }
        }
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
                try (ResultSet rs = query(ps)) {
                    if (!rs.next()) {
                        throw new SQLException("lease_fence.renew returned no row");
                    }
                    return renewResult(lease, getBoolean(rs, "renewed"), rs.getString("status"),
                            getLong(rs, "validity_ms"), rs.getString("reason"));
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

    /**
     * An acquire whose outcome is unknown may have left the lease held by
     * this session: one more conditional release of its identity (safe: it
     * expires by its TTL otherwise). Returns the exception to throw, with a
     * failed release's error suppressed in it.
     */
    private static LeaseUnknownException releaseMaybeHeld(Connection conn, LeaseUnknownException e) {
        Lease maybe = e.lease();
        if (maybe != null && maybe.identity() != null) {
            try {
                releaseOutcome(conn, maybe);
            } catch (SQLException | RuntimeException r) {
                e.addSuppressed(r);
            }
        }
        return e;
    }

    /** {@link #release}, with the {@code released} boolean and the reason. */
    public static ReleaseOutcome releaseOutcome(Connection conn, Lease lease) throws SQLException {
        return ownTransaction(conn, c -> {
            try (PreparedStatement ps = c.prepareStatement(
                    "SELECT released, status, reason FROM lease_fence.release("
                    + "CAST(? AS text), CAST(? AS text))")) {
                ps.setString(1, lease.resource());
                ps.setString(2, lease.identity());
                try (ResultSet rs = query(ps)) {
                    if (!rs.next()) {
                        throw new SQLException("lease_fence.release returned no row");
                    }
                    return releaseResult(getBoolean(rs, "released"), rs.getString("status"),
                            rs.getString("reason"));
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
    // Kept-alive leases
    // ------------------------------------------------------------------

    /** {@link #keptAliveLease(DataSource, String, long, long, long, long, KeptAliveWork)}
     * with no minimum validity, no wait, and the default watch interval. */
    public static <T> T keptAliveLease(DataSource pool, String resource, long ttlMs,
                                       KeptAliveWork<T> work) throws SQLException {
        return keptAliveLease(pool, resource, ttlMs, 0, 0, 0, work);
    }

    /**
     * {@link #keptAliveLease(Connection, Connection, String, long, long, long, long, KeptAliveWork)}
     * on two connections of {@code pool}: one holds the lease and runs
     * {@code work}, the other watches it. Both are closed (returned to the
     * pool) at the end. The pool must give out two connections at once.
     */
    public static <T> T keptAliveLease(DataSource pool, String resource, long ttlMs,
                                       long minValidityMs, long waitMs, long pollMs,
                                       KeptAliveWork<T> work) throws SQLException {
        return keptAliveLease(pool, resource, ttlMs, minValidityMs, waitMs, pollMs,
                LeaseOptions.DEFAULTS, work);
    }

    /** {@link #keptAliveLease(DataSource, String, long, long, long, long, KeptAliveWork)}
     * with {@code options} ({@link LeaseOptions#fair(boolean)}). */
    public static <T> T keptAliveLease(DataSource pool, String resource, long ttlMs,
                                       long minValidityMs, long waitMs, long pollMs,
                                       LeaseOptions options, KeptAliveWork<T> work)
            throws SQLException {
        fair(options);
        if (pool == null) {
            throw new IllegalArgumentException("keptAliveLease needs a DataSource");
        }
        checkKeptAliveArgs(resource, ttlMs, minValidityMs, waitMs, pollMs, work);
        try (Connection conn = pool.getConnection(); Connection watch = pool.getConnection()) {
            return keptAliveLease(conn, watch, resource, ttlMs, minValidityMs, waitMs, pollMs,
                    options, work);
        }
    }

    /** {@link #keptAliveLease(Connection, Connection, String, long, long, long, long, KeptAliveWork)}
     * with no minimum validity, no wait, and the default watch interval. */
    public static <T> T keptAliveLease(Connection conn, Connection watch, String resource,
                                       long ttlMs, KeptAliveWork<T> work) throws SQLException {
        return keptAliveLease(conn, watch, resource, ttlMs, 0, 0, 0, work);
    }

    /**
     * Runs {@code work} holding a session-scoped lease that the server keeps
     * alive while it runs, then releases the lease.
     *
     * <p>{@code lease_fence.acquire(..., scope => 'session', keepalive => true)}
     * in its own transaction on {@code conn} (throwing as {@link #acquire} does,
     * before {@code work} runs; a {@code stale} is tried once more), then
     * {@code work.run(lease, conn)}, then {@link #release}. The lease outlives
     * {@code ttlMs} while {@code conn}'s session is active (running a statement,
     * or idle for less than {@code ttlMs}), up to {@code lease_fence.keepalive_max_ms}
     * (needs {@code shared_preload_libraries}). Write under it with
     * {@code fenced(conn, lease.lease(), ...)}: once the lease is lost those
     * writes throw {@link LeaseLostAtCommitException} (LF010).
     *
     * <p>While {@code work} runs, a daemon thread asks
     * {@code lease_fence.keepalive_state(identity)} on {@code watch} every
     * {@code pollMs} (0: {@code max(50, ttlMs / 3)}). When it answers
     * {@code lost} or null, or the question fails, the work is stopped:
     * {@link KeptAliveLease#isLost()} turns true, {@link KeptAliveLease#check()}
     * throws, the thread running {@code work} is interrupted, and the statement
     * running on {@code conn}, if any, is cancelled (pgjdbc's
     * {@code cancelQuery}; SQLSTATE 57014 in {@code work}).
     *
     * <p>At the end, always: the watch stops, a transaction {@code work} left
     * open is rolled back if {@code work} threw, and the lease is released.
     * <ul>
     * <li>the lease was lost while {@code work} ran (and the release did not
     *     find it held): {@link LeaseLostException} (or
     *     {@link LeaseUnknownException} when the watch failed), with
     *     {@code work}'s exception, if any, as a suppressed one;</li>
     * <li>{@code work} threw: that exception, unchanged;</li>
     * <li>{@code work} returned: its value; but a release that answers
     *     {@code not_held} (lost before the end) throws {@link LeaseLostException}.
     *     {@code unavailable} / {@code unknown} do not throw: the lease is no
     *     longer kept alive and expires by its TTL.</li>
     * </ul>
     * Do not release the lease inside {@code work}. Not for use behind a
     * transaction-pooling proxy: a session lease belongs to the server session.
     *
     * @param conn  the connection that holds the lease and runs {@code work},
     *              outside a transaction
     * @param watch another connection, outside a transaction, used only by the
     *              watch while {@code work} runs (a query on {@code conn} would
     *              make its session look active)
     * @throws IllegalArgumentException before anything is sent: a null argument,
     *              {@code watch} is {@code conn}, or a negative or zero TTL,
     *              negative minimum validity, wait or interval
     */
    public static <T> T keptAliveLease(Connection conn, Connection watch, String resource,
                                       long ttlMs, long minValidityMs, long waitMs, long pollMs,
                                       KeptAliveWork<T> work) throws SQLException {
        return keptAliveLease(conn, watch, resource, ttlMs, minValidityMs, waitMs, pollMs,
                LeaseOptions.DEFAULTS, work);
    }

    /** {@link #keptAliveLease(Connection, Connection, String, long, long, long, long, KeptAliveWork)}
     * with {@code options} ({@link LeaseOptions#fair(boolean)}). */
    public static <T> T keptAliveLease(Connection conn, Connection watch, String resource,
                                       long ttlMs, long minValidityMs, long waitMs, long pollMs,
                                       LeaseOptions options, KeptAliveWork<T> work)
            throws SQLException {
        boolean fair = fair(options);
        if (conn == null || watch == null) {
            throw new IllegalArgumentException("keptAliveLease needs two connections: one holds "
                    + "the lease, the other watches it");
        }
        if (watch == conn) {
            throw new IllegalArgumentException("watch must be another connection than the lease "
                    + "owner's: queries on the owner's connection make it look active");
        }
        checkKeptAliveArgs(resource, ttlMs, minValidityMs, waitMs, pollMs, work);
        requireIdle(watch);

        Lease row;
        try {
            row = ownTransaction(conn, c -> acquireChecked(c, resource, ttlMs, minValidityMs,
                    "session", waitMs, true, fair, true, false));
        } catch (LeaseUnknownException e) {
            throw releaseMaybeHeld(conn, e);
        }

        KeptAliveLease lease = new KeptAliveLease(row);
        Watch w = new Watch(lease, conn, watch, pollMs > 0 ? pollMs : Math.max(50, ttlMs / 3));
        w.start();
        T result = null;
        Throwable failure = null;
        try {
            result = work.run(lease, conn);
        } catch (SQLException | RuntimeException | Error e) {
            failure = e;
        } finally {
            w.finish();
        }
        LeaseException stoppedBy = lease.stoppedBy();

        if (failure != null) {
            rollbackIfOpen(conn, failure);
        }
        ReleaseOutcome released = null;
        SQLException releaseError = null;
        try {
            released = releaseOutcome(conn, row);
        } catch (SQLException e) {
            releaseError = e;
        }
        boolean heldToTheEnd = released != null && released.status() == ReleaseStatus.RELEASED;
        if (stoppedBy != null && !heldToTheEnd) {
            LeaseException e = KeptAliveLease.fresh(stoppedBy);
            if (failure != null) {
                e.addSuppressed(failure);
            }
            if (releaseError != null) {
                e.addSuppressed(releaseError);
            }
            throw e;
        }
        if (failure != null) {
            if (releaseError != null) {
                failure.addSuppressed(releaseError);
            }
            if (failure instanceof SQLException) {
                throw (SQLException) failure;
            }
            if (failure instanceof RuntimeException) {
                throw (RuntimeException) failure;
            }
            throw (Error) failure;
        }
        if (releaseError != null) {
            throw releaseError;
        }
        if (released.status() == ReleaseStatus.NOT_HELD) {
            throw new LeaseLostException("lost", row, "kept-alive lease \"" + resource
                    + "\" was lost before the work ended (release: not_held)", null);
        }
        return result;
    }

    private static void checkKeptAliveArgs(String resource, long ttlMs, long minValidityMs,
                                           long waitMs, long pollMs, Object work) {
        if (resource == null) {
            throw new IllegalArgumentException("keptAliveLease needs a resource name");
        }
        if (work == null) {
            throw new IllegalArgumentException("keptAliveLease needs the work to run");
        }
        if (ttlMs <= 0 || minValidityMs < 0 || waitMs < 0 || pollMs < 0) {
            throw new IllegalArgumentException("keptAliveLease needs ttlMs > 0 and minValidityMs, "
                    + "waitMs, pollMs >= 0; got ttlMs " + ttlMs + ", minValidityMs "
                    + minValidityMs + ", waitMs " + waitMs + ", pollMs " + pollMs);
        }
    }

    /** ROLLBACK of a transaction that failed work left open; errors suppressed into failure. */
    private static void rollbackIfOpen(Connection conn, Throwable failure) {
        try {
            if (!conn.getAutoCommit()) {
                conn.rollback();
            } else if (conn.isWrapperFor(BaseConnection.class)
                    && conn.unwrap(BaseConnection.class).getTransactionState()
                            != TransactionState.IDLE) {
                try (Statement st = conn.createStatement()) {
                    st.execute("ROLLBACK");
                }
            }
        } catch (SQLException e) {
            failure.addSuppressed(e);
        }
    }

    /**
     * The watch of a kept-alive lease: asks keepalive_state on its own
     * connection every interval until finish(); on a loss (or a failed
     * question) marks the lease stopped, interrupts the owner's thread and
     * cancels the owner connection's statement — never after finish() began.
     */
    private static final class Watch extends Thread {
        private final KeptAliveLease lease;
        private final Connection owner;
        private final Connection watch;
        private final long intervalMs;
        private final Thread ownerThread = Thread.currentThread();
        private final Object lock = new Object();
        private boolean done;
        private boolean interruptedOwner;

        Watch(KeptAliveLease lease, Connection owner, Connection watch, long intervalMs) {
            super("lease_fence keep-alive watch");
            setDaemon(true);
            this.lease = lease;
            this.owner = owner;
            this.watch = watch;
            this.intervalMs = intervalMs;
        }

        @Override
        public void run() {
            String what = "kept-alive lease \"" + lease.resource() + "\"";
            for (;;) {
                synchronized (lock) {
                    if (!done) {
                        try {
                            lock.wait(intervalMs);
                        } catch (InterruptedException e) {
                            return;
                        }
                    }
                    if (done) {
                        return;
                    }
                }
                LeaseException stop = null;
                try {
                    String state = keepaliveState(watch, lease.identity());
                    if (!"active".equals(state)) {
                        stop = new LeaseLostException("lost", lease.lease(), what + ": "
                                + (state == null ? "no longer kept alive" : state), null);
                    }
                } catch (SQLException | RuntimeException e) {
                    stop = new LeaseUnknownException("unknown", lease.lease(), what
                            + " cannot be watched: " + e.getMessage(), null);
                    stop.initCause(e);
                }
                if (stop == null) {
                    continue;
                }
                synchronized (lock) {
                    if (done) {
                        return;
                    }
                    lease.stop(stop);
                    interruptedOwner = true;
                    ownerThread.interrupt();
                    try {
                        if (owner.isWrapperFor(PGConnection.class)) {
                            owner.unwrap(PGConnection.class).cancelQuery();
                        }
                    } catch (SQLException e) {
                        stop.addSuppressed(e);
                    }
                }
                return;
            }
        }

        /** Stops the watch and waits for it; clears the interrupt it caused. */
        void finish() {
            synchronized (lock) {
                done = true;
                lock.notifyAll();
            }
            boolean otherInterrupt = false;
            for (;;) {
                try {
                    join();
                    break;
                } catch (InterruptedException e) {
                    otherInterrupt = true;
                }
            }
            boolean pending = Thread.interrupted();
            if (interruptedOwner) {
                return;             // ours: cleared
            }
            if (otherInterrupt || pending) {
                Thread.currentThread().interrupt();
            }
        }
    }

    // ------------------------------------------------------------------
    // Leader election and takeover (extension 1.5, C edition)
    // ------------------------------------------------------------------

    private static final String CAMPAIGN_SQL =
            "SELECT status, identity, term, validity_ms, reason FROM lease_fence.campaign("
            + "CAST(? AS text), CAST(? AS bigint), CAST(? AS bigint), CAST(? AS text), "
            + "CAST(? AS text), CAST(? AS boolean))";

    private static void checkElection(String election, long ttlMs, LeadershipOptions options) {
        if (election == null || election.isEmpty()) {
            throw new IllegalArgumentException("an election name is needed");
        }
        if (ttlMs <= 0) {
            throw new IllegalArgumentException("ttlMs must be positive, got " + ttlMs);
        }
        if (options == null) {
            throw new IllegalArgumentException("options are needed (LeadershipOptions.DEFAULTS)");
        }
        options.check();
    }

    /**
     * What {@link #campaign} makes of one row of {@code lease_fence.campaign}:
     * the won lease (generation = term), else the exception for its status
     * ({@code busy}: {@link LeaseBusyException}; {@code unknown}:
     * {@link LeaseUnknownException}; ...). No connection: for the unit tests.
     */
    static Lease campaignResult(String election, String status, String identity, Long term,
                                Long validityMs, String reason) throws LeaseException {
        Boolean ok = "acquired".equals(status) ? Boolean.TRUE
                : "unknown".equals(status) ? null : Boolean.FALSE;
        Lease row = new Lease(election, identity, term, validityMs, ok, status, reason);
        if (Boolean.TRUE.equals(ok) && identity != null && term != null) {
            return row;
        }
        throw leaseError(ok, status, row, "campaign", election, reason);
    }

    private static Lease campaignRow(Connection conn, String election, long ttlMs,
                                     LeadershipOptions o) throws SQLException {
        return ownTransaction(conn, c -> {
            try (PreparedStatement ps = c.prepareStatement(CAMPAIGN_SQL)) {
                ps.setString(1, election);
                ps.setLong(2, ttlMs);
                if (o.waitMs() == null) {
                    ps.setNull(3, Types.BIGINT);
                } else {
                    ps.setLong(3, o.waitMs());
                }
                if (o.value() == null) {
                    ps.setNull(4, Types.VARCHAR);
                } else {
                    ps.setString(4, o.value());
                }
                ps.setString(5, o.scope());
                ps.setBoolean(6, o.fair());
                try (ResultSet rs = query(ps)) {
                    if (!rs.next()) {
                        throw new SQLException("lease_fence.campaign returned no row");
                    }
                    try {
                        return campaignResult(election, rs.getString("status"),
                                rs.getString("identity"), getLong(rs, "term"),
                                getLong(rs, "validity_ms"), rs.getString("reason"));
                    } catch (LeaseDeniedException e) {
                        if ("stale".equals(e.status())) {
                            return e.lease();   // tried once more by the caller
                        }
                        throw e;
                    }
                }
            }
        });
    }

    /**
     * Waits, on {@code conn}, to become the leader of {@code election}
     * ({@code lease_fence.campaign}: woken by the leader's resign or its
     * lease's end, no polling) and returns the {@link Leader}, whose heartbeat
     * thread then renews the lease on {@code conn} every {@code ttlMs / 3}:
     * {@code conn} is the election's until {@link Leader#resign()}. A
     * statement timeout or {@code cancelQuery} ends the wait (57014).
     *
     * @throws IllegalArgumentException  bad arguments (nothing sent)
     * @throws LeaseBusyException        {@code options.waitMs()} ran out: still a follower
     * @throws LeaseUnavailableException Redis unreachable (never a silent follower)
     * @throws LeaseDeniedException      unreplicated, stale twice
     * @throws LeaseUnknownException     the outcome is unknown (the server released
     *                                   what it may have won)
     */
    public static Leader campaign(Connection conn, String election, long ttlMs,
                                  LeadershipOptions options) throws SQLException {
        return campaign(conn, election, ttlMs, options, null);
    }

    private static Leader campaign(Connection conn, String election, long ttlMs,
                                   LeadershipOptions options, Thread work) throws SQLException {
        checkElection(election, ttlMs, options);
        if (conn == null) {
            throw new IllegalArgumentException("campaign needs the connection the election runs on");
        }
        long sent = System.nanoTime();
        Lease won = campaignRow(conn, election, ttlMs, options);
        if ("stale".equals(won.status())) {
            // stale wrote nothing and moved next_generation() past the stored
            // one: one more try with a fresh generation is safe
            sent = System.nanoTime();
            won = campaignRow(conn, election, ttlMs, options);
            if ("stale".equals(won.status())) {
                throw leaseError(Boolean.FALSE, "stale", won, "campaign", election, won.reason());
            }
        }
        Leader lead = new Leader(conn, election, won.identity(), won.generation(), options.value(),
                ttlMs, won.validityMs() == null ? 0 : won.validityMs());
        lead.startHeartbeat(sent + java.util.concurrent.TimeUnit.MILLISECONDS.toNanos(
                lead.validityMs()), work);
        return lead;
    }

    /**
     * Campaigns on {@code conn} ({@link #campaign}), runs {@code work} as the
     * leader in this thread, and resigns at the end. The work writes with
     * {@link Leader#fenced} on other connections. When the leadership is
     * lost, the heartbeat stops, {@link Leader#isLost()} turns true,
     * {@link Leader#check()} and {@link Leader#fenced} throw
     * {@link LeadershipLostException}, and this thread is interrupted (the
     * interrupt is cleared when leadership returns).
     *
     * @return what {@code work} returned
     * @throws LeadershipLostException the leadership was lost while the work ran
     *                                 (the work's exception suppressed)
     * @throws SQLException            campaign's exceptions, before the work runs;
     *                                 else the work's, unchanged
     */
    public static <T> T leadership(Connection conn, String election, long ttlMs,
                                   LeadershipOptions options, LeadershipWork<T> work)
            throws SQLException {
        if (work == null) {
            throw new IllegalArgumentException("leadership needs the work to run");
        }
        Leader lead = campaign(conn, election, ttlMs, options, Thread.currentThread());
        T result = null;
        Throwable failure = null;
        try {
            result = work.run(lead);
        } catch (SQLException | RuntimeException | Error e) {
            failure = e;
        } finally {
            lead.stopHeartbeat();
        }
        LeadershipLostException lost = lead.lostBy();
        SQLException resignError = null;
        try {
            lead.resign();
        } catch (SQLException e) {
            resignError = e;
        }
        if (lost != null) {
            LeadershipLostException e = new LeadershipLostException(lost.status(), lead.lease(),
                    lost.getMessage(), null);
            e.initCause(lost);
            if (failure != null) {
                e.addSuppressed(failure);
            }
            throw e;
        }
        if (failure != null) {
            if (resignError != null) {
                failure.addSuppressed(resignError);
            }
            if (failure instanceof SQLException) {
                throw (SQLException) failure;
            }
            if (failure instanceof RuntimeException) {
                throw (RuntimeException) failure;
            }
            throw (Error) failure;
        }
        if (resignError != null) {
            throw resignError;
        }
        return result;
    }

    /** {@code lease_fence.resign(election, identity)}: release's outcomes. */
    static ReleaseOutcome resignOutcome(Connection conn, String election, String identity)
            throws SQLException {
        return ownTransaction(conn, c -> {
            try (PreparedStatement ps = c.prepareStatement(
                    "SELECT released, status, reason FROM lease_fence.resign("
                    + "CAST(? AS text), CAST(? AS text))")) {
                ps.setString(1, election);
                ps.setString(2, identity);
                try (ResultSet rs = query(ps)) {
                    if (!rs.next()) {
                        throw new SQLException("lease_fence.resign returned no row");
                    }
                    return releaseResult(getBoolean(rs, "released"), rs.getString("status"),
                            rs.getString("reason"));
                }
            }
        });
    }

    /** {@link #takeOver(Connection, String, long, long, String)} waiting at most
     * 5000 ms, scope explicit. */
    public static Lease takeOver(Connection conn, String resource, long ttlMs) throws SQLException {
        return takeOver(conn, resource, ttlMs, 5000, "explicit");
    }

    /**
     * {@code lease_fence.take_over}, for operators and supervisors (EXECUTE is
     * not granted to PUBLIC): grants the caller the lease on {@code resource}
     * whether or not someone holds it, with a generation above every one
     * granted for it, and raises the resource's fence to it. The victim's
     * renew answers lost; its fenced writes are refused.
     *
     * @param timeoutMs wait at most this long for a transaction that fenced the resource
     * @param scope     {@code "explicit"} or {@code "session"}
     * @throws IllegalArgumentException  bad arguments (nothing sent)
     * @throws TakeOverTimeoutException  55P03: that transaction did not end in time;
     *                                   nothing was taken
     * @throws LeaseUnavailableException 08006: Redis unavailable; nothing was taken
     * @throws LeaseUnknownException     08007: the outcome is unknown (the server
     *                                   released what it may have taken)
     * @throws SQLException              anything else (42501 without the grant)
     */
    public static Lease takeOver(Connection conn, String resource, long ttlMs, long timeoutMs,
                                 String scope) throws SQLException {
        if (resource == null || resource.isEmpty()) {
            throw new IllegalArgumentException("takeOver needs a resource name");
        }
        if (ttlMs <= 0 || timeoutMs < 0) {
            throw new IllegalArgumentException("takeOver needs ttlMs > 0 and timeoutMs >= 0; got "
                    + "ttlMs " + ttlMs + ", timeoutMs " + timeoutMs);
        }
        if (!"explicit".equals(scope) && !"session".equals(scope)) {
            throw new IllegalArgumentException("scope is \"explicit\" or \"session\", got " + scope);
        }
        return ownTransaction(conn, c -> {
            try (PreparedStatement ps = c.prepareStatement(
                    "SELECT acquired, status, resource, identity, generation, validity_ms, reason "
                    + "FROM lease_fence.take_over(CAST(? AS text), CAST(? AS bigint), "
                    + "CAST(? AS bigint), CAST(? AS text))")) {
                ps.setString(1, resource);
                ps.setLong(2, ttlMs);
                ps.setLong(3, timeoutMs);
                ps.setString(4, scope);
                ResultSet rs;
                try {
                    rs = query(ps);
                } catch (SQLException e) {
                    throw takeOverError(resource, e);
                }
                try (rs) {
                    if (!rs.next()) {
                        throw new SQLException("lease_fence.take_over returned no row");
                    }
                    return acquireResult(new Lease(rs.getString("resource"),
                            rs.getString("identity"), getLong(rs, "generation"),
                            getLong(rs, "validity_ms"), getBoolean(rs, "acquired"),
                            rs.getString("status"), rs.getString("reason")), false);
                }
            }
        });
    }

    /** take_over's SQLSTATEs as the library's exceptions (package-private: tests). */
    static SQLException takeOverError(String resource, SQLException e) {
        String state = e.getSQLState();
        ServerErrorMessage m = serverMessage(e);
        String why = m != null && m.getMessage() != null ? m.getMessage() : e.getMessage();
        String what = "take_over of lease \"" + resource + "\": ";
        LeaseException mapped;
        if ("55P03".equals(state)) {
            mapped = new TakeOverTimeoutException("timeout", new Lease(resource, null, null, null,
                    Boolean.FALSE, "timeout", why), what + "timeout", why);
        } else if ("08006".equals(state)) {
            mapped = new LeaseUnavailableException("unavailable", new Lease(resource, null, null,
                    null, Boolean.FALSE, "unavailable", why), what + "unavailable", why);
        } else if ("08007".equals(state)) {
            mapped = new LeaseUnknownException("unknown", new Lease(resource, null, null, null,
                    null, "unknown", why), what + "unknown", why);
        } else {
            return e;
        }
        mapped.initCause(e);
        return mapped;
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
     * {@link FenceException} subclasses (COMMIT's too); work that caught a failed
     * statement's exception and returned throws
     * {@link TransactionRolledBackException}, rolled back; autocommit is
     * restored either way.
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
     * LF errors as FenceException; a transaction that failed while the work
     * went on (it caught a statement's exception) is rolled back and
     * throws TransactionRolledBackException. */
    private static <T> T inTransaction(Connection conn, FencedWork<T> work) throws SQLException {
        requireIdle(conn);
        boolean autoCommit = conn.getAutoCommit();
        if (autoCommit) {
            conn.setAutoCommit(false);
        }
        Throwable failure = null;
        try {
            T result = work.run(conn);
            if (failed(conn)) {
                // a statement failed and the work went on: COMMIT would roll back
                throw new TransactionRolledBackException();
            }
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

    /** Whether the connection's transaction is failed (pgjdbc tells; another driver's is trusted). */
    private static boolean failed(Connection conn) throws SQLException {
        return conn.isWrapperFor(BaseConnection.class)
                && conn.unwrap(BaseConnection.class).getTransactionState() == TransactionState.FAILED;
    }

    private static void rollback(Connection conn, Throwable failure) {
        try {
            conn.rollback();
        } catch (SQLException e) {
            failure.addSuppressed(e);
        }
    }
}

package dev.leasefence;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import java.util.logging.Handler;
import java.util.logging.Level;
import java.util.logging.LogRecord;
import java.util.logging.Logger;
import java.util.logging.SimpleFormatter;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInfo;
import org.junit.jupiter.api.function.Executable;
import org.postgresql.core.BaseConnection;
import org.postgresql.core.TransactionState;
import org.postgresql.util.PSQLException;

/**
 * The library against a real PostgreSQL with lease_fence and Redis, as
 * test/clients/run.sh sets them up: role {@code app} (takes leases, owns no
 * table), tables {@code account} (lenient) and {@code ledger} (strict).
 *
 * <p>Environment: LF_JDBC_URL, LF_JDBC_USER, LF_JDBC_PASSWORD_FILE; LF_REDIS_SOCK
 * for the tests that act on Redis with redis-cli (skipped without it).
 */
class LeaseFenceTest {

    static final String URL = System.getenv("LF_JDBC_URL");
    static final String USER = System.getenv().getOrDefault("LF_JDBC_USER", "app");
    static final String REDIS_SOCK = System.getenv("LF_REDIS_SOCK");
    /** redis-cli, or the program LF_REDIS_CLI names (valkey-cli for Valkey). */
    static final String REDIS_CLI = System.getenv().getOrDefault("LF_REDIS_CLI", "").isEmpty()
            ? "redis-cli" : System.getenv("LF_REDIS_CLI");
    static final String KEY_PREFIX = "lease_fence:";

    final List<Connection> opened = new ArrayList<>();
    Connection conn;
    String testName;

    static Connection connect() throws SQLException {
        assumeTrue(URL != null, "LF_JDBC_URL is not set");
        Properties p = new Properties();
        p.setProperty("user", USER);
        String file = System.getenv("LF_JDBC_PASSWORD_FILE");
        if (file != null) {
            try {
                p.setProperty("password", Files.readString(Path.of(file), StandardCharsets.UTF_8).strip());
            } catch (IOException e) {
                throw new SQLException("cannot read LF_JDBC_PASSWORD_FILE", e);
            }
        }
        return DriverManager.getConnection(URL, p);
    }

    Connection open() throws SQLException {
        Connection c = connect();
        opened.add(c);
        return c;
    }

    @BeforeEach
    void setUp(TestInfo info) throws SQLException {
        testName = info.getTestMethod().map(m -> m.getName()).orElse("test");
        conn = open();
    }

    @AfterEach
    void tearDown() {
        for (Connection c : opened) {
            try {
                c.close();
            } catch (SQLException e) {
                // closing
            }
        }
    }

    String resource(String tag) {
        return "java:" + testName + tag + ":" + UUID.randomUUID().toString().substring(0, 8);
    }

    static long scalarLong(Connection c, String sql) throws SQLException {
        try (Statement st = c.createStatement(); ResultSet rs = st.executeQuery(sql)) {
            rs.next();
            return rs.getLong(1);
        }
    }

    /** A fresh account row (fence 0), written without a generation. */
    static int newRow(Connection c) throws SQLException {
        try (Statement st = c.createStatement();
             ResultSet rs = st.executeQuery(
                     "INSERT INTO account (owner, balance) VALUES ('nobody', 100) RETURNING id")) {
            rs.next();
            return rs.getInt(1);
        }
    }

    /** owner and fence of an account row */
    static String readRow(Connection c, int id) throws SQLException {
        try (PreparedStatement ps = c.prepareStatement(
                "SELECT owner, balance, fence FROM account WHERE id = ?")) {
            ps.setInt(1, id);
            try (ResultSet rs = ps.executeQuery()) {
                rs.next();
                return rs.getString(1) + "/" + rs.getInt(2) + "/" + rs.getLong(3);
            }
        }
    }

    static int setOwner(Connection c, int id, String owner) throws SQLException {
        try (PreparedStatement ps = c.prepareStatement("UPDATE account SET owner = ? WHERE id = ?")) {
            ps.setString(1, owner);
            ps.setInt(2, id);
            return ps.executeUpdate();
        }
    }

    static String redis(String... args) throws IOException, InterruptedException {
        List<String> cmd = new ArrayList<>(List.of(REDIS_CLI, "-s", REDIS_SOCK));
        cmd.addAll(List.of(args));
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8).strip();
        if (!p.waitFor(30, TimeUnit.SECONDS) || p.exitValue() != 0) {
            throw new IOException("redis-cli " + String.join(" ", args) + ": " + out);
        }
        return out;
    }

    /** lease_fence.queue(resource): "position:pid" of each waiter, position 1 first. */
    static List<String> queue(Connection c, String resource) throws SQLException {
        List<String> out = new ArrayList<>();
        try (PreparedStatement ps = c.prepareStatement(
                "SELECT position, pid FROM lease_fence.queue(?) ORDER BY position")) {
            ps.setString(1, resource);
            try (ResultSet rs = ps.executeQuery()) {
                while (rs.next()) {
                    out.add(rs.getInt(1) + ":" + rs.getInt(2));
                }
            }
        }
        return out;
    }

    /** Until {@code n} waiters are queued for {@code resource}: a logical
     * condition, waited for 30 s at most (then the test fails, never hangs). */
    static void waitQueued(Connection c, String resource, int n) throws Exception {
        long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        List<String> q;
        while ((q = queue(c, resource)).size() != n) {
            if (System.nanoTime() > end) {
                fail("never " + n + " waiter(s) queued for " + resource + ": " + q);
            }
            Thread.sleep(10);
        }
    }

    static int pid(Connection c) throws SQLException {
        return c.unwrap(org.postgresql.PGConnection.class).getBackendPID();
    }

    /** {@code call} on a thread of its own (not the common pool: with one CPU
     * free it runs one blocking task at a time). */
    static <T> java.util.concurrent.FutureTask<T> started(java.util.concurrent.Callable<T> call) {
        java.util.concurrent.FutureTask<T> task = new java.util.concurrent.FutureTask<>(call);
        Thread t = new Thread(task);
        t.setDaemon(true);
        t.start();
        return task;
    }

    static void assumeRedisCli() {
        assumeTrue(REDIS_SOCK != null && !REDIS_SOCK.isEmpty(), "LF_REDIS_SOCK is not set");
        boolean found = REDIS_CLI.contains(File.separator) && Files.isExecutable(Path.of(REDIS_CLI));
        for (String dir : System.getenv().getOrDefault("PATH", "/usr/bin:/bin").split(File.pathSeparator)) {
            if (Files.isExecutable(Path.of(dir, REDIS_CLI))) {
                found = true;
            }
        }
        assumeTrue(found, REDIS_CLI + " is not on PATH");
    }

    // ------------------------------------------------------------------

    @Test
    void acquireAndRelease() throws SQLException {
        String res = resource("");
        Lease lease = LeaseFence.acquire(conn, res, 10000);
        assertTrue(lease.isAcquired());
        assertEquals("acquired", lease.status());
        assertEquals(res, lease.resource());
        assertTrue(lease.identity().matches("[0-9a-f]{32}"), lease.identity());
        assertTrue(lease.generation() > 0);
        assertTrue(lease.validityMs() > 0 && lease.validityMs() <= 10000);
        assertNull(lease.reason());
        assertTrue(conn.getAutoCommit());

        ReleaseOutcome out = LeaseFence.releaseOutcome(conn, lease);
        assertEquals(new ReleaseOutcome(true, ReleaseStatus.RELEASED, null), out);
        // again: gone, left alone
        assertEquals(ReleaseStatus.NOT_HELD, LeaseFence.release(conn, lease));

        // a new acquire draws a higher generation
        Lease next = LeaseFence.acquire(conn, res, 10000, 0, 0);
        assertTrue(next.generation() > lease.generation());
        assertEquals(ReleaseStatus.RELEASED, LeaseFence.release(conn, next));
    }

    @Test
    void busyIsBusy() throws SQLException {
        String res = resource("");
        Connection other = open();
        Lease held = LeaseFence.acquire(conn, res, 10000);
        LeaseBusyException e = assertThrows(LeaseBusyException.class,
                () -> LeaseFence.acquire(other, res, 10000));
        assertInstanceOf(LeaseDeniedException.class, e);
        assertEquals("busy", e.status());
        assertEquals(Boolean.FALSE, e.lease().acquired());
        assertNull(e.reason());
        assertEquals(Optional.empty(), LeaseFence.tryAcquire(other, res, 10000));
        // waitMs: still busy at the deadline
        long t0 = System.nanoTime();
        assertEquals(Optional.empty(), LeaseFence.tryAcquire(other, res, 10000, 0, 300));
        assertTrue(System.nanoTime() - t0 >= TimeUnit.MILLISECONDS.toNanos(250));
        assertEquals(ReleaseStatus.RELEASED, LeaseFence.release(conn, held));
        Optional<Lease> mine = LeaseFence.tryAcquire(other, res, 10000);
        assertTrue(mine.isPresent());
        assertTrue(mine.get().generation() > held.generation());
        assertEquals(ReleaseStatus.RELEASED, LeaseFence.release(other, mine.get()));
    }

    @Test
    void renewExtendsAndLostIsLost() throws SQLException {
        String res = resource("");
        Lease lease = LeaseFence.acquire(conn, res, 5000);
        long validity = LeaseFence.renew(conn, lease, 20000);
        assertTrue(validity > 5000 && validity <= 20000, "validity " + validity);
        assertEquals(ReleaseStatus.RELEASED, LeaseFence.release(conn, lease));
        LeaseLostException e = assertThrows(LeaseLostException.class,
                () -> LeaseFence.renew(conn, lease, 20000));
        assertEquals("lost", e.status());
        assertSame(lease, e.lease());
        assertInstanceOf(LeaseDeniedException.class, e);
    }

    @Test
    void releaseOfALeaseNotHeldIsNotHeld() throws SQLException {
        String res = resource("");
        Lease ghost = new Lease(res, "0".repeat(32), 1, 0);
        ReleaseOutcome out = LeaseFence.releaseOutcome(conn, ghost);
        assertEquals(ReleaseStatus.NOT_HELD, out.status());
        assertEquals(Boolean.FALSE, out.released());
        assertNull(out.reason());
        // someone else's lease is left alone
        Lease held = LeaseFence.acquire(conn, res, 10000);
        assertEquals(ReleaseStatus.NOT_HELD, LeaseFence.release(conn, ghost));
        assertEquals(ReleaseStatus.RELEASED, LeaseFence.release(conn, held));
    }

    @Test
    void insufficientValidityIsADefiniteNo() throws SQLException {
        LeaseDeniedException e = assertThrows(LeaseDeniedException.class,
                () -> LeaseFence.acquire(conn, resource(""), 100, 100, 0));
        assertEquals("insufficient_validity", e.status());
        assertEquals(Boolean.FALSE, e.lease().acquired());
        assertFalse(e instanceof LeaseBusyException);
    }

    @Test
    void fencedCommitsAndReturnsTheResult() throws SQLException {
        int id = newRow(conn);
        Lease lease = LeaseFence.acquire(conn, resource(""), 10000);
        int n = LeaseFence.fenced(conn, lease, c -> setOwner(c, id, "me"));
        assertEquals(1, n);
        assertTrue(conn.getAutoCommit(), "autocommit restored");
        assertEquals("me/100/" + lease.generation(), readRow(conn, id));
        // the generation ended with the transaction
        try (Statement st = conn.createStatement();
             ResultSet rs = st.executeQuery("SELECT lease_fence.current_generation()")) {
            rs.next();
            assertNull(rs.getObject(1));
        }
        // on a connection with autocommit off (and no open transaction) as well
        conn.setAutoCommit(false);
        LeaseFence.fenced(conn, lease, c -> setOwner(c, id, "me too"));
        assertFalse(conn.getAutoCommit());
        conn.setAutoCommit(true);
        assertEquals("me too/100/" + lease.generation(), readRow(conn, id));
        assertEquals(ReleaseStatus.RELEASED, LeaseFence.release(conn, lease));
    }

    @Test
    void fencedRollsBackOnAnyException() throws SQLException {
        int id = newRow(conn);
        Lease lease = LeaseFence.acquire(conn, resource(""), 10000);
        SQLException mine = new SQLException("the work failed", "P0001");
        SQLException thrown = assertThrows(SQLException.class, () -> LeaseFence.fenced(conn, lease, c -> {
            setOwner(c, id, "rolled back");
            throw mine;
        }));
        assertSame(mine, thrown);
        assertTrue(conn.getAutoCommit());
        assertEquals("nobody/100/0", readRow(conn, id));

        IllegalStateException bug = assertThrows(IllegalStateException.class,
                () -> LeaseFence.fenced(conn, lease, c -> {
                    setOwner(c, id, "rolled back too");
                    throw new IllegalStateException("bug");
                }));
        assertEquals("bug", bug.getMessage());
        assertTrue(conn.getAutoCommit());
        assertEquals("nobody/100/0", readRow(conn, id));
        assertEquals(ReleaseStatus.RELEASED, LeaseFence.release(conn, lease));
    }

    @Test
    void helpersRefuseToRunInsideTheCallersTransaction() throws SQLException {
        int id = newRow(conn);
        Lease lease = LeaseFence.acquire(conn, resource(""), 10000);
        conn.setAutoCommit(false);
        setOwner(conn, id, "caller's");            // opens the caller's transaction
        SQLException e = assertThrows(SQLException.class,
                () -> LeaseFence.fenced(conn, lease, c -> setOwner(c, id, "fenced")));
        assertEquals("25001", e.getSQLState());
        assertThrows(SQLException.class, () -> LeaseFence.release(conn, lease));
        conn.rollback();                            // the caller's transaction is the caller's
        conn.setAutoCommit(true);
        assertEquals("nobody/100/0", readRow(conn, id));
        assertEquals(ReleaseStatus.RELEASED, LeaseFence.release(conn, lease));
    }

    @Test
    void staleGenerationNamesTheRow() throws SQLException {
        int id = newRow(conn);
        long older = scalarLong(conn, "SELECT lease_fence.next_generation()");
        long newer = scalarLong(conn, "SELECT lease_fence.next_generation()");
        LeaseFence.fenced(conn, newer, null, c -> setOwner(c, id, "newer"));
        StaleGenerationException e = assertThrows(StaleGenerationException.class,
                () -> LeaseFence.fenced(conn, older, null, c -> setOwner(c, id, "older")));
        assertEquals("LF001", e.getSQLState());
        assertEquals("LF001", e.sqlState());
        assertEquals("public", e.schema());
        assertEquals("account", e.table());
        assertEquals("fence", e.column());
        assertNull(e.resource());
        assertNotNull(e.detail());
        assertInstanceOf(PSQLException.class, e.getCause());
        assertEquals("newer/100/" + newer, readRow(conn, id));
    }

    @Test
    void staleGenerationNamesTheResource() throws SQLException {
        String res = resource("");
        long older = scalarLong(conn, "SELECT lease_fence.next_generation()");
        long newer = scalarLong(conn, "SELECT lease_fence.next_generation()");
        LeaseFence.fenced(conn, newer, res, c -> null);
        boolean[] ran = {false};
        StaleGenerationException e = assertThrows(StaleGenerationException.class,
                () -> LeaseFence.fenced(conn, older, res, c -> ran[0] = true));
        assertFalse(ran[0], "the work must not run");
        assertEquals("lease_fence", e.schema());
        assertEquals("resource_generation", e.table());
        assertNull(e.column());
        assertEquals(res, e.resource());
    }

    @Test
    void missingConflictingAndUnissuedGeneration() throws SQLException {
        // the strict table, written without a generation
        PSQLException raw = assertThrows(PSQLException.class, () -> {
            try (Statement st = conn.createStatement()) {
                st.executeUpdate("INSERT INTO ledger (note) VALUES ('unfenced')");
            }
        });
        MissingGenerationException missing = assertInstanceOf(MissingGenerationException.class,
                LeaseFence.translate(raw));
        assertEquals("LF002", missing.getSQLState());
        assertEquals("ledger", missing.table());
        assertEquals("fence", missing.column());
        assertSame(raw, missing.getCause());

        long g = scalarLong(conn, "SELECT lease_fence.next_generation()");
        LeaseFence.fenced(conn, g, null, c -> {
            try (Statement st = c.createStatement()) {
                return st.executeUpdate("INSERT INTO ledger (note) VALUES ('fenced')");
            }
        });

        int id = newRow(conn);
        ConflictingGenerationException conflicting = assertThrows(
                ConflictingGenerationException.class, () -> LeaseFence.fenced(conn, g, null, c -> {
                    try (PreparedStatement ps = c.prepareStatement(
                            "UPDATE account SET fence = ? WHERE id = ?")) {
                        ps.setLong(1, g + 1);
                        ps.setInt(2, id);
                        return ps.executeUpdate();
                    }
                }));
        assertEquals("account", conflicting.table());

        UnissuedGenerationException unissued = assertThrows(UnissuedGenerationException.class,
                () -> LeaseFence.fenced(conn, g + 1_000_000, null, c -> setOwner(c, id, "typo")));
        assertEquals("LF004", unissued.sqlState());
        assertEquals("public", unissued.schema());
        assertEquals("account", unissued.table());
        assertEquals("fence", unissued.column());
        assertEquals("nobody/100/0", readRow(conn, id));
    }

    @Test
    void translateMapsWhatAFrameworkWraps() throws SQLException {
        long older = scalarLong(conn, "SELECT lease_fence.next_generation()");
        long newer = scalarLong(conn, "SELECT lease_fence.next_generation()");
        int id = newRow(conn);
        LeaseFence.fenced(conn, newer, null, c -> setOwner(c, id, "newer"));
        // a batch, in the caller's own transaction, with the generation set by hand
        conn.setAutoCommit(false);
        SQLException batchError;
        try (PreparedStatement set = conn.prepareStatement("SELECT lease_fence.set_generation(?, NULL::text)")) {
            set.setLong(1, older);
            set.executeQuery().close();
            try (PreparedStatement ps = conn.prepareStatement("UPDATE account SET owner = ? WHERE id = ?")) {
                ps.setString(1, "stale batch");
                ps.setInt(2, id);
                ps.addBatch();
                ps.executeBatch();
                fail("the stale batch was not refused");
                return;
            }
        } catch (SQLException e) {
            batchError = e;
        } finally {
            conn.rollback();
            conn.setAutoCommit(true);
        }
        StaleGenerationException stale = assertInstanceOf(StaleGenerationException.class,
                LeaseFence.translate(batchError));
        assertEquals("account", stale.table());
        // wrapped as an ORM would: found through the causes
        RuntimeException orm = new RuntimeException("could not execute statement",
                new SQLException("wrapper", batchError));
        assertTrue(LeaseFence.fenceException(orm).isPresent());
        assertInstanceOf(StaleGenerationException.class, LeaseFence.fenceException(orm).get());
        // anything else is left alone
        SQLException syntax = assertThrows(SQLException.class, () -> {
            try (Statement st = conn.createStatement()) {
                st.execute("SELEC 1");
            }
        });
        assertSame(syntax, LeaseFence.translate(syntax));
        assertEquals("newer/100/" + newer, readRow(conn, id));
    }

    @Test
    void transactionLeaseCommitsUnderItsGeneration() throws SQLException {
        String res = resource("");
        int id = newRow(conn);
        Lease lease = LeaseFence.transactionLease(conn, res, 10000, (l, c) -> {
            setOwner(c, id, "tx");
            return l;
        });
        assertTrue(conn.getAutoCommit());
        assertEquals("tx/100/" + lease.generation(), readRow(conn, id));
        // released at COMMIT: free at once
        Lease next = LeaseFence.acquire(conn, res, 10000);
        assertTrue(next.generation() > lease.generation());
        assertEquals(ReleaseStatus.RELEASED, LeaseFence.release(conn, next));
    }

    @Test
    void transactionLeaseBusyNeverRunsTheWork() throws SQLException {
        String res = resource("");
        Lease held = LeaseFence.acquire(conn, res, 10000);
        Connection other = open();
        boolean[] ran = {false};
        assertThrows(LeaseBusyException.class,
                () -> LeaseFence.transactionLease(other, res, 10000, (l, c) -> ran[0] = true));
        assertFalse(ran[0]);
        assertTrue(other.getAutoCommit());
        assertEquals(ReleaseStatus.RELEASED, LeaseFence.release(conn, held));
    }

    @Test
    void waitingAcquireIsWokenByTheRelease() throws Exception {
        String res = resource("");
        Lease held = LeaseFence.acquire(conn, res, 30000);
        Connection other = open();
        Thread releaser = new Thread(() -> {
            try {
                Thread.sleep(300);
                LeaseFence.release(conn, held);
            } catch (InterruptedException | SQLException e) {
                // the assertion below fails then
            }
        });
        long t0 = System.nanoTime();
        releaser.start();
        Lease mine = LeaseFence.acquire(other, res, 10000, 0, 10000);
        long waitedMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
        releaser.join();
        assertTrue(mine.generation() > held.generation());
        assertTrue(waitedMs < 8000, "woken by the release, not at the deadline: " + waitedMs + " ms");
        assertEquals(ReleaseStatus.RELEASED, LeaseFence.release(other, mine));
    }

    /**
     * fair: two waiters queued in a known order (the second starts only once
     * the first is visibly queued); the holder's release grants the first,
     * the second still waits, first in the queue now, and gets the lease
     * (a higher generation) when the first releases.
     */
    @Test
    void fairAcquireGrantsWaitersInArrivalOrder() throws Exception {
        String res = resource("");
        Lease held = LeaseFence.acquire(conn, res, 600000);
        Connection firstConn = open();
        Connection secondConn = open();
        LeaseOptions fair = LeaseOptions.DEFAULTS.fair(true);
        java.util.concurrent.FutureTask<Lease> first = started(
                () -> LeaseFence.acquire(firstConn, res, 600000, 0, 600000, true, fair));
        waitQueued(conn, res, 1);
        assertEquals(List.of("1:" + pid(firstConn)), queue(conn, res));
        java.util.concurrent.FutureTask<Lease> second = started(
                () -> LeaseFence.acquire(secondConn, res, 600000, 0, 600000, true, fair));
        waitQueued(conn, res, 2);
        assertEquals(List.of("1:" + pid(firstConn), "2:" + pid(secondConn)), queue(conn, res));

        assertEquals(ReleaseStatus.RELEASED, LeaseFence.release(conn, held));
        Lease a = first.get();
        assertTrue(a.generation() > held.generation());
        assertEquals(List.of("1:" + pid(secondConn)), queue(conn, res), "the second waiter is next");
        assertFalse(second.isDone(), "the second waiter was granted while the first holds the lease");

        assertEquals(ReleaseStatus.RELEASED, LeaseFence.release(firstConn, a));
        Lease b = second.get();
        assertTrue(b.generation() > a.generation());
        assertEquals(List.of(), queue(conn, res));
        assertEquals(ReleaseStatus.RELEASED, LeaseFence.release(secondConn, b));
    }

    /** A verb that acquires, called on a connection; returns the generation granted. */
    interface AcquiringVerb {
        long call(Connection c) throws Exception;
    }

    /**
     * Every other verb that acquires takes LeaseOptions (null refused before
     * anything is sent) and sends fair: each, waiting while another session
     * holds the lease, is visibly queued, and is granted when the holder
     * releases.
     */
    @Test
    void everyAcquiringVerbTakesFair() throws Exception {
        String res = resource("");
        LeaseOptions fair = LeaseOptions.DEFAULTS.fair(true);
        assertFalse(LeaseOptions.DEFAULTS.fair());
        assertTrue(fair.fair());
        assertThrows(IllegalArgumentException.class,
                () -> LeaseFence.acquire(conn, res, 1000, 0, 0, true, null));
        assertThrows(IllegalArgumentException.class,
                () -> LeaseFence.job(conn, res, 1000, 0, 0, null, (l, c) -> fail("ran")));
        Map<String, AcquiringVerb> verbs = new LinkedHashMap<>();
        verbs.put("tryAcquire", c -> {
            Lease l = LeaseFence.tryAcquire(c, res, 60000, 0, 600000, fair).orElseThrow();
            LeaseFence.release(c, l);
            return l.generation();
        });
        verbs.put("acquireOutcome", c -> {
            Lease l = LeaseFence.acquireOutcome(c, res, 60000, 0, 600000, fair);
            LeaseFence.release(c, l);
            return l.generation();
        });
        verbs.put("job", c -> LeaseFence.job(c, res, 60000, 0, 600000, fair,
                (l, w) -> l.generation()));
        verbs.put("transactionLease", c -> LeaseFence.transactionLease(c, res, 60000, 0, 600000,
                false, fair, (l, w) -> l.generation()));
        Connection watch = open();
        verbs.put("keptAliveLease", c -> LeaseFence.keptAliveLease(c, watch, res, 60000, 0, 600000,
                0, fair, (l, w) -> l.lease().generation()));
        for (Map.Entry<String, AcquiringVerb> verb : verbs.entrySet()) {
            Lease held = LeaseFence.acquire(conn, res, 600000);
            Connection c = open();
            java.util.concurrent.FutureTask<Long> waiter = started(() -> verb.getValue().call(c));
            waitQueued(conn, res, 1);
            assertEquals(List.of("1:" + pid(c)), queue(conn, res), verb.getKey());
            assertEquals(ReleaseStatus.RELEASED, LeaseFence.release(conn, held));
            assertTrue(waiter.get() > held.generation(), verb.getKey());
        }
    }

    @Test
    void fencedChecksItsArguments() {
        Lease noGeneration = new Lease("r", null, null, null, Boolean.FALSE, "busy", null);
        assertThrows(IllegalArgumentException.class,
                () -> LeaseFence.fenced(conn, noGeneration, c -> null));
        assertThrows(IllegalArgumentException.class,
                () -> LeaseFence.fenced(conn, -1, null, c -> null));
    }

    @Test
    void leaseLostBeforeCommitIsLeaseLostAtCommit() throws Exception {
        assumeRedisCli();
        String res = resource("");
        int id = newRow(conn);
        LeaseLostAtCommitException e = assertThrows(LeaseLostAtCommitException.class,
                () -> LeaseFence.transactionLease(conn, res, 2000, (l, c) -> {
                    setOwner(c, id, "doomed");
                    deleteKeyAndOutliveHalfTheTtl(res);
                    return null;
                }));
        assertEquals("LF010", e.getSQLState());
        assertInstanceOf(PSQLException.class, e.getCause());
        assertTrue(conn.getAutoCommit());
        assertEquals("nobody/100/0", readRow(conn, id));
    }

    /**
     * Redis stalls (CLIENT PAUSE) longer than lease_fence.command_timeout_ms:
     * the acquire is unknown — LeaseUnknownException, not a LeaseDenied, from
     * acquire and from tryAcquire alike — with identity and generation kept.
     */
    @Test
    void unknownIsNeverNotAcquired() throws Exception {
        assumeRedisCli();
        List<Connection> conns = new ArrayList<>();
        for (int i = 0; i < 2; i++) {
            Connection c = open();
            try (Statement st = c.createStatement()) {
                st.execute("SET lease_fence.command_timeout_ms = 150");
                st.execute("SET lease_fence.cleanup_timeout_ms = 150");
            }
            // a backend's first acquire checks key_prefix's owner: done before the pause
            LeaseFence.release(c, LeaseFence.acquire(c, resource(":warm"), 10000));
            conns.add(c);
        }
        String res = resource("");
        LeaseUnknownException viaAcquire;
        LeaseUnknownException viaTry;
        redis("CLIENT", "PAUSE", "3000", "ALL");
        try {
            viaAcquire = assertThrows(LeaseUnknownException.class,
                    () -> LeaseFence.acquire(conns.get(0), res, 10000));
            viaTry = assertThrows(LeaseUnknownException.class,
                    () -> LeaseFence.tryAcquire(conns.get(1), res, 10000));
        } finally {
            redis("PING");                      // waits out the pause
        }
        for (LeaseUnknownException e : List.of(viaAcquire, viaTry)) {
            assertFalse(LeaseDeniedException.class.isInstance(e));
            assertEquals("unknown", e.status());
            assertNull(e.lease().acquired());
            assertTrue(e.lease().identity().matches("[0-9a-f]{32}"));
            assertNotNull(e.lease().generation());
            assertNotNull(e.reason());
        }
        // a conditional release is safe; a new acquire draws a new generation
        assertEquals(ReleaseStatus.NOT_HELD, LeaseFence.release(conn, viaAcquire.lease()));
        Lease fresh = LeaseFence.acquire(conn, res, 10000);
        assertTrue(fresh.generation() > viaTry.lease().generation());
        assertEquals(ReleaseStatus.RELEASED, LeaseFence.release(conn, fresh));
    }

    /**
     * Redis does not answer a new connection's check (CLIENT PAUSE, short
     * lease_fence.connect_timeout_ms): nothing was sent, so the acquire is
     * LeaseUnavailableException, a definite no, with a reason, from acquire
     * and from tryAcquire alike. (run.sh's
     * app_noredis role cannot log in over TCP, so this is how JDBC sees it.)
     */
    @Test
    void unavailableIsADefiniteNo() throws Exception {
        assumeRedisCli();
        Connection c = open();                  // a new backend: no Redis connection yet
        try (Statement st = c.createStatement()) {
            st.execute("SET lease_fence.connect_timeout_ms = 150");
            st.execute("SET lease_fence.command_timeout_ms = 150");
        }
        Connection t = open();                  // another new backend, for tryAcquire
        try (Statement st = t.createStatement()) {
            st.execute("SET lease_fence.connect_timeout_ms = 150");
            st.execute("SET lease_fence.command_timeout_ms = 150");
        }
        String res = resource("");
        LeaseUnavailableException e;
        LeaseUnavailableException viaTry;
        redis("CLIENT", "PAUSE", "3000", "ALL");
        try {
            e = assertThrows(LeaseUnavailableException.class, () -> LeaseFence.acquire(c, res, 10000));
            // tryAcquire: the same exception, not an empty Optional (that is busy only)
            viaTry = assertThrows(LeaseUnavailableException.class,
                    () -> LeaseFence.tryAcquire(t, res, 10000));
        } finally {
            redis("PING");
        }
        assertEquals("unavailable", viaTry.status());
        assertEquals(Boolean.FALSE, viaTry.lease().acquired());
        assertInstanceOf(LeaseDeniedException.class, e);
        assertEquals("unavailable", e.status());
        assertEquals(Boolean.FALSE, e.lease().acquired());
        assertNotNull(e.reason());
        assertTrue(e.getMessage().contains(e.reason()));
        assertEquals("0", redis("EXISTS", KEY_PREFIX + "{" + res + "}"));
    }

    // ------------------------------------------------------------------
    // keptAliveLease

    static String leaseKey(String res) {
        return KEY_PREFIX + "{" + res + "}";
    }

    org.postgresql.ds.PGSimpleDataSource dataSource() throws SQLException {
        assumeTrue(URL != null, "LF_JDBC_URL is not set");
        org.postgresql.ds.PGSimpleDataSource ds = new org.postgresql.ds.PGSimpleDataSource();
        ds.setURL(URL);
        ds.setUser(USER);
        String file = System.getenv("LF_JDBC_PASSWORD_FILE");
        if (file != null) {
            try {
                ds.setPassword(Files.readString(Path.of(file), StandardCharsets.UTF_8).strip());
            } catch (IOException e) {
                throw new SQLException("cannot read LF_JDBC_PASSWORD_FILE", e);
            }
        }
        return ds;
    }

    /**
     * keptAliveLease on a DataSource, TTL 1 s: a 3 s statement on the owner's
     * connection keeps the lease alive (the key still holds the identity,
     * the watch saw it active), a fenced write under it commits, and the end
     * releases it.
     */
    @Test
    void keptAliveLeaseOutlivesItsTtlAndIsReleased() throws Exception {
        assumeRedisCli();
        int id = newRow(conn);
        String res = resource("");
        KeptAliveLease[] held = new KeptAliveLease[1];
        String out = LeaseFence.keptAliveLease(dataSource(), res, 1000, (lease, c) -> {
            held[0] = lease;
            assertTrue(lease.lease().isAcquired());
            assertEquals("active", LeaseFence.keepaliveState(conn, lease.identity()));
            try (Statement st = c.createStatement()) {
                st.execute("SELECT pg_sleep(3)");
            }
            try {
                assertEquals(lease.identity(), redis("GET", leaseKey(res)),
                        "still held after three TTLs of a running statement");
            } catch (IOException | InterruptedException x) {
                throw new SQLException(x);
            }
            assertFalse(lease.isLost());
            lease.check();
            LeaseFence.fenced(c, lease.lease(), w -> setOwner(w, id, "kept alive"));
            try (PreparedStatement ps = c.prepareStatement(
                    "SELECT scope, state FROM lease_fence.leases WHERE identity = ?")) {
                ps.setString(1, lease.identity());
                try (ResultSet rs = ps.executeQuery()) {
                    assertTrue(rs.next());
                    assertEquals("session/held", rs.getString(1) + "/" + rs.getString(2));
                }
            }
            return "done";
        });
        assertEquals("done", out);
        assertEquals("kept alive/100/" + held[0].generation(), readRow(conn, id));
        assertEquals("0", redis("EXISTS", leaseKey(res)), "released at the end");
        assertNull(LeaseFence.keepaliveState(conn, held[0].identity()));
        assertFalse(Thread.currentThread().isInterrupted());
    }

    /**
     * Someone overwrites the key while the work runs a long statement: the
     * watch sees the lease lost and stops the work (the statement is
     * cancelled, 57014, and never finishes), keptAliveLease throws
     * LeaseLostException with the work's exception suppressed, the other
     * identity's key is untouched, and the fenced write before the loss is
     * the only one.
     */
    @Test
    void keptAliveLeaseLostStopsTheWork() throws Exception {
        assumeRedisCli();
        int id = newRow(conn);
        String res = resource("");
        String thief = "f".repeat(32);
        Connection watch = open();
        KeptAliveLease[] held = new KeptAliveLease[1];
        boolean[] finished = new boolean[1];
        LeaseLostException e = assertThrows(LeaseLostException.class,
                () -> LeaseFence.keptAliveLease(conn, watch, res, 3000, 0, 0, 100, (lease, c) -> {
                    held[0] = lease;
                    LeaseFence.fenced(c, lease.lease(), w -> setOwner(w, id, "before the loss"));
                    try {
                        redis("SET", leaseKey(res), thief, "PX", "60000");
                    } catch (IOException | InterruptedException x) {
                        throw new SQLException(x);
                    }
                    try (Statement st = c.createStatement()) {
                        st.execute("SELECT pg_sleep(60)");     // stopped by the watch
                    }
                    finished[0] = true;
                    LeaseFence.fenced(c, lease.lease(), w -> setOwner(w, id, "after the loss"));
                    return null;
                }));
        assertFalse(finished[0], "the work was stopped");
        assertEquals("lost", e.status());
        assertEquals(held[0].identity(), e.lease().identity());
        assertTrue(held[0].isLost());
        assertThrows(LeaseLostException.class, held[0]::check);
        assertEquals(1, e.getSuppressed().length, "the work's exception");
        assertEquals("57014", ((SQLException) e.getSuppressed()[0]).getSQLState());
        assertFalse(Thread.currentThread().isInterrupted(), "the watch's interrupt is cleared");
        assertTrue(conn.getAutoCommit());
        assertEquals("before the loss/100/" + held[0].generation(), readRow(conn, id));
        assertEquals(thief, redis("GET", leaseKey(res)), "the other identity's key is untouched");
        redis("DEL", leaseKey(res));
        assertNull(LeaseFence.keepaliveState(watch, held[0].identity()),
                "the release acknowledged the loss");
    }

    /**
     * The work's exception propagates unchanged and the lease is released
     * (a transaction the work left open is rolled back); bad arguments are
     * refused before anything is acquired.
     */
    @Test
    void keptAliveLeaseWorkExceptionReleasesAndArgumentsAreChecked() throws Exception {
        assumeRedisCli();
        String res = resource("");
        Connection watch = open();
        IllegalStateException boom = new IllegalStateException("boom");
        KeptAliveLease[] held = new KeptAliveLease[1];
        IllegalStateException e = assertThrows(IllegalStateException.class,
                () -> LeaseFence.keptAliveLease(conn, watch, res, 10000, (lease, c) -> {
                    held[0] = lease;
                    c.setAutoCommit(false);
                    setOwner(c, newRow(c), "rolled back");
                    throw boom;
                }));
        assertSame(boom, e);
        assertEquals("0", redis("EXISTS", leaseKey(res)));
        assertNull(LeaseFence.keepaliveState(watch, held[0].identity()));
        conn.setAutoCommit(true);

        assertThrows(IllegalArgumentException.class,
                () -> LeaseFence.keptAliveLease(conn, conn, res, 10000, (l, c) -> fail("ran")));
        assertThrows(IllegalArgumentException.class,
                () -> LeaseFence.keptAliveLease(conn, watch, res, 0, (l, c) -> fail("ran")));
        assertThrows(IllegalArgumentException.class,
                () -> LeaseFence.keptAliveLease(conn, watch, res, 10000, 0, -1, 0,
                        (l, c) -> fail("ran")));
        assertEquals("0", redis("EXISTS", leaseKey(res)), "nothing was acquired");
        // busy: thrown before the work runs, as acquire does
        Lease other = LeaseFence.acquire(watch, res, 10000);
        assertThrows(LeaseBusyException.class,
                () -> LeaseFence.keptAliveLease(conn, open(), res, 10000, (l, c) -> fail("ran")));
        assertEquals(ReleaseStatus.RELEASED, LeaseFence.release(watch, other));
    }

    // ------------------------------------------------------------------
    // job

    /**
     * Deletes the lease's key in Redis, then sleeps 1.1 s: past half of a
     * 2 s TTL, so that a server that asks Redis at COMMIT only when less
     * than min_validity_ms + ttl_ms / 2 is left asks (and one that always
     * asks does too).
     */
    static void deleteKeyAndOutliveHalfTheTtl(String res) throws SQLException {
        try {
            assertEquals("1", redis("DEL", KEY_PREFIX + "{" + res + "}"));
            Thread.sleep(1100);
        } catch (IOException | InterruptedException x) {
            throw new SQLException(x);
        }
    }

    static TransactionState txState(Connection c) throws SQLException {
        return c.unwrap(BaseConnection.class).getTransactionState();
    }

    /** Another session takes the resource at once (no wait): the job's lease is gone. */
    long freeRightAway(String res) throws SQLException {
        Lease next = LeaseFence.acquire(open(), res, 10000);   // LeaseBusyException if still held
        assertEquals(ReleaseStatus.RELEASED, LeaseFence.release(conn, next));
        return next.generation();
    }

    @Test
    void jobCommitsUnderItsGenerationAndReleases() throws Exception {
        String res = resource("");
        int id = newRow(conn);
        Lease lease = LeaseFence.job(conn, res, 10000, 500, 0, (l, c) -> {
            assertEquals(l.generation().longValue(),
                    scalarLong(c, "SELECT lease_fence.current_generation()"));
            setOwner(c, id, "job");
            return l;
        });
        assertEquals(Boolean.TRUE, lease.acquired());
        assertEquals("acquired", lease.status());
        assertTrue(lease.validityMs() >= 500);
        assertTrue(conn.getAutoCommit());
        assertEquals(TransactionState.IDLE, txState(conn));
        assertEquals("job/100/" + lease.generation(), readRow(conn, id));
        assertTrue(freeRightAway(res) > lease.generation(), "released at COMMIT");
    }

    @Test
    void jobRestoresAutocommitOff() throws SQLException {
        String res = resource("");
        int id = newRow(conn);
        Connection c = open();
        c.setAutoCommit(false);
        Lease lease = LeaseFence.job(c, res, 10000, (l, cc) -> {
            setOwner(cc, id, "job, autocommit off");
            return l;
        });
        assertFalse(c.getAutoCommit());
        assertEquals(TransactionState.IDLE, txState(c));
        assertEquals("job, autocommit off/100/" + lease.generation(), readRow(conn, id));
    }

    @Test
    void jobBusyNeverRunsTheWork() throws SQLException {
        String res = resource("");
        int id = newRow(conn);
        Lease held = LeaseFence.acquire(conn, res, 10000);
        Connection other = open();
        boolean[] ran = {false};
        LeaseBusyException e = assertThrows(LeaseBusyException.class,
                () -> LeaseFence.job(other, res, 10000, (l, c) -> {
                    ran[0] = true;
                    return setOwner(c, id, "busy");
                }));
        assertFalse(ran[0]);
        assertInstanceOf(LeaseDeniedException.class, e);
        assertEquals(Boolean.FALSE, e.lease().acquired());
        assertTrue(other.getAutoCommit());
        assertEquals(TransactionState.IDLE, txState(other));
        assertEquals(1, scalarLong(other, "SELECT 1"));
        assertEquals("nobody/100/0", readRow(conn, id));
        assertEquals(ReleaseStatus.RELEASED, LeaseFence.release(conn, held));
    }

    @Test
    void jobWorkExceptionRollsBackAndReleases() throws SQLException {
        String res = resource("");
        int id = newRow(conn);
        IllegalStateException boom = new IllegalStateException("the work failed");
        long[] generation = {0};
        IllegalStateException e = assertThrows(IllegalStateException.class,
                () -> LeaseFence.job(conn, res, 10000, (l, c) -> {
                    generation[0] = l.generation();
                    setOwner(c, id, "rolled back");
                    throw boom;
                }));
        assertSame(boom, e);
        assertTrue(conn.getAutoCommit());
        assertEquals(TransactionState.IDLE, txState(conn));
        assertEquals("nobody/100/0", readRow(conn, id));
        assertTrue(freeRightAway(res) > generation[0], "released at ROLLBACK");
    }

    @Test
    void jobStaleWriteIsStaleGeneration() throws SQLException {
        String res = resource("");
        int id = newRow(conn);
        int mine = newRow(conn);
        Connection other = open();
        long[] newer = {0};
        StaleGenerationException e = assertThrows(StaleGenerationException.class,
                () -> LeaseFence.job(conn, res, 10000, (l, c) -> {
                    setOwner(c, mine, "job");
                    newer[0] = scalarLong(other, "SELECT lease_fence.next_generation()");
                    assertTrue(newer[0] > l.generation());
                    LeaseFence.fenced(other, newer[0], null, o -> setOwner(o, id, "newer"));
                    return setOwner(c, id, "stale");
                }));
        assertEquals("LF001", e.getSQLState());
        assertEquals("account", e.table());
        assertEquals("fence", e.column());
        assertEquals("newer/100/" + newer[0], readRow(conn, id));
        assertEquals("nobody/100/0", readRow(conn, mine));
        assertTrue(conn.getAutoCommit());
        assertEquals(TransactionState.IDLE, txState(conn));
        freeRightAway(res);
    }

    /**
     * The work catches a refused write (a newer generation wrote the row
     * meanwhile) and returns: its transaction is failed, and PostgreSQL would
     * answer COMMIT with ROLLBACK. job, transactionLease and fenced throw
     * TransactionRolledBackException instead of returning; nothing of the
     * transaction was committed; the lease went with it.
     */
    @Test
    void caughtRefusedWriteIsTransactionRolledBack() throws SQLException {
        Connection other = open();
        for (String verb : List.of("job", "transactionLease", "fenced")) {
            String res = resource(verb);
            int id = newRow(conn);
            int mine = newRow(conn);
            SQLException[] caught = {null};
            Lease explicit = verb.equals("fenced") ? LeaseFence.acquire(other, res, 10000) : null;
            LeaseWork<String> work = (l, c) -> {
                setOwner(c, mine, "job");
                long newer = scalarLong(other, "SELECT lease_fence.next_generation()");
                LeaseFence.fenced(other, newer, null, o -> setOwner(o, id, "newer"));
                try {
                    setOwner(c, id, "stale");
                } catch (SQLException e) {
                    caught[0] = LeaseFence.translate(e);    // and the work goes on
                }
                return "done";
            };
            TransactionRolledBackException e = assertThrows(TransactionRolledBackException.class,
                    () -> {
                        switch (verb) {
                            case "job":
                                LeaseFence.job(conn, res, 10000, work);
                                break;
                            case "transactionLease":
                                LeaseFence.transactionLease(conn, res, 10000, 0, 0, false, work);
                                break;
                            default:
                                LeaseFence.fenced(conn, explicit, c -> work.run(explicit, c));
                        }
                    }, verb);
            assertInstanceOf(StaleGenerationException.class, caught[0], verb);
            assertFalse(LeaseFence.fenceException(e).isPresent(), verb + ": not a fence error");
            assertNull(e.getSQLState(), verb);
            assertEquals("nobody/100/0", readRow(conn, mine), verb + ": nothing committed");
            assertTrue(conn.getAutoCommit(), verb);
            assertEquals(TransactionState.IDLE, txState(conn), verb);
            if (explicit != null) {
                assertEquals(ReleaseStatus.RELEASED, LeaseFence.release(other, explicit));
            } else {
                freeRightAway(res);
            }
        }
    }

    @Test
    void jobLeaseLostIsLeaseLostAtCommit() throws Exception {
        assumeRedisCli();
        String res = resource("");
        int id = newRow(conn);
        LeaseLostAtCommitException e = assertThrows(LeaseLostAtCommitException.class,
                () -> LeaseFence.job(conn, res, 2000, (l, c) -> {
                    setOwner(c, id, "doomed");
                    deleteKeyAndOutliveHalfTheTtl(res);
                    return null;
                }));
        assertEquals("LF010", e.getSQLState());
        assertInstanceOf(PSQLException.class, e.getCause());
        assertTrue(conn.getAutoCommit());
        assertEquals(TransactionState.IDLE, txState(conn));
        assertEquals("nobody/100/0", readRow(conn, id));
    }

    /**
     * The frontend messages pgjdbc logs (java.util.logging, FINEST: " FE=> Parse(...)",
     * " FE=> Sync"): before the work runs there is one Sync, after the Parse of
     * BEGIN and the Parse of the acquire — one round trip; then the work's
     * UPDATE and COMMIT, one Sync each.
     */
    @Test
    void jobSendsBeginWithTheAcquireInOneRoundTrip() throws SQLException {
        String res = resource("");
        int id = newRow(conn);
        Connection c = open();
        List<String> sent = new ArrayList<>();
        SimpleFormatter fmt = new SimpleFormatter();
        Handler capture = new Handler() {
            @Override
            public void publish(LogRecord r) {
                String m = fmt.formatMessage(r);
                if (m.contains("FE=>")) {
                    synchronized (sent) {
                        sent.add(m.strip());
                    }
                }
            }

            @Override
            public void flush() {
            }

            @Override
            public void close() {
            }
        };
        capture.setLevel(Level.ALL);
        Logger pgjdbc = Logger.getLogger("org.postgresql");
        Level level = pgjdbc.getLevel();
        boolean parents = pgjdbc.getUseParentHandlers();
        int[] beforeWork = {-1};
        Lease lease;
        pgjdbc.setUseParentHandlers(false);
        pgjdbc.addHandler(capture);
        pgjdbc.setLevel(Level.FINEST);
        try {
            lease = LeaseFence.job(c, res, 10000, (l, cc) -> {
                synchronized (sent) {
                    beforeWork[0] = sent.size();
                }
                return setOwner(cc, id, "one trip") == 1 ? l : null;
            });
        } finally {
            pgjdbc.setLevel(level);
            pgjdbc.removeHandler(capture);
            pgjdbc.setUseParentHandlers(parents);
        }
        List<String> first = sent.subList(0, beforeWork[0]);
        List<String> syncs = new ArrayList<>();
        for (String m : first) {
            if (m.startsWith("FE=> Sync")) {
                syncs.add(m);
            }
        }
        assertEquals(1, syncs.size(), "one Sync before the work: " + first);
        assertTrue(first.get(first.size() - 1).startsWith("FE=> Sync"), first.toString());
        int begin = -1;
        int acquire = -1;
        for (int i = 0; i < first.size(); i++) {
            String m = first.get(i);
            // pgjdbc 42.5 parses BEGIN; 42.7 (Debian 13) sends it as a simple
            // Query message: either way before the acquire and the one Sync
            if ((m.startsWith("FE=> Parse") || m.startsWith("FE=> SimpleQuery"))
                    && m.contains("query=\"BEGIN")) {
                begin = i;
            }
            if (m.startsWith("FE=> Parse") && m.contains("lease_fence.acquire(")) {
                acquire = i;
            }
        }
        assertTrue(begin >= 0 && acquire > begin, "BEGIN, then the acquire: " + first);
        long allSyncs = sent.stream().filter(m -> m.startsWith("FE=> Sync")).count();
        assertEquals(3, allSyncs, "BEGIN + acquire, the UPDATE, COMMIT: " + sent);
        assertNotNull(lease);
        assertEquals("one trip/100/" + lease.generation(), readRow(conn, id));
    }

    /**
     * A generation key that holds no generation: the server's XX001 is
     * DataCorruptedException (SQLSTATE XX001, the driver's exception its
     * cause) from acquire, tryAcquire and job alike; not a LeaseException.
     */
    @Test
    void corruptGenerationKeyIsDataCorrupted() throws Exception {
        assumeRedisCli();
        String res = resource("");
        // longer than any generation: the script compares by length first, so
        // "abc" would be below a generation of 4 digits (after a heal)
        redis("SET", KEY_PREFIX + "{" + res + "}:gen", "x".repeat(20));
        try {
            Map<String, Executable> calls = new LinkedHashMap<>();
            calls.put("acquire", () -> LeaseFence.acquire(conn, res, 10000));
            calls.put("tryAcquire", () -> LeaseFence.tryAcquire(conn, res, 10000));
            calls.put("job", () -> LeaseFence.job(conn, res, 10000, (l, c) -> fail("the job ran")));
            for (Map.Entry<String, Executable> call : calls.entrySet()) {
                DataCorruptedException e = assertThrows(DataCorruptedException.class, call.getValue(),
                        call.getKey() + " (the :gen key holds '"
                        + redis("GET", KEY_PREFIX + "{" + res + "}:gen") + "')");
                assertEquals("XX001", e.getSQLState(), call.getKey());
                assertEquals("XX001", ((SQLException) e.getCause()).getSQLState(), call.getKey());
            }
            assertTrue(conn.getAutoCommit(), "autocommit restored");
            assertEquals("0", redis("EXISTS", KEY_PREFIX + "{" + res + "}"));
        } finally {
            redis("DEL", KEY_PREFIX + "{" + res + "}:gen");
        }
    }

    @Test
    void jobStaleIsRetriedInTheSameTransaction() throws Exception {
        assumeRedisCli();
        String res = resource("");
        int id = newRow(conn);
        long stored = scalarLong(conn, "SELECT lease_fence.next_generation()") + 1000;
        redis("SET", KEY_PREFIX + "{" + res + "}:gen", Long.toString(stored));
        Lease lease = LeaseFence.job(conn, res, 10000, (l, c) -> {
            setOwner(c, id, "healed");
            return l;
        });
        assertTrue(lease.generation() > stored);
        assertEquals("healed/100/" + lease.generation(), readRow(conn, id));
        assertEquals("0", redis("EXISTS", KEY_PREFIX + "{" + res + "}"));
    }

    /**
     * The acceptance test: two holders of one resource. A's lease runs out
     * while it stalls, B acquires and writes; A's fenced write raises
     * StaleGenerationException, and B's row stands.
     */
    @Test
    void twoHoldersTheStaleOneIsFencedOff() throws Exception {
        String res = resource("");
        int id = newRow(conn);
        Connection a = open();
        Connection b = open();

        Lease leaseA = LeaseFence.acquire(a, res, 300);
        Thread.sleep(600);                                  // A stalls past its TTL
        Lease leaseB = LeaseFence.acquire(b, res, 10000);   // B gets it, newer generation
        assertTrue(leaseB.generation() > leaseA.generation());
        LeaseFence.fenced(b, leaseB, c -> setOwner(c, id, "B"));

        StaleGenerationException e = assertThrows(StaleGenerationException.class,
                () -> LeaseFence.fenced(a, leaseA, c -> setOwner(c, id, "A")));
        assertEquals(res, e.resource());                    // stopped at the resource fence
        assertEquals("lease_fence", e.schema());
        assertEquals("B/100/" + leaseB.generation(), readRow(conn, id));

        // and fencing rows only, the row itself refuses A
        StaleGenerationException rowOnly = assertThrows(StaleGenerationException.class,
                () -> LeaseFence.fenced(a, leaseA.generation(), null, c -> setOwner(c, id, "A")));
        assertEquals("account", rowOnly.table());
        assertEquals("fence", rowOnly.column());
        assertEquals("B/100/" + leaseB.generation(), readRow(conn, id));

        assertThrows(LeaseLostException.class, () -> LeaseFence.renew(a, leaseA, 10000));
        assertEquals(ReleaseStatus.NOT_HELD, LeaseFence.release(a, leaseA));
        assertEquals(ReleaseStatus.RELEASED, LeaseFence.release(b, leaseB));
    }
}

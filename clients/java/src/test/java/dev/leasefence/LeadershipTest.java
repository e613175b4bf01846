package dev.leasefence;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.BufferedReader;
import java.io.File;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.lang.reflect.Proxy;
import java.net.URISyntaxException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInfo;
import org.postgresql.PGConnection;

/**
 * Leader election ({@link LeaseFence#leadership}, {@link LeaseFence#campaign})
 * and {@link LeaseFence#takeOver} against the real servers, as
 * {@link LeaseFenceTest}. The frozen-leader story runs the old leader in a
 * process of its own ({@link LeaderChild}) and freezes it with SIGSTOP.
 */
class LeadershipTest {

    final List<Connection> opened = new ArrayList<>();
    String testName;
    Process child;

    Connection open() throws SQLException {
        Connection c = LeaseFenceTest.connect();
        opened.add(c);
        return c;
    }

    @BeforeEach
    void setUp(TestInfo info) {
        testName = info.getTestMethod().map(m -> m.getName()).orElse("test");
    }

    @AfterEach
    void tearDown() throws Exception {
        if (child != null && child.isAlive()) {
            signal(child, "CONT");
            child.destroyForcibly().waitFor();
        }
        for (Connection c : opened) {
            try {
                c.close();
            } catch (SQLException e) {
                // closing
            }
        }
    }

    String election() {
        return "java:" + testName + ":" + UUID.randomUUID().toString().substring(0, 8);
    }

    static void signal(Process p, String sig) throws Exception {
        assertEquals(0, new ProcessBuilder("kill", "-" + sig, Long.toString(p.pid()))
                .inheritIO().start().waitFor(), "kill -" + sig);
    }

    static String where(Class<?> c) throws URISyntaxException {
        return Path.of(c.getProtectionDomain().getCodeSource().getLocation().toURI()).toString();
    }

    static String[] leaderRow(Connection c, String election) throws SQLException {
        try (PreparedStatement ps = c.prepareStatement(
                "SELECT held, term, value, identity FROM lease_fence.leader(?)")) {
            ps.setString(1, election);
            try (ResultSet rs = ps.executeQuery()) {
                assertTrue(rs.next());
                return new String[] {rs.getString(1), rs.getString(2), rs.getString(3), rs.getString(4)};
            }
        }
    }

    /**
     * The story: A leads (a process of its own) and is frozen by SIGSTOP; B,
     * waiting in campaign, wins once A's lease runs out (A cannot renew), with
     * a higher term, and writes. A is woken: its write through lead.fenced
     * is refused — LeadershipLost when its heartbeat saw the loss first, else
     * StaleGeneration against the election's fence (B's win raised it); its
     * work thread is interrupted; once the loss is known lead.fenced throws
     * LeadershipLost before sending anything; the same write under A's term
     * without the library's check is refused by the database (LF001 on the
     * election's resource fence); leadership throws LeadershipLost. B's write
     * stands.
     */
    @Test
    void frozenLeaderIsFencedOut() throws Exception {
        Connection check = open();
        String election = election();
        int id = LeaseFenceTest.newRow(check);
        String cp = String.join(File.pathSeparator, where(LeaderChild.class), where(LeaseFence.class),
                where(org.postgresql.Driver.class));
        String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
        child = new ProcessBuilder(java, "-cp", cp, "dev.leasefence.LeaderChild", election,
                Integer.toString(id), "1500").redirectError(ProcessBuilder.Redirect.INHERIT).start();
        BufferedReader out = new BufferedReader(new InputStreamReader(child.getInputStream(),
                StandardCharsets.UTF_8));
        Writer in = new OutputStreamWriter(child.getOutputStream(), StandardCharsets.UTF_8);
        long aTerm = Long.parseLong(field(out, "leader"));

        Connection bConn = open();
        CompletableFuture<Leader> bWon = CompletableFuture.supplyAsync(() -> {
            try {
                return LeaseFence.campaign(bConn, election, 60000, LeadershipOptions.DEFAULTS.withValue("B"));
            } catch (SQLException e) {
                throw new IllegalStateException(e);
            }
        });
        signal(child, "STOP");
        Leader b = bWon.get();
        try {
            assertTrue(b.term() > aTerm, "B's term " + b.term() + " above A's " + aTerm);
            b.fenced(open(), c -> LeaseFenceTest.setOwner(c, id, "new leader"));

            signal(child, "CONT");
            in.write("write\n");
            in.flush();
            String first = field(out, "first");
            assertTrue(first.equals("LeadershipLost") || first.equals("StaleGeneration:" + election),
                    "A's write when woken: " + first);
            assertEquals("interrupted", out.readLine(), "A's work thread is interrupted on the loss");
            String lost = field(out, "lost");
            assertTrue(lost.equals("expired") || lost.equals("lost"), "A's loss: " + lost);
            assertEquals("LeadershipLost", field(out, "fenced"));
            assertEquals("StaleGeneration:" + election, field(out, "raw"));
            assertEquals("LeadershipLost", field(out, "leadership"));
            assertEquals(0, child.waitFor());
            assertEquals("new leader/100/" + b.term(), LeaseFenceTest.readRow(check, id));
        } finally {
            b.resign();
        }
    }

    static String field(BufferedReader out, String name) throws Exception {
        String line = out.readLine();
        assertNotNull(line, "the child ended before \"" + name + "\"");
        assertTrue(line.startsWith(name + " "), "the child said \"" + line + "\", expected " + name);
        return line.substring(name.length() + 1);
    }

    /** Until the backend runs lease_fence.campaign. */
    static void waitCampaigning(Connection check, int pid) throws Exception {
        for (;;) {
            try (PreparedStatement ps = check.prepareStatement("SELECT count(*) FROM pg_stat_activity "
                    + "WHERE pid = ? AND state = 'active' AND query LIKE '%lease_fence.campaign%'")) {
                ps.setInt(1, pid);
                try (ResultSet rs = ps.executeQuery()) {
                    rs.next();
                    if (rs.getInt(1) == 1) {
                        return;
                    }
                }
            }
            Thread.sleep(10);
        }
    }

    /**
     * fair: two candidates queued in a known order behind the leader: its
     * resign makes the first one leader; the second is then first in the
     * queue and still waits; it leads after the first resigns, with a
     * higher term.
     */
    @Test
    void fairCampaignElectsCandidatesInArrivalOrder() throws Exception {
        Connection check = open();
        String election = election();
        Leader a = LeaseFence.campaign(open(), election, 600000, LeadershipOptions.DEFAULTS);
        Connection bConn = open();
        Connection cConn = open();
        LeadershipOptions fair = LeadershipOptions.DEFAULTS.fair(true);
        assertTrue(fair.fair());
        java.util.concurrent.FutureTask<Leader> bWon = LeaseFenceTest.started(
                () -> LeaseFence.campaign(bConn, election, 600000, fair));
        LeaseFenceTest.waitQueued(check, election, 1);
        java.util.concurrent.FutureTask<Leader> cWon = LeaseFenceTest.started(
                () -> LeaseFence.campaign(cConn, election, 600000, fair));
        LeaseFenceTest.waitQueued(check, election, 2);
        assertEquals(List.of("1:" + LeaseFenceTest.pid(bConn), "2:" + LeaseFenceTest.pid(cConn)),
                LeaseFenceTest.queue(check, election));

        assertEquals(ReleaseStatus.RELEASED, a.resign());
        Leader b = bWon.get();
        assertTrue(b.term() > a.term());
        assertEquals(List.of("1:" + LeaseFenceTest.pid(cConn)), LeaseFenceTest.queue(check, election),
                "the second candidate is next");
        assertFalse(cWon.isDone(), "the second candidate won while the first leads");

        assertEquals(ReleaseStatus.RELEASED, b.resign());
        Leader c = cWon.get();
        assertTrue(c.term() > b.term());
        assertEquals(ReleaseStatus.RELEASED, c.resign());
    }

    /**
     * A resigns while B waits in campaign: B wins. A renews its lease (TTL 10
     * minutes) until it resigns, so only the resign can have handed it over.
     */
    @Test
    void resignHandsOverAtOnce() throws Exception {
        Connection check = open();
        String election = election();
        Leader a = LeaseFence.campaign(open(), election, 600000, LeadershipOptions.DEFAULTS);
        Connection bConn = open();
        CompletableFuture<Leader> bWon = CompletableFuture.supplyAsync(() -> {
            try {
                return LeaseFence.campaign(bConn, election, 600000, LeadershipOptions.DEFAULTS);
            } catch (SQLException e) {
                throw new IllegalStateException(e);
            }
        });
        waitCampaigning(check, bConn.unwrap(PGConnection.class).getBackendPID());
        assertEquals(ReleaseStatus.RELEASED, a.resign());
        assertTrue(a.isLost());
        assertThrows(LeadershipLostException.class, a::check);
        Leader b = bWon.get();
        assertTrue(b.term() > a.term());
        assertEquals(ReleaseStatus.RELEASED, b.resign());
    }

    /**
     * leadership: the value (a newline, quotes, multibyte), term and identity
     * are what lease_fence.leader() shows while it leads; its fenced write
     * commits; at the end it resigned (leader() shows nobody, the last term,
     * no value).
     */
    @Test
    void valueIsVisibleInLeader() throws Exception {
        Connection check = open();
        String election = election();
        int id = LeaseFenceTest.newRow(check);
        String value = "host-1:8080\n'quoted' \"twice\" \u2014 \u00e9";
        Connection work = open();
        long term = LeaseFence.leadership(open(), election, 60000,
                LeadershipOptions.DEFAULTS.withValue(value), lead -> {
                    String[] row = leaderRow(check, election);
                    assertEquals("t", row[0]);
                    assertEquals(Long.toString(lead.term()), row[1]);
                    assertEquals(value, row[2]);
                    assertEquals(value, lead.value());
                    if (row[3] != null) {
                        assertEquals(lead.identity(), row[3]);
                    }
                    lead.fenced(work, c -> LeaseFenceTest.setOwner(c, id, "leader"));
                    return lead.term();
                });
        assertEquals("leader/100/" + term, LeaseFenceTest.readRow(check, id));
        String[] after = leaderRow(check, election);
        assertEquals("f", after[0]);
        assertEquals(Long.toString(term), after[1]);
        assertNull(after[2]);
        assertFalse(Thread.currentThread().isInterrupted());
    }

    /**
     * Another identity overwrites the election's key: the heartbeat's next
     * renew answers lost, the work thread is interrupted, lead.fenced throws
     * LeadershipLostException (a LeaseLostException) without running the work,
     * and leadership throws it; the other identity's key is untouched.
     */
    @Test
    void lostRenewInterruptsTheWork() throws Exception {
        LeaseFenceTest.assumeRedisCli();
        String election = election();
        String thief = "f".repeat(32);
        Connection work = open();
        boolean[] interrupted = new boolean[1];
        LeadershipLostException e = assertThrows(LeadershipLostException.class,
                () -> LeaseFence.leadership(open(), election, 900, LeadershipOptions.DEFAULTS, lead -> {
                    try {
                        LeaseFenceTest.redis("SET", LeaseFenceTest.leaseKey(election), thief, "PX", "60000");
                        Thread.sleep(Long.MAX_VALUE);
                    } catch (InterruptedException x) {
                        interrupted[0] = true;
                    } catch (java.io.IOException x) {
                        throw new SQLException(x);
                    }
                    assertTrue(lead.isLost());
                    LeadershipLostException f = assertThrows(LeadershipLostException.class,
                            () -> lead.fenced(work, c -> fail("ran")));
                    assertInstanceOf(LeaseLostException.class, f);
                    assertEquals("lost", f.status());
                    return null;
                }));
        assertTrue(interrupted[0], "the work thread was interrupted");
        assertEquals("lost", e.status());
        assertEquals(election, e.election());
        assertFalse(Thread.currentThread().isInterrupted(), "the heartbeat's interrupt is cleared");
        assertEquals(thief, LeaseFenceTest.redis("GET", LeaseFenceTest.leaseKey(election)));
        LeaseFenceTest.redis("DEL", LeaseFenceTest.leaseKey(election));
    }

    /**
     * takeOver takes a held lease: a generation above the holder's, the
     * holder's renew throws LeaseLostException, its fenced write is refused by
     * the resource fence, the new holder's write stands.
     */
    @Test
    void takeOverTakesAHeldLease() throws Exception {
        Connection check = open();
        Connection victimConn = open();
        String res = election();
        int id = LeaseFenceTest.newRow(check);
        Lease victim = LeaseFence.acquire(victimConn, res, 60000);
        Lease taken = LeaseFence.takeOver(open(), res, 60000);
        assertTrue(taken.isAcquired());
        assertTrue(taken.generation() > victim.generation());
        assertThrows(LeaseLostException.class, () -> LeaseFence.renew(victimConn, victim, 60000));
        StaleGenerationException s = assertThrows(StaleGenerationException.class,
                () -> LeaseFence.fenced(victimConn, victim, c -> LeaseFenceTest.setOwner(c, id, "victim")));
        assertEquals(res, s.resource());
        LeaseFence.fenced(check, taken, c -> LeaseFenceTest.setOwner(c, id, "taker"));
        assertEquals("taker/100/" + taken.generation(), LeaseFenceTest.readRow(check, id));
        assertEquals(ReleaseStatus.RELEASED, LeaseFence.release(check, taken));
    }

    /**
     * A job's transaction holds the resource (its transaction-scoped lease
     * fences it) and does not end: takeOver with a 100 ms timeout throws
     * TakeOverTimeoutException (55P03) and takes nothing: the key still holds
     * the job's identity, and the job commits.
     */
    @Test
    void takeOverTimeoutTakesNothing() throws Exception {
        LeaseFenceTest.assumeRedisCli();
        Connection check = open();
        Connection jobConn = open();
        String res = election();
        int id = LeaseFenceTest.newRow(check);
        CountDownLatch inside = new CountDownLatch(1);
        CountDownLatch finish = new CountDownLatch(1);
        Lease[] job = new Lease[1];
        CompletableFuture<Void> done = CompletableFuture.runAsync(() -> {
            try {
                LeaseFence.job(jobConn, res, 60000, (l, c) -> {
                    LeaseFenceTest.setOwner(c, id, "job");
                    job[0] = l;
                    inside.countDown();
                    try {
                        finish.await();
                    } catch (InterruptedException x) {
                        throw new SQLException(x);
                    }
                    return null;
                });
            } catch (SQLException e) {
                throw new IllegalStateException(e);
            }
        });
        inside.await();
        TakeOverTimeoutException e = assertThrows(TakeOverTimeoutException.class,
                () -> LeaseFence.takeOver(open(), res, 60000, 100, "explicit"));
        assertInstanceOf(LeaseDeniedException.class, e);
        assertEquals("timeout", e.status());
        assertEquals("55P03", ((SQLException) e.getCause()).getSQLState());
        assertEquals(job[0].identity(), LeaseFenceTest.redis("GET", LeaseFenceTest.leaseKey(res)),
                "nothing was taken");
        finish.countDown();
        done.get(600, TimeUnit.SECONDS);
        assertEquals("job/100/" + job[0].generation(), LeaseFenceTest.readRow(check, id));
    }

    /**
     * A healthy idle leader keeps the election: TTL 600 ms, and after three
     * TTLs the key still holds its identity (its heartbeat renewed it), it is
     * not lost, and its fenced write commits.
     */
    @Test
    void heartbeatKeepsAnIdleLeader() throws Exception {
        LeaseFenceTest.assumeRedisCli();
        Connection check = open();
        String election = election();
        int id = LeaseFenceTest.newRow(check);
        Leader lead = LeaseFence.campaign(open(), election, 600, LeadershipOptions.DEFAULTS);
        Thread.sleep(1800);                     // three TTLs, idle
        assertEquals(lead.identity(), LeaseFenceTest.redis("GET", LeaseFenceTest.leaseKey(election)));
        assertFalse(lead.isLost());
        lead.fenced(check, c -> LeaseFenceTest.setOwner(c, id, "idle leader"));
        assertEquals(ReleaseStatus.RELEASED, lead.resign());
        assertEquals("idle leader/100/" + lead.term(), LeaseFenceTest.readRow(check, id));
    }

    /** A connection that fails the test at any use: nothing may be sent. */
    static Connection untouchable() {
        return (Connection) Proxy.newProxyInstance(Connection.class.getClassLoader(),
                new Class<?>[] {Connection.class}, (p, m, a) -> {
                    if (m.getName().equals("toString") || m.getName().equals("hashCode")) {
                        return m.getName().equals("hashCode") ? 0 : "untouchable";
                    }
                    if (m.getName().equals("equals")) {
                        return p == a[0];
                    }
                    throw new AssertionError("the connection was used: " + m.getName());
                });
    }

    /** Bad arguments are IllegalArgumentException, with the connection untouched. */
    @Test
    void badArgumentsAreRefusedBeforeAnythingIsSent() {
        Connection c = untouchable();
        String big = "x".repeat(1025);
        LeadershipWork<Object> ran = l -> fail("ran");
        List<org.junit.jupiter.api.function.Executable> calls = List.of(
                () -> LeaseFence.campaign(c, "e", 0, LeadershipOptions.DEFAULTS),
                () -> LeaseFence.campaign(c, "", 1000, LeadershipOptions.DEFAULTS),
                () -> LeaseFence.campaign(c, null, 1000, LeadershipOptions.DEFAULTS),
                () -> LeaseFence.campaign(c, "e", 1000, null),
                () -> LeaseFence.campaign(c, "e", 1000, LeadershipOptions.DEFAULTS.withWaitMs(-1)),
                () -> LeaseFence.campaign(c, "e", 1000, LeadershipOptions.DEFAULTS.withValue(big)),
                () -> LeaseFence.campaign(c, "e", 1000,
                        LeadershipOptions.DEFAULTS.withValue("\u00e9".repeat(513))),  // 1026 bytes
                () -> LeaseFence.campaign(c, "e", 1000, LeadershipOptions.DEFAULTS.withScope("transaction")),
                () -> LeaseFence.campaign(null, "e", 1000, LeadershipOptions.DEFAULTS),
                () -> LeaseFence.leadership(c, "e", 1000, LeadershipOptions.DEFAULTS, null),
                () -> LeaseFence.leadership(c, "e", -1, LeadershipOptions.DEFAULTS, ran),
                () -> LeaseFence.takeOver(c, "r", 0),
                () -> LeaseFence.takeOver(c, "", 1000),
                () -> LeaseFence.takeOver(c, "r", 1000, -1, "explicit"),
                () -> LeaseFence.takeOver(c, "r", 1000, 5000, "transaction"));
        for (org.junit.jupiter.api.function.Executable call : calls) {
            assertThrows(IllegalArgumentException.class, call);
        }
    }
}

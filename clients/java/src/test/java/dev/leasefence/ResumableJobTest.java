package dev.leasefence;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.FutureTask;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInfo;

/**
 * {@link LeaseFence#resumableJob} against the harness's PostgreSQL and Redis
 * (test/clients/run.sh: role app, the strict table ledger, EXECUTE on
 * lease_fence.checkpoint and last_checkpoint): the checkpoint a job resumes
 * from, busy before anything runs, a frozen holder ended by the server while
 * its successor resumes, and a lost lease's checkpoint refused.
 */
class ResumableJobTest {

    final List<Connection> opened = new ArrayList<>();
    String res;
    String tag;

    Connection open() throws SQLException {
        Connection c = LeaseFenceTest.connect();
        opened.add(c);
        return c;
    }

    @BeforeEach
    void setUp(TestInfo info) {
        tag = UUID.randomUUID().toString().substring(0, 8);
        res = "java:" + info.getTestMethod().map(m -> m.getName()).orElse("t") + ":" + tag;
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

    static void note(Connection c, String note) throws SQLException {
        try (PreparedStatement ps = c.prepareStatement("INSERT INTO ledger (note) VALUES (?)")) {
            ps.setString(1, note);
            ps.executeUpdate();
        }
    }

    /** the ledger notes starting with this test's tag, in order */
    List<String> notes(Connection c) throws SQLException {
        List<String> out = new ArrayList<>();
        try (PreparedStatement ps = c.prepareStatement(
                "SELECT note FROM ledger WHERE note LIKE ? ORDER BY id")) {
            ps.setString(1, tag + ":%");
            try (ResultSet rs = ps.executeQuery()) {
                while (rs.next()) {
                    out.add(rs.getString(1).substring(tag.length() + 1));
                }
            }
        }
        return out;
    }

    /** "state@generation" of last_checkpoint, or null */
    static String lastCheckpoint(Connection c, String resource) throws SQLException {
        try (PreparedStatement ps = c.prepareStatement(
                "SELECT state::text, generation FROM lease_fence.last_checkpoint(?)")) {
            ps.setString(1, resource);
            try (ResultSet rs = ps.executeQuery()) {
                return rs.next() ? rs.getString(1) + "@" + rs.getLong(2) : null;
            }
        }
    }

    /** Until the lease key of resource is gone from Redis (a logical condition;
     * 60 s at most, then the test fails rather than hangs). */
    static void waitKeyGone(String resource) throws Exception {
        long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (!"0".equals(LeaseFenceTest.redis("EXISTS", LeaseFenceTest.leaseKey(resource)))) {
            if (System.nanoTime() > end) {
                fail("the lease key of " + resource + " never went away");
            }
            Thread.sleep(20);
        }
    }

    /**
     * A job that checkpointed and then failed leaves its checkpoint (and the
     * writes before it) and nothing after it; the next job resumes from it,
     * under a newer generation, and its writes commit when it returns; the
     * lease is released and autocommit restored.
     */
    @Test
    void resumesFromTheLastCommittedCheckpoint() throws Exception {
        Connection c = open();
        AtomicReference<ResumableJob> first = new AtomicReference<>();
        IllegalStateException boom = assertThrows(IllegalStateException.class, () ->
                LeaseFence.resumableJob(c, res, 10000, job -> {
                    first.set(job);
                    assertNull(job.resumeFrom());
                    assertNull(job.resumedGeneration());
                    note(job.connection(), tag + ":a1");
                    assertEquals(job.generation(), job.checkpoint("{\"step\": 1}"));
                    note(job.connection(), tag + ":a2");
                    throw new IllegalStateException("boom");
                }));
        assertEquals("boom", boom.getMessage());
        assertTrue(c.getAutoCommit());
        assertEquals("0", LeaseFenceTest.redis("EXISTS", LeaseFenceTest.leaseKey(res)));
        assertEquals(List.of("a1"), notes(c));

        String out = LeaseFence.resumableJob(c, res, 10000, job -> {
            assertEquals("{\"step\": 1}", job.resumeFrom());
            assertEquals(first.get().generation(), job.resumedGeneration());
            assertTrue(job.generation() > first.get().generation());
            assertEquals(res, job.resource());
            assertTrue(job.identity().matches("[0-9a-f]{32}"));
            note(job.connection(), tag + ":b1");
            return "done";
        });
        assertEquals("done", out);
        assertTrue(c.getAutoCommit());
        assertEquals(List.of("a1", "b1"), notes(c));
        assertEquals("{\"step\": 1}@" + first.get().generation(), lastCheckpoint(c, res));
        assertEquals("0", LeaseFenceTest.redis("EXISTS", LeaseFenceTest.leaseKey(res)));
    }

    /** Busy: LeaseBusyException before the body runs; nothing written. */
    @Test
    void busyRunsNothing() throws Exception {
        Connection holder = open();
        Lease held = LeaseFence.acquire(holder, res, 10000);
        AtomicInteger ran = new AtomicInteger();
        assertThrows(LeaseBusyException.class, () ->
                LeaseFence.resumableJob(open(), res, 10000, job -> ran.incrementAndGet()));
        assertEquals(0, ran.get());
        assertEquals(ReleaseStatus.RELEASED, LeaseFence.release(holder, held));
    }

    /**
     * The stalled job: run 1 checkpoints, writes more, and freezes inside its
     * open transaction; its lease runs out (the key is gone); run 2 resumes
     * from run 1's committed checkpoint (its fence waited for run 1's
     * transaction, which the server ended) and its writes stand; run 1, let
     * go, can neither write nor move the checkpoint.
     */
    @Test
    void stalledHolderIsEndedAndItsSuccessorResumes() throws Exception {
        LeaseFenceTest.assumeRedisCli();
        Connection c1 = open();
        Connection c2 = open();
        CountDownLatch stalled = new CountDownLatch(1);
        CountDownLatch go = new CountDownLatch(1);
        AtomicReference<Long> gen1 = new AtomicReference<>();
        FutureTask<Object> run1 = LeaseFenceTest.started(() -> LeaseFence.resumableJob(c1, res, 1000,
                job -> {
                    gen1.set(job.generation());
                    note(job.connection(), tag + ":r1-step1");
                    job.checkpoint("{\"step\": 1}");
                    note(job.connection(), tag + ":r1-step2");
                    stalled.countDown();
                    go.await();
                    job.checkpoint("{\"step\": 99}");
                    note(job.connection(), tag + ":r1-late");
                    return "run 1 finished";
                }));
        assertTrue(stalled.await(60, TimeUnit.SECONDS));
        waitKeyGone(res);

        long[] gen2 = new long[1];
        String out = LeaseFence.resumableJob(c2, res, 10000, job -> {
            gen2[0] = job.generation();
            assertEquals("{\"step\": 1}", job.resumeFrom());
            assertEquals(gen1.get(), job.resumedGeneration());
            note(job.connection(), tag + ":r2-step2");
            job.checkpoint("{\"step\": 2}");
            note(job.connection(), tag + ":r2-step3");
            return "run 2 finished";
        });
        assertEquals("run 2 finished", out);

        go.countDown();
        java.util.concurrent.ExecutionException failed = assertThrows(
                java.util.concurrent.ExecutionException.class, () -> run1.get(60, TimeUnit.SECONDS));
        assertInstanceOf(SQLException.class, failed.getCause());

        Connection check = open();
        assertEquals(List.of("r1-step1", "r2-step2", "r2-step3"), notes(check));
        assertEquals("{\"step\": 2}@" + gen2[0], lastCheckpoint(check, res));
    }

    /**
     * The lease is lost while the job runs (its key deleted, as a Redis
     * failover that lost it would): the next checkpoint is refused with
     * LeaseLostException before writing, the writes since the last
     * checkpoint are rolled back, the checkpoint stays where it was, and
     * the job fails with that exception.
     */
    @Test
    void lostLeaseCheckpointIsRefusedAndRolledBack() throws Exception {
        LeaseFenceTest.assumeRedisCli();
        Connection c = open();
        long[] gen = new long[1];
        AtomicReference<SQLException> refused = new AtomicReference<>();
        LeaseLostException e = assertThrows(LeaseLostException.class, () ->
                LeaseFence.resumableJob(c, res, 30000, job -> {
                    gen[0] = job.generation();
                    note(job.connection(), tag + ":before");
                    job.checkpoint("{\"step\": 1}");
                    note(job.connection(), tag + ":after");
                    LeaseFenceTest.redis("DEL", LeaseFenceTest.leaseKey(res));
                    try {
                        job.checkpoint("{\"step\": 2}");
                    } catch (SQLException x) {
                        refused.set(x);
                    }
                    // going on after a refused checkpoint changes nothing
                    assertThrows(LeaseLostException.class, () -> job.checkpoint("{\"step\": 3}"));
                    return "returned";
                }));
        assertNotNull(refused.get());
        assertEquals("lost", e.status());
        assertTrue(c.getAutoCommit());
        assertEquals(List.of("before"), notes(c));
        assertEquals("{\"step\": 1}@" + gen[0], lastCheckpoint(c, res));
        assertFalse(notes(c).contains("after"));
    }
}

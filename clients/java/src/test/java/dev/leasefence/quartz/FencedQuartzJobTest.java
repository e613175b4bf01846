package dev.leasefence.quartz;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.File;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.SQLFeatureNotSupportedException;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import javax.sql.DataSource;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInfo;
import org.junit.jupiter.api.TestInstance;
import org.postgresql.ds.PGSimpleDataSource;
import org.quartz.JobBuilder;
import org.quartz.JobDataMap;
import org.quartz.JobDetail;
import org.quartz.JobExecutionContext;
import org.quartz.JobExecutionException;
import org.quartz.JobKey;
import org.quartz.JobListener;
import org.quartz.Scheduler;
import org.quartz.SchedulerException;
import org.quartz.impl.StdSchedulerFactory;

import dev.leasefence.Lease;
import dev.leasefence.LeaseFence;
import dev.leasefence.LeaseLostException;
import dev.leasefence.LeaseUnavailableException;
import dev.leasefence.LeaseUnknownException;
import dev.leasefence.ReleaseStatus;
import dev.leasefence.ResumableJob;

/**
 * {@link FencedQuartzJob} in two real Quartz 2.3 schedulers (RAMJobStore,
 * two "nodes" in one JVM, started once for the class) against the
 * harness's PostgreSQL and Redis (test/clients/run.sh: role app, the strict
 * table ledger). Each test's jobs find the test's probe (latches, counters,
 * what each execution ended with) by the "probe" entry of their data.
 *
 * <p>Environment: LF_JDBC_URL, LF_JDBC_USER, LF_JDBC_PASSWORD_FILE,
 * LF_REDIS_SOCK (and LF_REDIS_CLI).
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class FencedQuartzJobTest {

    static final String URL = System.getenv("LF_JDBC_URL");
    static final String USER = System.getenv().getOrDefault("LF_JDBC_USER", "app");
    static final String REDIS_SOCK = System.getenv("LF_REDIS_SOCK");
    static final String REDIS_CLI = System.getenv().getOrDefault("LF_REDIS_CLI", "").isEmpty()
            ? "redis-cli" : System.getenv("LF_REDIS_CLI");

    /** What one execution ended with, as the job listener saw it. */
    record Done(String node, Object result, JobExecutionException error) {
    }

    /** One test's shared state with its jobs. */
    static final class Probe {
        final String id = UUID.randomUUID().toString().substring(0, 8);
        final LinkedBlockingQueue<Done> done = new LinkedBlockingQueue<>();
        final AtomicInteger runs = new AtomicInteger();
        final CountDownLatch started = new CountDownLatch(1);
        final CountDownLatch go = new CountDownLatch(1);
        final CountDownLatch retryAsked = new CountDownLatch(1);
        final CountDownLatch mayRetry = new CountDownLatch(1);
        volatile String resumeFrom;
        /** the connection the first execution gets (else the scheduler's DataSource) */
        volatile Connection first;

        Done next() throws InterruptedException {
            Done d = done.poll(120, TimeUnit.SECONDS);
            if (d == null) {
                fail("no execution ended");
            }
            return d;
        }
    }

    static final Map<String, Probe> PROBES = new ConcurrentHashMap<>();

    static Probe probe(JobExecutionContext ctx) {
        return PROBES.get(ctx.getMergedJobDataMap().getString("probe"));
    }

    static String password() throws IOException {
        String file = System.getenv("LF_JDBC_PASSWORD_FILE");
        return file == null ? null : Files.readString(Path.of(file), StandardCharsets.UTF_8).strip();
    }

    static PGSimpleDataSource dataSource(String options) throws IOException {
        PGSimpleDataSource ds = new PGSimpleDataSource();
        ds.setURL(URL);
        ds.setUser(USER);
        ds.setPassword(password());
        if (options != null) {
            ds.setOptions(options);
        }
        return ds;
    }

    static void note(Connection c, String note) throws SQLException {
        try (PreparedStatement ps = c.prepareStatement("INSERT INTO ledger (note) VALUES (?)")) {
            ps.setString(1, note);
            ps.executeUpdate();
        }
    }

    // ------------------------------------------------------------------
    // the jobs

    /** Base of the test jobs: the probe's first connection when it has one. */
    public abstract static class ProbeJob extends FencedQuartzJob {
        @Override
        protected DataSource dataSource(JobExecutionContext ctx) throws SchedulerException {
            Probe p = probe(ctx);
            Connection c = p.first;
            if (c != null) {
                p.first = null;
                return new OneConnection(c);
            }
            return super.dataSource(ctx);
        }
    }

    /** Run 1 checkpoints, writes, and freezes in its transaction; run 2 resumes. */
    public static class StallJob extends ProbeJob {
        @Override
        protected long ttlMs(JobExecutionContext ctx) {
            return 1500;
        }

        @Override
        protected void executeFenced(JobExecutionContext ctx, ResumableJob job) throws Exception {
            Probe p = probe(ctx);
            if (job.resumeFrom() == null) {
                note(job.connection(), p.id + ":r1-step1");
                job.checkpoint("{\"step\": 1}");
                note(job.connection(), p.id + ":r1-step2");
                p.started.countDown();
                p.go.await();
                job.checkpoint("{\"step\": 99}");
                note(job.connection(), p.id + ":r1-late");
            } else {
                p.resumeFrom = job.resumeFrom() + "@" + job.resumedGeneration();
                note(job.connection(), p.id + ":r2-step2");
                job.checkpoint("{\"step\": 2}");
                note(job.connection(), p.id + ":r2-step3");
            }
        }
    }

    /** Counts its runs, writes one row, waits for the test. */
    public static class OnceJob extends ProbeJob {
        @Override
        protected void executeFenced(JobExecutionContext ctx, ResumableJob job) throws Exception {
            Probe p = probe(ctx);
            p.runs.incrementAndGet();
            note(job.connection(), p.id + ":once");
            p.started.countDown();
            p.go.await();
        }
    }

    /** Busy: retried; the retry is asked for through retryDelayMs. */
    public static class RetryJob extends ProbeJob {
        @Override
        protected OnBusy onBusy(JobExecutionContext ctx) {
            return OnBusy.RETRY;
        }

        @Override
        protected long retryDelayMs(JobExecutionContext ctx, int attempt) {
            Probe p = probe(ctx);
            p.retryAsked.countDown();
            try {
                p.mayRetry.await();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            return 50;
        }

        @Override
        protected void executeFenced(JobExecutionContext ctx, ResumableJob job) throws Exception {
            Probe p = probe(ctx);
            p.runs.incrementAndGet();
            note(job.connection(), p.id + ":ran");
        }
    }

    /** The default on_busy (skip), for unknown and unavailable. */
    public static class PlainJob extends RetryJob {
        @Override
        protected OnBusy onBusy(JobExecutionContext ctx) {
            return OnBusy.SKIP;
        }
    }

    /** Checkpoints, writes, waits; then checkpoints again. */
    public static class LostJob extends ProbeJob {
        @Override
        protected void executeFenced(JobExecutionContext ctx, ResumableJob job) throws Exception {
            Probe p = probe(ctx);
            note(job.connection(), p.id + ":before");
            job.checkpoint("{\"step\": 1}");
            note(job.connection(), p.id + ":after");
            p.started.countDown();
            p.go.await();
            job.checkpoint("{\"step\": 2}");
            p.runs.incrementAndGet();
        }
    }

    // ------------------------------------------------------------------

    Scheduler nodeA;
    Scheduler nodeB;
    Probe p;
    String testName;

    Scheduler start(String name) throws Exception {
        Properties props = new Properties();
        props.setProperty("org.quartz.scheduler.instanceName", name);
        props.setProperty("org.quartz.scheduler.instanceId", name);
        props.setProperty("org.quartz.scheduler.skipUpdateCheck", "true");
        props.setProperty("org.quartz.threadPool.class", "org.quartz.simpl.SimpleThreadPool");
        props.setProperty("org.quartz.threadPool.threadCount", "4");
        props.setProperty("org.quartz.jobStore.class", "org.quartz.simpl.RAMJobStore");
        Scheduler s = new StdSchedulerFactory(props).getScheduler();
        s.getContext().put(FencedQuartzJob.DATA_SOURCE_KEY, dataSource(null));
        s.getListenerManager().addJobListener(new JobListener() {
            @Override
            public String getName() {
                return "probe";
            }

            @Override
            public void jobToBeExecuted(JobExecutionContext ctx) {
            }

            @Override
            public void jobExecutionVetoed(JobExecutionContext ctx) {
            }

            @Override
            public void jobWasExecuted(JobExecutionContext ctx, JobExecutionException e) {
                Probe pr = probe(ctx);
                if (pr != null) {
                    pr.done.add(new Done(name, ctx.getResult(), e));
                }
            }
        });
        s.start();
        return s;
    }

    @BeforeAll
    void startNodes() throws Exception {
        assumeTrue(URL != null, "LF_JDBC_URL is not set");
        nodeA = start("lf-node-a");
        nodeB = start("lf-node-b");
    }

    @AfterAll
    void stopNodes() throws SchedulerException {
        for (Scheduler s : new Scheduler[] {nodeA, nodeB}) {
            if (s != null) {
                s.shutdown(false);
            }
        }
    }

    @BeforeEach
    void newProbe(TestInfo info) {
        p = new Probe();
        PROBES.put(p.id, p);
        testName = info.getTestMethod().map(m -> m.getName()).orElse("t");
    }

    /** The job, stored durably on both nodes; its key. */
    JobKey store(Class<? extends FencedQuartzJob> cls) throws SchedulerException {
        JobDetail jd = JobBuilder.newJob(cls).withIdentity(testName + "-" + p.id, "lf-test")
                .storeDurably().build();
        nodeA.addJob(jd, true);
        nodeB.addJob(jd, true);
        return jd.getKey();
    }

    JobDataMap data() {
        JobDataMap m = new JobDataMap();
        m.put("probe", p.id);
        m.put("n", 7);
        return m;
    }

    String resource(JobKey key) {
        return FencedQuartzJob.defaultResource(key, data());
    }

    List<String> notes() throws Exception {
        List<String> out = new ArrayList<>();
        try (Connection c = dataSource(null).getConnection();
             PreparedStatement ps = c.prepareStatement(
                     "SELECT note FROM ledger WHERE note LIKE ? ORDER BY id")) {
            ps.setString(1, p.id + ":%");
            try (ResultSet rs = ps.executeQuery()) {
                while (rs.next()) {
                    out.add(rs.getString(1).substring(p.id.length() + 1));
                }
            }
        }
        return out;
    }

    String lastCheckpoint(String resource) throws Exception {
        try (Connection c = dataSource(null).getConnection();
             PreparedStatement ps = c.prepareStatement(
                     "SELECT state::text, generation FROM lease_fence.last_checkpoint(?)")) {
            ps.setString(1, resource);
            try (ResultSet rs = ps.executeQuery()) {
                return rs.next() ? rs.getString(1) + "@" + rs.getLong(2) : null;
            }
        }
    }

    static String redis(String... args) throws IOException, InterruptedException {
        List<String> cmd = new ArrayList<>(List.of(REDIS_CLI, "-s", REDIS_SOCK));
        cmd.addAll(List.of(args));
        Process pr = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        String out = new String(pr.getInputStream().readAllBytes(), StandardCharsets.UTF_8).strip();
        if (!pr.waitFor(30, TimeUnit.SECONDS) || pr.exitValue() != 0) {
            throw new IOException("redis-cli " + String.join(" ", args) + ": " + out);
        }
        return out;
    }

    static void assumeRedisCli() {
        assumeTrue(REDIS_SOCK != null && !REDIS_SOCK.isEmpty(), "LF_REDIS_SOCK is not set");
        boolean found = Files.isExecutable(Path.of(REDIS_CLI));
        for (String dir : System.getenv().getOrDefault("PATH", "/usr/bin:/bin").split(File.pathSeparator)) {
            found |= Files.isExecutable(Path.of(dir, REDIS_CLI));
        }
        assumeTrue(found, REDIS_CLI + " is not on PATH");
    }

    static String leaseKey(String resource) {
        return "lease_fence:{" + resource + "}";
    }

    // ------------------------------------------------------------------

    /**
     * The stalled job: run 1 (node A) checkpoints, writes more and freezes in
     * its open transaction until its lease key is gone; run 2 of the same job
     * (node B) resumes from run 1's committed checkpoint and its writes stand;
     * run 1, let go, fails visibly, having moved nothing.
     */
    @Test
    void stalledJobIsResumedByItsSuccessor() throws Exception {
        assumeRedisCli();
        JobKey key = store(StallJob.class);
        String res = resource(key);
        nodeA.triggerJob(key, data());
        assertTrue(p.started.await(120, TimeUnit.SECONDS));
        long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (!"0".equals(redis("EXISTS", leaseKey(res)))) {
            if (System.nanoTime() > end) {
                fail("run 1's lease key never went away");
            }
            Thread.sleep(20);
        }
        String run1Checkpoint = lastCheckpoint(res);
        nodeB.triggerJob(key, data());
        Done run2 = p.next();
        assertEquals("lf-node-b", run2.node());
        assertNull(run2.error());
        assertEquals(FencedQuartzJob.Outcome.RAN, run2.result());
        assertEquals(run1Checkpoint, p.resumeFrom);

        p.go.countDown();
        Done run1 = p.next();
        assertEquals("lf-node-a", run1.node());
        assertNotNull(run1.error());
        assertInstanceOf(SQLException.class, run1.error().getCause());

        assertEquals(List.of("r1-step1", "r2-step2", "r2-step3"), notes());
        assertTrue(lastCheckpoint(res).startsWith("{\"step\": 2}@"));
        assertTrue(run1Checkpoint.startsWith("{\"step\": 1}@"));
    }

    /** The same job on both nodes at once: one runs, the other skips; one effect. */
    @Test
    void twoNodesSameJobOneEffect() throws Exception {
        JobKey key = store(OnceJob.class);
        nodeA.triggerJob(key, data());
        assertTrue(p.started.await(120, TimeUnit.SECONDS));
        nodeB.triggerJob(key, data());
        Done skipped = p.next();
        assertEquals("lf-node-b", skipped.node());
        assertNull(skipped.error());
        assertEquals(FencedQuartzJob.Outcome.SKIPPED, skipped.result());
        p.go.countDown();
        Done ran = p.next();
        assertEquals("lf-node-a", ran.node());
        assertNull(ran.error());
        assertEquals(FencedQuartzJob.Outcome.RAN, ran.result());
        assertEquals(1, p.runs.get());
        assertEquals(List.of("once"), notes());
    }

    /** Busy with OnBusy.RETRY: a retry trigger runs it once the lease is free. */
    @Test
    void busyWithRetryRunsOnceFree() throws Exception {
        JobKey key = store(RetryJob.class);
        try (Connection holder = dataSource(null).getConnection()) {
            Lease held = LeaseFence.acquire(holder, resource(key), 60000);
            nodeA.triggerJob(key, data());
            assertTrue(p.retryAsked.await(120, TimeUnit.SECONDS));
            assertEquals(0, p.runs.get());
            assertEquals(ReleaseStatus.RELEASED, LeaseFence.release(holder, held));
        }
        p.mayRetry.countDown();
        Done busy = p.next();
        assertNull(busy.error());
        assertEquals(FencedQuartzJob.Outcome.RETRY_SCHEDULED, busy.result());
        Done ran = p.next();
        assertNull(ran.error());
        assertEquals(FencedQuartzJob.Outcome.RAN, ran.result());
        assertEquals(1, p.runs.get());
        assertEquals(List.of("ran"), notes());
    }

    /**
     * Unknown (Redis paused past lease_fence.command_timeout_ms on a backend
     * that already checked it): not run, a retry scheduled, the execution
     * failed visibly with LeaseUnknownException; the retry runs it once.
     */
    @Test
    void unknownIsRetriedNeverRunUnfenced() throws Exception {
        assumeRedisCli();
        JobKey key = store(PlainJob.class);
        Connection c = dataSource("-c lease_fence.command_timeout_ms=150 "
                + "-c lease_fence.cleanup_timeout_ms=150").getConnection();
        // a backend's first acquire checks key_prefix's owner: done before the pause
        LeaseFence.release(c, LeaseFence.acquire(c, "java:warm:" + p.id, 10000));
        p.first = c;
        redis("CLIENT", "PAUSE", "3000", "ALL");
        try {
            nodeA.triggerJob(key, data());
            assertTrue(p.retryAsked.await(120, TimeUnit.SECONDS));
            assertEquals(0, p.runs.get());
        } finally {
            redis("PING");                      // waits out the pause
        }
        p.mayRetry.countDown();
        Done unknown = p.next();
        assertEquals(FencedQuartzJob.Outcome.RETRY_SCHEDULED, unknown.result());
        assertNotNull(unknown.error());
        assertInstanceOf(LeaseUnknownException.class, unknown.error().getCause());
        Done ran = p.next();
        assertNull(ran.error());
        assertEquals(FencedQuartzJob.Outcome.RAN, ran.result());
        assertEquals(1, p.runs.get());
        assertEquals(List.of("ran"), notes());
    }

    /** Redis unavailable: the execution fails visibly, the body never ran, no retry. */
    @Test
    void redisDownFailsVisibly() throws Exception {
        assumeRedisCli();
        JobKey key = store(PlainJob.class);
        // a new backend that cannot reach Redis in time: nothing is sent
        p.first = dataSource("-c lease_fence.connect_timeout_ms=150 "
                + "-c lease_fence.command_timeout_ms=150").getConnection();
        Done down;
        redis("CLIENT", "PAUSE", "3000", "ALL");
        try {
            nodeA.triggerJob(key, data());
            down = p.next();
        } finally {
            redis("PING");
        }
        assertNotNull(down.error());
        assertInstanceOf(LeaseUnavailableException.class, down.error().getCause());
        assertEquals(0, p.runs.get());
        assertEquals(1, p.retryAsked.getCount());       // no retry asked for
        assertEquals(List.of(), notes());
        assertNull(lastCheckpoint(resource(key)));
    }

    /**
     * The lease is lost while the job runs (its key deleted, as a Redis
     * failover that lost it would): the next checkpoint is refused, the
     * writes since the last one are rolled back, the checkpoint stays, and
     * the execution fails visibly with LeaseLostException (not retried).
     */
    @Test
    void lostLeaseCheckpointIsRefused() throws Exception {
        assumeRedisCli();
        JobKey key = store(LostJob.class);
        String res = resource(key);
        nodeA.triggerJob(key, data());
        assertTrue(p.started.await(120, TimeUnit.SECONDS));
        redis("DEL", leaseKey(res));
        p.go.countDown();
        Done lost = p.next();
        assertNotNull(lost.error());
        assertInstanceOf(LeaseLostException.class, lost.error().getCause());
        assertEquals(0, p.runs.get());
        assertEquals(List.of("before"), notes());
        assertTrue(lastCheckpoint(res).startsWith("{\"step\": 1}@"));
        assertEquals(0, nodeA.getTriggersOfJob(key).size());   // not retried
    }

    /** The resource's digest covers the job's data, not the integration's keys. */
    @Test
    void resourceNamesJobAndData() {
        JobKey key = JobKey.jobKey("report", "nightly");
        JobDataMap a = new JobDataMap();
        a.put("day", "2026-12-06");
        a.put("n", 7);
        JobDataMap b = new JobDataMap(a);
        b.put(FencedQuartzJob.RETRY_KEY, 3);
        String r = FencedQuartzJob.defaultResource(key, a);
        assertTrue(r.matches("quartz:nightly\\.report:[0-9a-f]{64}"), r);
        assertEquals(r, FencedQuartzJob.defaultResource(key, b));
        b.put("n", 8);
        assertTrue(!r.equals(FencedQuartzJob.defaultResource(key, b)));
        assertEquals("{\"a\":[1,true,null],\"b\":\"x\\\"y\"}",
                FencedQuartzJob.canonicalJson(Map.of("b", "x\"y", "a", java.util.Arrays.asList(1, true, null))));
    }

    /** A DataSource that hands out one given connection, once. */
    static final class OneConnection implements DataSource {
        private Connection c;

        OneConnection(Connection c) {
            this.c = c;
        }

        @Override
        public synchronized Connection getConnection() throws SQLException {
            if (c == null) {
                throw new SQLException("OneConnection: already handed out");
            }
            Connection out = c;
            c = null;
            return out;
        }

        @Override
        public Connection getConnection(String user, String password) throws SQLException {
            return getConnection();
        }

        @Override
        public PrintWriter getLogWriter() {
            return null;
        }

        @Override
        public void setLogWriter(PrintWriter out) {
        }

        @Override
        public void setLoginTimeout(int seconds) {
        }

        @Override
        public int getLoginTimeout() {
            return 0;
        }

        @Override
        public java.util.logging.Logger getParentLogger() throws SQLFeatureNotSupportedException {
            throw new SQLFeatureNotSupportedException();
        }

        @Override
        public <T> T unwrap(Class<T> iface) throws SQLException {
            throw new SQLException("not a wrapper");
        }

        @Override
        public boolean isWrapperFor(Class<?> iface) {
            return false;
        }
    }

}

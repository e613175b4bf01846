// NightlyReport — a Quartz job whose effects happen at most once, and that
// resumes where a previous run stopped.
//
// A real Quartz scheduler (RAMJobStore) runs the job "report.nightly", a
// FencedQuartzJob: each execution takes a lease named after the job and its
// data (quartz:<job key>:<digest>) from inside PostgreSQL, and its body
// writes, on the connection it is given, one ledger row per step, each
// followed by a fenced checkpoint {"next": <step>}. The job is fired twice
// with the same data: the first run does steps 1 to 3; the second resumes
// from the checkpoint {"next": 4} and has nothing left to do. The ledger then
// holds each step once, and the checkpoint is the first run's last one.
//
// Build and run against the client jar, pgjdbc and Quartz (Debian:
// libpostgresql-jdbc-java libquartz2-java):
//
//   CP=lease-fence.jar:/usr/share/java/postgresql.jar:/usr/share/java/quartz2.jar:/usr/share/java/slf4j-api.jar
//   javac -cp "$CP" -d out NightlyReport.java
//   java  -cp "out:$CP" NightlyReport
//
// Connection: LF_JDBC_URL (default jdbc:postgresql://127.0.0.1:5432/appdb),
// LF_JDBC_USER (default app), LF_JDBC_PASSWORD_FILE (a file holding the
// password; none if unset). Needs the strict table "ledger" (id, note) with
// lease_fence.protect('ledger', strict => true), and EXECUTE on
// lease_fence.checkpoint and last_checkpoint, as in test/clients/run.sh.
// Exit status 0 when each step was written once, 1 otherwise.

import dev.leasefence.ResumableJob;
import dev.leasefence.quartz.FencedQuartzJob;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.UUID;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

import org.postgresql.ds.PGSimpleDataSource;
import org.quartz.JobBuilder;
import org.quartz.JobDataMap;
import org.quartz.JobDetail;
import org.quartz.JobExecutionContext;
import org.quartz.JobExecutionException;
import org.quartz.Scheduler;
import org.quartz.impl.StdSchedulerFactory;
import org.quartz.listeners.JobListenerSupport;

public class NightlyReport {

    /** The job: steps 1..3, each a ledger row and a checkpoint. */
    public static class ReportJob extends FencedQuartzJob {
        @Override
        protected long ttlMs(JobExecutionContext ctx) {
            return 30_000;      // longer than the longest stretch between two checkpoints
        }

        @Override
        protected void executeFenced(JobExecutionContext ctx, ResumableJob job) throws Exception {
            String run = ctx.getMergedJobDataMap().getString("run");
            int next = 1;
            if (job.resumeFrom() != null) {
                // the state is JSON text: let PostgreSQL read it
                try (PreparedStatement ps = job.connection().prepareStatement(
                        "SELECT (CAST(? AS jsonb) ->> 'next')::int")) {
                    ps.setString(1, job.resumeFrom());
                    try (ResultSet rs = ps.executeQuery()) {
                        rs.next();
                        next = rs.getInt(1);
                    }
                }
                System.out.println("resuming from " + job.resumeFrom() + " (generation "
                        + job.resumedGeneration() + ")");
            }
            for (int step = next; step <= 3; step++) {
                try (PreparedStatement ps = job.connection().prepareStatement(
                        "INSERT INTO ledger (note) VALUES (?)")) {
                    ps.setString(1, run + ":step " + step);
                    ps.executeUpdate();
                }
                // the step's row commits with its checkpoint, under the lease's generation
                job.checkpoint("{\"next\": " + (step + 1) + "}");
                System.out.println("step " + step + " done at generation " + job.generation());
            }
        }
    }

    public static void main(String[] args) throws Exception {
        PGSimpleDataSource ds = new PGSimpleDataSource();
        ds.setURL(System.getenv().getOrDefault("LF_JDBC_URL",
                "jdbc:postgresql://127.0.0.1:5432/appdb"));
        ds.setUser(System.getenv().getOrDefault("LF_JDBC_USER", "app"));
        String passwordFile = System.getenv("LF_JDBC_PASSWORD_FILE");
        if (passwordFile != null) {
            ds.setPassword(Files.readString(Path.of(passwordFile), StandardCharsets.UTF_8).strip());
        }

        Properties props = new Properties();
        props.setProperty("org.quartz.scheduler.instanceName", "nightly");
        props.setProperty("org.quartz.scheduler.skipUpdateCheck", "true");
        props.setProperty("org.quartz.threadPool.threadCount", "2");
        props.setProperty("org.quartz.jobStore.class", "org.quartz.simpl.RAMJobStore");
        Scheduler scheduler = new StdSchedulerFactory(props).getScheduler();
        scheduler.getContext().put(FencedQuartzJob.DATA_SOURCE_KEY, ds);

        LinkedBlockingQueue<String> ended = new LinkedBlockingQueue<>();
        scheduler.getListenerManager().addJobListener(new JobListenerSupport() {
            @Override
            public String getName() {
                return "example";
            }

            @Override
            public void jobWasExecuted(JobExecutionContext ctx, JobExecutionException e) {
                ended.add(e == null ? String.valueOf(ctx.getResult()) : "failed: " + e.getCause());
            }
        });
        scheduler.start();
        try {
            String run = "nightly-" + UUID.randomUUID().toString().substring(0, 8);
            JobDetail job = JobBuilder.newJob(ReportJob.class).withIdentity("nightly", "report")
                    .storeDurably().build();
            scheduler.addJob(job, true);
            JobDataMap data = new JobDataMap();
            data.put("run", run);
            List<String> outcomes = new ArrayList<>();
            for (int i = 0; i < 2; i++) {           // fired twice, the same data
                scheduler.triggerJob(job.getKey(), data);
                String outcome = ended.poll(60, TimeUnit.SECONDS);
                System.out.println("execution " + (i + 1) + ": " + outcome);
                outcomes.add(outcome);
            }

            List<String> rows = new ArrayList<>();
            String checkpoint;
            try (Connection c = ds.getConnection()) {
                try (PreparedStatement ps = c.prepareStatement(
                        "SELECT note FROM ledger WHERE note LIKE ? ORDER BY id")) {
                    ps.setString(1, run + ":%");
                    try (ResultSet rs = ps.executeQuery()) {
                        while (rs.next()) {
                            rows.add(rs.getString(1).substring(run.length() + 1));
                        }
                    }
                }
                checkpoint = lastCheckpoint(c, FencedQuartzJob.defaultResource(job.getKey(), data));
            }
            System.out.println("ledger: " + rows + "; checkpoint: " + checkpoint);
            boolean ok = outcomes.equals(List.of("RAN", "RAN"))
                    && rows.equals(List.of("step 1", "step 2", "step 3"))
                    && "{\"next\": 4}".equals(checkpoint);
            System.out.println(ok ? "OK: each step written once" : "FAILED");
            if (!ok) {
                System.exit(1);
            }
        } finally {
            scheduler.shutdown(true);
        }
    }

    static String lastCheckpoint(Connection c, String resource) throws SQLException {
        try (PreparedStatement ps = c.prepareStatement(
                "SELECT state::text FROM lease_fence.last_checkpoint(?)")) {
            ps.setString(1, resource);
            try (ResultSet rs = ps.executeQuery()) {
                return rs.next() ? rs.getString(1) : null;
            }
        }
    }
}

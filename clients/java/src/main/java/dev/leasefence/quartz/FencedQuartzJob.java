package dev.leasefence.quartz;

import java.lang.reflect.Array;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.sql.Connection;
import java.sql.SQLException;
import java.util.Collection;
import java.util.Date;
import java.util.Map;
import java.util.TreeMap;
import java.util.UUID;
import java.util.logging.Level;
import java.util.logging.Logger;

import javax.sql.DataSource;

import org.quartz.Job;
import org.quartz.JobDataMap;
import org.quartz.JobExecutionContext;
import org.quartz.JobExecutionException;
import org.quartz.JobKey;
import org.quartz.SchedulerException;
import org.quartz.Trigger;
import org.quartz.TriggerBuilder;

import dev.leasefence.LeaseBusyException;
import dev.leasefence.LeaseFence;
import dev.leasefence.LeaseOptions;
import dev.leasefence.LeaseUnknownException;
import dev.leasefence.ResumableJob;

/**
 * A Quartz 2.3 job whose effects happen at most once: each execution runs
 * {@link #executeFenced} inside {@link LeaseFence#resumableJob}, under an
 * explicit lease on a resource named after the job and its data, on a
 * connection from the application's {@link DataSource}.
 *
 * <p>Subclass it, implement {@link #executeFenced}, and put the DataSource in
 * the scheduler's context under {@value #DATA_SOURCE_KEY} (or override
 * {@link #dataSource}):
 * <pre>{@code
 * scheduler.getContext().put(FencedQuartzJob.DATA_SOURCE_KEY, dataSource);
 * }</pre>
 *
 * <p>What an execution does with each outcome of the lease:
 * <ul>
 * <li>granted: {@link #executeFenced} runs with the {@link ResumableJob}; it
 *     returns: committed, lease released, {@link Outcome#RAN}; it throws: rolled
 *     back, a {@link JobExecutionException} with that cause (not refired);</li>
 * <li>busy (the same job runs elsewhere): {@link OnBusy#SKIP}, the default,
 *     ends the execution without error and logs a line ({@link Outcome#SKIPPED});
 *     {@link OnBusy#RETRY} schedules a retry ({@link Outcome#RETRY_SCHEDULED});</li>
 * <li>unknown: always a retry, never a run without a lease
 *     ({@link Outcome#RETRY_SCHEDULED}, and a {@link JobExecutionException}
 *     with the {@link LeaseUnknownException} as cause, not refired);</li>
 * <li>unavailable (Redis down), denied: a {@link JobExecutionException} with
 *     that cause; the body never ran;</li>
 * <li>stale or lost while the body runs ({@code StaleGenerationException},
 *     {@code LeaseLostException}, {@code LeaseLostAtCommitException}): a
 *     {@link JobExecutionException} with that cause, not retried.</li>
 * </ul>
 * A retry is a new one-shot trigger of the same job, with the trigger's data,
 * starting {@link #retryDelayMs} later (a backoff, not Quartz's
 * {@code refireImmediately}, which would spin): the job must be stored
 * durably or keep a trigger, as for any {@code scheduleJob(trigger)}. A
 * retried job that finds the work done sees it in
 * {@link ResumableJob#resumeFrom()}.
 *
 * <p>{@link JobExecutionContext#getResult()} is the {@link Outcome} after an
 * execution that did not fail.
 */
public abstract class FencedQuartzJob implements Job {

    /** The SchedulerContext key of the {@link DataSource}. */
    public static final String DATA_SOURCE_KEY = "leaseFenceDataSource";

    /** JobDataMap keys starting with this are the integration's (not in the digest). */
    public static final String KEY_PREFIX = "leaseFence.";

    /** The trigger data key counting the retries of an execution. */
    public static final String RETRY_KEY = KEY_PREFIX + "retry";

    /** The default lease TTL, in ms. */
    public static final long DEFAULT_TTL_MS = 60_000;

    private static final Logger LOG = Logger.getLogger(FencedQuartzJob.class.getName());

    /** What to do when the lease is busy. */
    public enum OnBusy {
        /** the same job runs elsewhere: its effect happens there; end without error */
        SKIP,
        /** retry later with a new trigger */
        RETRY
    }

    /** What an execution did, as {@link JobExecutionContext#getResult()}. */
    public enum Outcome {
        /** the body ran and committed */
        RAN,
        /** busy, skipped */
        SKIPPED,
        /** busy or unknown: a retry is scheduled */
        RETRY_SCHEDULED
    }

    /**
     * The job's work, inside the open fenced transaction of {@code job}: write
     * on {@code job.connection()}, resume from {@code job.resumeFrom()},
     * record progress with {@code job.checkpoint(json)}.
     */
    protected abstract void executeFenced(JobExecutionContext ctx, ResumableJob job)
            throws Exception;

    /** The lease's resource: {@link #defaultResource} of the job's key and its merged data. */
    protected String resource(JobExecutionContext ctx) {
        return defaultResource(ctx.getJobDetail().getKey(), ctx.getMergedJobDataMap());
    }

    /** The lease's TTL: longer than the longest stretch between two checkpoints. */
    protected long ttlMs(JobExecutionContext ctx) {
        return DEFAULT_TTL_MS;
    }

    /** What a busy lease does: {@link OnBusy#SKIP} unless overridden. */
    protected OnBusy onBusy(JobExecutionContext ctx) {
        return OnBusy.SKIP;
    }

    /** The delay before retry number {@code attempt} (1, 2, ...): 1 s doubling to 60 s. */
    protected long retryDelayMs(JobExecutionContext ctx, int attempt) {
        return Math.min(60_000L, 1000L << Math.min(6, Math.max(0, attempt - 1)));
    }

    /** The DataSource: the scheduler context's {@value #DATA_SOURCE_KEY}. */
    protected DataSource dataSource(JobExecutionContext ctx) throws SchedulerException {
        Object ds = ctx.getScheduler().getContext().get(DATA_SOURCE_KEY);
        if (!(ds instanceof DataSource)) {
            throw new SchedulerException("FencedQuartzJob needs a javax.sql.DataSource in the "
                    + "SchedulerContext under \"" + DATA_SOURCE_KEY + "\" (got "
                    + (ds == null ? "none" : ds.getClass().getName()) + ")");
        }
        return (DataSource) ds;
    }

    @Override
    public final void execute(JobExecutionContext ctx) throws JobExecutionException {
        String resource;
        long ttl;
        DataSource ds;
        try {
            resource = resource(ctx);
            ttl = ttlMs(ctx);
            ds = dataSource(ctx);
        } catch (SchedulerException | RuntimeException e) {
            throw new JobExecutionException(e, false);
        }
        boolean[] started = {false};
        try (Connection conn = ds.getConnection()) {
            if (!conn.getAutoCommit()) {
                conn.setAutoCommit(true);
            }
            LeaseFence.resumableJob(conn, resource, ttl, 0, LeaseOptions.DEFAULTS, job -> {
                started[0] = true;
                executeFenced(ctx, job);
                return null;
            });
            ctx.setResult(Outcome.RAN);
        } catch (LeaseBusyException e) {
            if (started[0]) {
                throw new JobExecutionException(e, false);      // the body's own lease
            }
            if (onBusy(ctx) == OnBusy.RETRY) {
                retry(ctx, resource, e);
                ctx.setResult(Outcome.RETRY_SCHEDULED);
            } else {
                LOG.info("lease_fence: job " + ctx.getJobDetail().getKey() + " skipped: \""
                        + resource + "\" is held elsewhere (the same job runs there)");
                ctx.setResult(Outcome.SKIPPED);
            }
        } catch (LeaseUnknownException e) {
            if (started[0]) {
                // a checkpoint's renew: the body ran under the lease; fail visibly
                throw new JobExecutionException(e, false);
            }
            // the acquire's: never run without a lease; try again later
            retry(ctx, resource, e);
            ctx.setResult(Outcome.RETRY_SCHEDULED);
            throw new JobExecutionException(e, false);
        } catch (Exception e) {
            throw new JobExecutionException(e, false);
        }
    }

    /** A one-shot trigger of this job, with this trigger's data, retryDelayMs later. */
    private void retry(JobExecutionContext ctx, String resource, SQLException why)
            throws JobExecutionException {
        Trigger fired = ctx.getTrigger();
        JobDataMap data = new JobDataMap(fired.getJobDataMap());
        int attempt = data.containsKey(RETRY_KEY) ? data.getIntValue(RETRY_KEY) + 1 : 1;
        data.put(RETRY_KEY, attempt);
        long delay = retryDelayMs(ctx, attempt);
        Trigger next = TriggerBuilder.newTrigger()
                .withIdentity("leaseFence-retry-" + UUID.randomUUID(), fired.getKey().getGroup())
                .forJob(ctx.getJobDetail().getKey())
                .usingJobData(data)
                .startAt(new Date(System.currentTimeMillis() + delay))
                .build();
        try {
            ctx.getScheduler().scheduleJob(next);
        } catch (SchedulerException e) {
            e.addSuppressed(why);
            throw new JobExecutionException(e, false);
        }
        LOG.log(Level.INFO, "lease_fence: job " + ctx.getJobDetail().getKey() + " on \""
                + resource + "\": " + why.getMessage() + "; retry " + attempt + " in " + delay
                + " ms");
    }

    /**
     * {@code quartz:<job key>:<sha256 hex of the merged JobDataMap as canonical
     * JSON>}, leaving out the keys that start with {@value #KEY_PREFIX}.
     */
    public static String defaultResource(JobKey key, Map<?, ?> mergedData) {
        TreeMap<String, Object> args = new TreeMap<>();
        if (mergedData != null) {
            for (Map.Entry<?, ?> e : mergedData.entrySet()) {
                String k = String.valueOf(e.getKey());
                if (!k.startsWith(KEY_PREFIX)) {
                    args.put(k, e.getValue());
                }
            }
        }
        return "quartz:" + key + ":" + sha256Hex(canonicalJson(args));
    }

    /**
     * Canonical JSON: object keys sorted, no whitespace; strings, numbers,
     * booleans, null, maps, collections and arrays as JSON; anything else as
     * the JSON string of its {@code toString()}.
     */
    public static String canonicalJson(Object value) {
        StringBuilder out = new StringBuilder();
        write(out, value);
        return out.toString();
    }

    private static void write(StringBuilder out, Object v) {
        if (v == null) {
            out.append("null");
        } else if (v instanceof Boolean) {
            out.append(v);
        } else if (v instanceof Byte || v instanceof Short || v instanceof Integer
                || v instanceof Long || v instanceof java.math.BigInteger) {
            out.append(v);
        } else if (v instanceof Number) {
            double d = ((Number) v).doubleValue();
            if (Double.isFinite(d)) {
                out.append(v instanceof java.math.BigDecimal ? v.toString() : Double.toString(d));
            } else {
                string(out, v.toString());
            }
        } else if (v instanceof Map) {
            TreeMap<String, Object> sorted = new TreeMap<>();
            for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) {
                sorted.put(String.valueOf(e.getKey()), e.getValue());
            }
            out.append('{');
            boolean first = true;
            for (Map.Entry<String, Object> e : sorted.entrySet()) {
                if (!first) {
                    out.append(',');
                }
                first = false;
                string(out, e.getKey());
                out.append(':');
                write(out, e.getValue());
            }
            out.append('}');
        } else if (v instanceof Collection) {
            out.append('[');
            boolean first = true;
            for (Object o : (Collection<?>) v) {
                if (!first) {
                    out.append(',');
                }
                first = false;
                write(out, o);
            }
            out.append(']');
        } else if (v.getClass().isArray()) {
            out.append('[');
            for (int i = 0; i < Array.getLength(v); i++) {
                if (i > 0) {
                    out.append(',');
                }
                write(out, Array.get(v, i));
            }
            out.append(']');
        } else {
            string(out, v.toString());
        }
    }

    private static void string(StringBuilder out, String s) {
        out.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"': out.append("\\\""); break;
                case '\\': out.append("\\\\"); break;
                case '\n': out.append("\\n"); break;
                case '\r': out.append("\\r"); break;
                case '\t': out.append("\\t"); break;
                case '\b': out.append("\\b"); break;
                case '\f': out.append("\\f"); break;
                default:
                    if (c < 0x20) {
                        out.append(String.format("\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
            }
        }
        out.append('"');
    }

    private static String sha256Hex(String s) {
        try {
            byte[] d = MessageDigest.getInstance("SHA-256").digest(s.getBytes(StandardCharsets.UTF_8));
            StringBuilder hex = new StringBuilder(64);
            for (byte b : d) {
                hex.append(String.format("%02x", b & 0xff));
            }
            return hex.toString();
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("SHA-256 is missing from this JVM", e);
        }
    }
}

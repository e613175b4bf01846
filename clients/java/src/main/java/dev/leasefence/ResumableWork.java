package dev.leasefence;

/**
 * The body of a resumable job ({@link LeaseFence#resumableJob}): runs inside
 * the job's open transaction, writes on {@link ResumableJob#connection()},
 * resumes from {@link ResumableJob#resumeFrom()} and records its progress with
 * {@link ResumableJob#checkpoint(String)}. Its result is what
 * {@code resumableJob} returns.
 *
 * @param <T> the result
 */
@FunctionalInterface
public interface ResumableWork<T> {
    /** Runs the job; do not commit, roll back or change autocommit: checkpoint instead. */
    T run(ResumableJob job) throws Exception;
}

package dev.leasefence;

import java.nio.charset.StandardCharsets;

/**
 * The options of {@link LeaseFence#campaign} and {@link LeaseFence#leadership}:
 * immutable; start from {@link #DEFAULTS} and change with the {@code with}
 * methods.
 *
 * @param value  shown by {@code lease_fence.leader()} while this candidate
 *               leads (at most 1024 bytes in UTF-8), or null
 * @param waitMs give up as a follower after this long ({@link LeaseBusyException}),
 *               or null: wait until the statement is cancelled
 * @param scope  {@code "session"} (released when the campaign connection's
 *               session ends) or {@code "explicit"} (behind a transaction-pooling
 *               proxy: kept until resign or the TTL)
 * @param fair   wait in the election's queue ({@code lease_fence.campaign}'s
 *               {@code fair}): candidates win in the order they came
 */
public record LeadershipOptions(String value, Long waitMs, String scope, boolean fair) {

    /** No value, no wait limit, scope session, not fair. */
    public static final LeadershipOptions DEFAULTS = new LeadershipOptions(null, null, "session");

    /** Not fair. */
    public LeadershipOptions(String value, Long waitMs, String scope) {
        this(value, waitMs, scope, false);
    }

    /** The longest value, in bytes. */
    public static final int MAX_VALUE_BYTES = 1024;

    /** These options with {@code value}. */
    public LeadershipOptions withValue(String value) {
        return new LeadershipOptions(value, waitMs, scope, fair);
    }

    /** These options with {@code waitMs}. */
    public LeadershipOptions withWaitMs(long waitMs) {
        return new LeadershipOptions(value, waitMs, scope, fair);
    }

    /** These options with {@code scope}. */
    public LeadershipOptions withScope(String scope) {
        return new LeadershipOptions(value, waitMs, scope, fair);
    }

    /** These options with {@code fair}. */
    public LeadershipOptions fair(boolean fair) {
        return new LeadershipOptions(value, waitMs, scope, fair);
    }

    void check() {
        if (value != null && value.getBytes(StandardCharsets.UTF_8).length > MAX_VALUE_BYTES) {
            throw new IllegalArgumentException("a leader's value is at most " + MAX_VALUE_BYTES
                    + " bytes, got " + value.getBytes(StandardCharsets.UTF_8).length);
        }
        if (waitMs != null && waitMs < 0) {
            throw new IllegalArgumentException("waitMs must not be negative, got " + waitMs);
        }
        if (!"session".equals(scope) && !"explicit".equals(scope)) {
            throw new IllegalArgumentException("scope is \"session\" or \"explicit\", got " + scope);
        }
    }
}

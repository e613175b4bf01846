package dev.leasefence;

import java.sql.SQLException;

/**
 * The work done as the leader of an election ({@link LeaseFence#leadership}).
 *
 * @param <T> the result
 */
@FunctionalInterface
public interface LeadershipWork<T> {
    /**
     * Runs the work as the leader. The campaign's connection is the
     * election's: work on other connections, writing with
     * {@link Leader#fenced(java.sql.Connection, FencedWork) lead.fenced(workConn, ...)}.
     * The thread is interrupted when the leadership is lost; call
     * {@link Leader#check()} between steps; do not resign.
     */
    T run(Leader lead) throws SQLException;
}

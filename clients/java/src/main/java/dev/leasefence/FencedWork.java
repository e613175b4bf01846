package dev.leasefence;

import java.sql.Connection;
import java.sql.SQLException;

/**
 * The work of one fenced transaction: runs on the connection it is given, inside
 * the transaction; its result is what {@link LeaseFence#fenced} returns. Return
 * {@code null} when there is nothing to return.
 *
 * @param <T> the result
 */
@FunctionalInterface
public interface FencedWork<T> {
    /** Runs the work; do not commit, roll back or change autocommit. */
    T run(Connection conn) throws SQLException;
}

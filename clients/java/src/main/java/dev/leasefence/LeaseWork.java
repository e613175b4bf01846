package dev.leasefence;

import java.sql.Connection;
import java.sql.SQLException;

/**
 * The work of a transaction that holds a transaction-scoped lease
 * ({@link LeaseFence#transactionLease}).
 *
 * @param <T> the result
 */
@FunctionalInterface
public interface LeaseWork<T> {
    /** Runs the work under {@code lease}; do not commit, roll back or change autocommit. */
    T run(Lease lease, Connection conn) throws SQLException;
}

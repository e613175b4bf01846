package dev.leasefence;

import java.sql.Connection;
import java.sql.SQLException;

/**
 * The work done under a kept-alive lease ({@link LeaseFence#keptAliveLease}).
 *
 * @param <T> the result
 */
@FunctionalInterface
public interface KeptAliveWork<T> {
    /**
     * Runs the work under {@code lease} on {@code conn}, the connection that
     * holds the lease. Write under it with
     * {@link LeaseFence#fenced(Connection, Lease, FencedWork) LeaseFence.fenced(conn, lease.lease(), ...)};
     * call {@link KeptAliveLease#check()} between steps; do not release the lease.
     */
    T run(KeptAliveLease lease, Connection conn) throws SQLException;
}

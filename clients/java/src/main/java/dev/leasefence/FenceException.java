package dev.leasefence;

import java.sql.SQLException;

/**
 * A write or COMMIT that lease_fence refused: SQLSTATE class {@code LF}.
 *
 * <p>An {@link SQLException}, so JDBC code, Spring, jOOQ and Hibernate see it
 * as one; {@link #getSQLState()} is the server's SQLSTATE and {@link #getCause()}
 * the driver's exception (a {@code org.postgresql.util.PSQLException}).
 *
 * <p>The fields are the error's fields as the server sent them, never parsed
 * from text: {@link #schema()}, {@link #table()} and {@link #column()} name a
 * refused row's table and fence column (e.g. {@code public}, {@code account},
 * {@code fence}); {@link #resource()} names a refused resource fence (sent as
 * the error's constraint name), with schema {@code lease_fence} and table
 * {@code resource_generation}. Each is {@code null} when the server did not
 * send it (an LF010 at COMMIT names nothing). {@link #detail()} is text for
 * humans and logs only: the stored and supplied generations (LF001) and the
 * highest issued one (LF004) are there, and code must not parse it.
 *
 * <p>Never retry a FenceException with the same generation: that is why the
 * extension does not use 40001.
 */
public class FenceException extends SQLException {
    private static final long serialVersionUID = 1L;

    private final String serverMessage;
    private final String detail;
    private final String schema;
    private final String table;
    private final String column;
    private final String resource;

    /**
     * @param message  the server's primary message
     * @param sqlState the SQLSTATE (LF001, ...)
     * @param detail   the server's DETAIL, or null
     * @param schema   the error's schema field, or null
     * @param table    the error's table field, or null
     * @param column   the error's column field, or null
     * @param resource the error's constraint field (a resource fence's resource), or null
     * @param cause    the driver's exception
     */
    protected FenceException(String message, String sqlState, String detail, String schema,
                             String table, String column, String resource, Throwable cause) {
        super(detail == null || detail.isEmpty() ? message : message + " (" + detail + ")",
              sqlState, cause);
        this.serverMessage = message;
        this.detail = detail;
        this.schema = schema;
        this.table = table;
        this.column = column;
        this.resource = resource;
    }

    /** The SQLSTATE, e.g. {@code "LF001"}; the same as {@link #getSQLState()}. */
    public String sqlState() {
        return getSQLState();
    }

    /** The server's primary message (without DETAIL). */
    public String serverMessage() {
        return serverMessage;
    }

    /** The server's DETAIL: for humans and logs, never for code to parse. May be null. */
    public String detail() {
        return detail;
    }

    /** The schema of the refused row's table, or {@code lease_fence} for a resource; or null. */
    public String schema() {
        return schema;
    }

    /** The refused row's table (the partition, for a partitioned table), or
     * {@code resource_generation} for a resource; or null. */
    public String table() {
        return table;
    }

    /** The fence column of the refused row's table, or null. */
    public String column() {
        return column;
    }

    /** The resource of a refused resource fence (the error's constraint field), or null. */
    public String resource() {
        return resource;
    }
}

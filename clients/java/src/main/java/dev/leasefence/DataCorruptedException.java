package dev.leasefence;

import java.sql.SQLException;

/**
 * SQLSTATE XX001, data corrupted: a key in Redis holds what lease_fence never
 * writes there (a generation key that is no generation, one far above what
 * the database issued, an oversized value). Nothing was acquired, and no
 * retry helps: a person must look at the key. The Python and Node.js
 * libraries call it {@code DataCorrupted}.
 *
 * <p>An {@link SQLException} with {@link #getSQLState()} {@value #SQLSTATE},
 * as the driver's exception (its {@link #getCause()}) was; not a
 * {@link LeaseException} and not a {@link FenceException}.
 */
public class DataCorruptedException extends SQLException {
    private static final long serialVersionUID = 1L;

    /** The SQLSTATE of this exception. */
    public static final String SQLSTATE = "XX001";

    private final String detail;

    /**
     * @param message the server's primary message
     * @param detail  the server's DETAIL, or null
     * @param cause   the driver's exception
     */
    public DataCorruptedException(String message, String detail, Throwable cause) {
        super(detail == null || detail.isEmpty() ? message : message + " (" + detail + ")",
              SQLSTATE, cause);
        this.detail = detail;
    }

    /** The server's DETAIL: for humans and logs, never for code to parse. May be null. */
    public String detail() {
        return detail;
    }
}

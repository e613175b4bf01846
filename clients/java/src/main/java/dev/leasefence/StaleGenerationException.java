package dev.leasefence;

/**
 * LF001: the row (or the resource) holds a newer generation than the one supplied:
 * a newer holder wrote the row, or fenced the resource. You lost the lease:
 * never retry with the same generation; acquire again.
 * {@link #table()} / {@link #column()} (and {@link #schema()}) for a row,
 * {@link #resource()} for a resource fence. The stored and supplied
 * generations are in {@link #detail()}, for humans.
 */
public class StaleGenerationException extends FenceException {
    private static final long serialVersionUID = 1L;

    /** The SQLSTATE of this exception. */
    public static final String SQLSTATE = "LF001";

    /** See {@link FenceException#FenceException}; the SQLSTATE is {@value #SQLSTATE}. */
    public StaleGenerationException(String message, String detail, String schema, String table,
            String column, String resource, Throwable cause) {
        super(message, SQLSTATE, detail, schema, table, column, resource, cause);
    }
}

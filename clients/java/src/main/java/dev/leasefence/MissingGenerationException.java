package dev.leasefence;

/**
 * LF002: a strict table was written (or a resource fenced, or a table
 * truncated) without a current generation, or a NULL fence. Set the generation.
 */
public class MissingGenerationException extends FenceException {
    private static final long serialVersionUID = 1L;

    /** The SQLSTATE of this exception. */
    public static final String SQLSTATE = "LF002";

    /** See {@link FenceException#FenceException}; the SQLSTATE is {@value #SQLSTATE}. */
    public MissingGenerationException(String message, String detail, String schema, String table,
            String column, String resource, Throwable cause) {
        super(message, SQLSTATE, detail, schema, table, column, resource, cause);
    }
}

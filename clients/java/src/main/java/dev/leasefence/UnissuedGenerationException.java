package dev.leasefence;

/**
 * LF004: the supplied generation was never issued by this database (a typo,
 * a timestamp, another database's). Fix the caller, do not retry. The highest
 * issued generation is in {@link #detail()}, for humans.
 */
public class UnissuedGenerationException extends FenceException {
    private static final long serialVersionUID = 1L;

    /** The SQLSTATE of this exception. */
    public static final String SQLSTATE = "LF004";

    /** See {@link FenceException#FenceException}; the SQLSTATE is {@value #SQLSTATE}. */
    public UnissuedGenerationException(String message, String detail, String schema, String table,
            String column, String resource, Throwable cause) {
        super(message, SQLSTATE, detail, schema, table, column, resource, cause);
    }
}

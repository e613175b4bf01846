package dev.leasefence;

/**
 * LF003: the statement wrote a fence value above the stored one that is
 * not the current generation. Fix the statement. (A fence written at or below
 * the stored one, as an ORM saving the whole row does, is not a conflict.)
 */
public class ConflictingGenerationException extends FenceException {
    private static final long serialVersionUID = 1L;

    /** The SQLSTATE of this exception. */
    public static final String SQLSTATE = "LF003";

    /** See {@link FenceException#FenceException}; the SQLSTATE is {@value #SQLSTATE}. */
    public ConflictingGenerationException(String message, String detail, String schema, String table,
            String column, String resource, Throwable cause) {
        super(message, SQLSTATE, detail, schema, table, column, resource, cause);
    }
}

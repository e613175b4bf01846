package dev.leasefence;

/**
 * LF010: the lease this transaction wrote under is lost: a transaction-scoped
 * lease was gone (or could not be verified) at COMMIT, or a kept-alive lease
 * was lost (then the owner's next fenced write under its generation, and the
 * COMMIT of a transaction that made one, are refused). The transaction was
 * rolled back: acquire again (a new generation) and redo it. An LF010 at
 * COMMIT names no table or resource.
 */
public class LeaseLostAtCommitException extends FenceException {
    private static final long serialVersionUID = 1L;

    /** The SQLSTATE of this exception. */
    public static final String SQLSTATE = "LF010";

    /** See {@link FenceException#FenceException}; the SQLSTATE is {@value #SQLSTATE}. */
    public LeaseLostAtCommitException(String message, String detail, String schema, String table,
            String column, String resource, Throwable cause) {
        super(message, SQLSTATE, detail, schema, table, column, resource, cause);
    }
}

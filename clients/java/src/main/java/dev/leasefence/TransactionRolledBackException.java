package dev.leasefence;

import java.sql.SQLException;

/**
 * The transaction did not commit: a statement in it failed, the work caught
 * its exception and went on (a refused write, say), and PostgreSQL would
 * answer COMMIT with ROLLBACK. The transaction was rolled back — nothing of
 * it was committed, a transaction-scoped lease was released with it — so
 * never treat the work as done. {@link LeaseFence#fenced}, {@link LeaseFence#job}
 * and {@link LeaseFence#transactionLease} throw it instead of returning.
 *
 * <p>Not a {@link FenceException}, and no SQLSTATE of its own ({@code null}):
 * the server refused nothing at COMMIT. The exception the work caught was
 * the work's; the driver does not show it to the library, so there is no
 * cause.
 */
public class TransactionRolledBackException extends SQLException {
    private static final long serialVersionUID = 1L;

    /** With the library's message. */
    public TransactionRolledBackException() {
        super("lease_fence: the transaction was rolled back at COMMIT: a statement in it failed "
                + "and its exception was caught; nothing of it was committed");
    }
}

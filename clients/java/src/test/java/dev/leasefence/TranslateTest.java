package dev.leasefence;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.sql.BatchUpdateException;
import java.sql.SQLException;

import org.junit.jupiter.api.Test;
import org.postgresql.util.PSQLException;
import org.postgresql.util.ServerErrorMessage;

/**
 * The mappings, without a server: SQLSTATE and error fields to FenceException,
 * statuses to LeaseException. (LeaseFenceTest checks the same against real
 * errors.)
 */
class TranslateTest {

    /** A pgjdbc exception as the server would send it: fields by their protocol codes. */
    static PSQLException serverError(String sqlState, String message, String detail,
                                     String schema, String table, String column,
                                     String constraint) {
        StringBuilder b = new StringBuilder();
        b.append("SERROR\0VERROR\0C").append(sqlState).append('\0');
        b.append('M').append(message).append('\0');
        if (detail != null) {
            b.append('D').append(detail).append('\0');
        }
        if (schema != null) {
            b.append('s').append(schema).append('\0');
        }
        if (table != null) {
            b.append('t').append(table).append('\0');
        }
        if (column != null) {
            b.append('c').append(column).append('\0');
        }
        if (constraint != null) {
            b.append('n').append(constraint).append('\0');
        }
        return new PSQLException(new ServerErrorMessage(b.toString()));
    }

    @Test
    void eachSqlstateHasItsException() {
        String[][] cases = {
            {"LF001", StaleGenerationException.class.getName()},
            {"LF002", MissingGenerationException.class.getName()},
            {"LF003", ConflictingGenerationException.class.getName()},
            {"LF004", UnissuedGenerationException.class.getName()},
            {"LF010", LeaseLostAtCommitException.class.getName()},
        };
        for (String[] c : cases) {
            PSQLException raw = serverError(c[0], "refused", null, "public", "account", "fence", null);
            SQLException mapped = LeaseFence.translate(raw);
            assertEquals(c[1], mapped.getClass().getName(), c[0]);
            assertEquals(c[0], mapped.getSQLState());
            assertSame(raw, mapped.getCause());
        }
    }

    @Test
    void xx001IsDataCorruptedAndNeverAFenceException() {
        PSQLException raw = serverError("XX001", "the generation key does not hold a generation",
                null, null, null, null, null);
        SQLException mapped = LeaseFence.dataCorrupted(raw);
        assertInstanceOf(DataCorruptedException.class, mapped);
        assertEquals("XX001", mapped.getSQLState());
        assertSame(raw, mapped.getCause());
        assertSame(raw, LeaseFence.translate(raw), "translate maps the LF class only");
        SQLException other = new SQLException("internal", "XX000");
        assertSame(other, LeaseFence.dataCorrupted(other));
    }

    @Test
    void fieldsComeFromTheErrorNotTheText() {
        PSQLException raw = serverError("LF001", "stale generation", "table x column y stored 9",
                "lease_fence", "resource_generation", null, "account:1");
        StaleGenerationException e = assertInstanceOf(StaleGenerationException.class,
                LeaseFence.translate(raw));
        assertEquals("LF001", e.sqlState());
        assertEquals("lease_fence", e.schema());
        assertEquals("resource_generation", e.table());
        assertNull(e.column());
        assertEquals("account:1", e.resource());
        assertEquals("stale generation", e.serverMessage());
        assertEquals("table x column y stored 9", e.detail());
        assertInstanceOf(FenceException.class, e);
        assertInstanceOf(SQLException.class, e);
    }

    @Test
    void translateWalksCausesAndNextExceptions() {
        PSQLException raw = serverError("LF002", "missing generation", null, "public", "ledger",
                "fence", null);
        SQLException wrapped = new SQLException("outer", "XX000", new RuntimeException(raw));
        assertInstanceOf(MissingGenerationException.class, LeaseFence.translate(wrapped));

        BatchUpdateException batch = new BatchUpdateException("batch", "LF002", new int[0]);
        batch.setNextException(raw);
        MissingGenerationException m = assertInstanceOf(MissingGenerationException.class,
                LeaseFence.translate(batch));
        assertEquals("ledger", m.table());

        // a framework's unchecked wrapper (Spring's DataAccessException, ...)
        RuntimeException framework = new IllegalStateException("framework", wrapped);
        assertTrue(LeaseFence.fenceException(framework).isPresent());

        SQLException other = new SQLException("duplicate key", "23505");
        assertSame(other, LeaseFence.translate(other));
        assertFalse(LeaseFence.fenceException(other).isPresent());
        SQLException unknownLf = serverError("LF999", "future", null, null, null, null, null);
        assertSame(unknownLf, LeaseFence.translate(unknownLf));
    }

    @Test
    void statusesMapToLeaseExceptions() {
        Lease row = new Lease("r", "0".repeat(32), 7L, null, Boolean.FALSE, "busy", null);
        assertInstanceOf(LeaseBusyException.class,
                LeaseFence.leaseError(false, "busy", row, "acquire", "r", null));
        LeaseException unavailable = LeaseFence.leaseError(false, "unavailable", row, "acquire",
                "r", "could not connect to Redis");
        assertInstanceOf(LeaseUnavailableException.class, unavailable);
        assertInstanceOf(LeaseDeniedException.class, unavailable);
        assertEquals("could not connect to Redis", unavailable.reason());
        assertTrue(unavailable.getMessage().endsWith("(could not connect to Redis)"));
        assertInstanceOf(LeaseLostException.class,
                LeaseFence.leaseError(false, "lost", row, "renew", "r", null));
        LeaseException stale = LeaseFence.leaseError(false, "stale", row, "acquire", "r", null);
        assertEquals(LeaseDeniedException.class, stale.getClass());
        assertEquals("stale", stale.status());
        // unknown: acquired IS NULL, never a LeaseDenied
        LeaseException unknown = LeaseFence.leaseError(null, "unknown", row, "acquire", "r",
                "timed out waiting for Redis");
        assertInstanceOf(LeaseUnknownException.class, unknown);
        assertFalse(unknown instanceof LeaseDeniedException);
        assertSame(row, unknown.lease());
    }

    @Test
    void releaseStatusesAreTheExtensionsWords() {
        assertEquals(ReleaseStatus.RELEASED, ReleaseStatus.of("released"));
        assertEquals(ReleaseStatus.NOT_HELD, ReleaseStatus.of("not_held"));
        assertEquals(ReleaseStatus.UNAVAILABLE, ReleaseStatus.of("unavailable"));
        assertEquals(ReleaseStatus.UNKNOWN, ReleaseStatus.of("unknown"));
        assertEquals("not_held", ReleaseStatus.NOT_HELD.toString());
    }
}

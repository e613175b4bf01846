package dev.leasefence;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;
import static org.junit.jupiter.api.DynamicTest.dynamicTest;

import java.io.IOException;
import java.io.Reader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;

import com.google.gson.Gson;
import com.google.gson.stream.JsonReader;
import com.google.gson.stream.JsonToken;

import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;
import org.junit.jupiter.api.function.Executable;

/**
 * The shared answer table, scripts/answers.json, row by row, without a
 * server: for every row of its "statuses", what acquire, tryAcquire, renew
 * and release do with a row of that status (the package-private
 * LeaseFence.acquireResult / renewResult / releaseResult, which the public
 * methods apply to the row the SQL function returns).
 *
 * <p>The table is read from the system property lf.answers, else the
 * environment variable LF_ANSWERS, else scripts/answers.json in the first
 * directory at or above the working directory that has one (the repository
 * root). Java has no client-side Redis mode: the table's "replies" rows are
 * not Java's to decode. It is read with Gson (Debian: libgoogle-gson-java),
 * strictly: a malformed table fails the tests, it is not guessed at.
 */
class AnswerTableTest {

    static Path answersPath() {
        String p = System.getProperty("lf.answers");
        if (p == null || p.isEmpty()) {
            p = System.getenv("LF_ANSWERS");
        }
        if (p != null && !p.isEmpty()) {
            return Paths.get(p);
        }
        for (Path d = Paths.get("").toAbsolutePath(); d != null; d = d.getParent()) {
            Path f = d.resolve("scripts").resolve("answers.json");
            if (Files.isRegularFile(f)) {
                return f;
            }
        }
        throw new IllegalStateException("scripts/answers.json not found at or above "
                + Paths.get("").toAbsolutePath() + " (set LF_ANSWERS)");
    }

    /** The whole table: objects as Maps, arrays as Lists, JSON null as null. */
    static Object readTable(Path f) throws IOException {
        try (Reader in = Files.newBufferedReader(f, StandardCharsets.UTF_8);
             JsonReader json = new JsonReader(in)) {
            json.setLenient(false);
            Object root = new Gson().getAdapter(Object.class).read(json);
            if (json.peek() != JsonToken.END_DOCUMENT) {
                throw new IllegalStateException(f + ": text after the JSON value");
            }
            return root;
        }
    }

    @SuppressWarnings("unchecked")
    static List<Map<String, Object>> statuses() throws IOException {
        Path f = answersPath();
        Object root = readTable(f);
        Object rows = ((Map<String, Object>) root).get("statuses");
        if (!(rows instanceof List)) {
            throw new IllegalStateException(f + " has no \"statuses\" list");
        }
        return (List<Map<String, Object>>) rows;
    }

    /** answers.json's name of an exception, in Java's spelling (LeaseBusy -> LeaseBusyException). */
    static Class<?> exceptionClass(String name) {
        try {
            return Class.forName("dev.leasefence." + name + "Exception");
        } catch (ClassNotFoundException e) {
            throw new AssertionError("answers.json names " + name + ": there is no "
                    + name + "Exception in dev.leasefence");
        }
    }

    static String str(Map<String, Object> row, String key) {
        Object v = row.get(key);
        if (!(v instanceof String)) {
            throw new AssertionError("row " + row + ": \"" + key + "\" is not a string");
        }
        return (String) v;
    }

    /** The row's boolean (acquired, renewed, released): TRUE, FALSE or null. */
    static Boolean bool(Map<String, Object> row, String key) {
        if (!row.containsKey(key)) {
            throw new AssertionError("row " + row + " has no \"" + key + "\"");
        }
        return (Boolean) row.get(key);
    }

    static final String IDENTITY = "0123456789abcdef0123456789abcdef";

    /** An acquire row as the SQL function returns it for this status. */
    static Lease acquireRow(String status, Boolean acquired) {
        boolean drawn = !Boolean.FALSE.equals(acquired);   // acquired or unknown: identity, generation
        return new Lease("table:r", drawn ? IDENTITY : null, drawn ? 42L : null,
                Boolean.TRUE.equals(acquired) ? 5000L : null, acquired, status,
                Boolean.TRUE.equals(acquired) ? null : "a reason");
    }

    /** Asserts that call answers as the table says: "return", "none", or an exception name. */
    static void expect(String expected, String what, Executable call, Runnable returned,
                       Runnable none) {
        Throwable thrown = null;
        try {
            call.execute();
        } catch (Throwable t) {
            thrown = t;
        }
        switch (expected) {
            case "return":
                if (thrown != null) {
                    fail(what + ": the table says return, it threw " + thrown);
                }
                returned.run();
                break;
            case "none":
                if (thrown != null) {
                    fail(what + ": the table says none, it threw " + thrown);
                }
                none.run();
                break;
            default:
                Class<?> want = exceptionClass(expected);
                if (thrown == null) {
                    fail(what + ": the table says " + expected + ", it returned");
                }
                assertSame(want, thrown.getClass(), what + ": " + thrown);
                LeaseException e = (LeaseException) thrown;
                assertNotNull(e.status(), what);
        }
    }

    @TestFactory
    List<DynamicTest> everyStatusRow() throws IOException {
        List<DynamicTest> tests = new ArrayList<>();
        for (Map<String, Object> row : statuses()) {
            String op = str(row, "operation");
            String status = str(row, "status");
            switch (op) {
                case "acquire": {
                    Boolean acquired = bool(row, "acquired");
                    String onAcquire = str(row, "acquire");
                    String onTry = str(row, "try_acquire");
                    tests.add(dynamicTest("acquire " + status + " -> " + onAcquire, () -> {
                        Lease in = acquireRow(status, acquired);
                        Lease[] out = new Lease[1];
                        expect(onAcquire, "acquire " + status,
                                () -> out[0] = LeaseFence.acquireResult(in, false),
                                () -> assertSame(in, out[0], "acquire returns the row's lease"),
                                () -> fail("acquire never answers none"));
                    }));
                    tests.add(dynamicTest("tryAcquire " + status + " -> " + onTry, () -> {
                        Lease in = acquireRow(status, acquired);
                        Lease[] out = new Lease[1];
                        expect(onTry, "tryAcquire " + status,
                                () -> out[0] = LeaseFence.acquireResult(in, true),
                                () -> assertSame(in, out[0], "tryAcquire returns the row's lease"),
                                () -> assertNull(out[0], "tryAcquire: none"));
                    }));
                    break;
                }
                case "renew": {
                    Boolean renewed = bool(row, "renewed");
                    String onRenew = str(row, "renew");
                    tests.add(dynamicTest("renew " + status + " -> " + onRenew, () -> {
                        Lease lease = new Lease("table:r", IDENTITY, 42L, 5000L);
                        long[] out = new long[1];
                        expect(onRenew, "renew " + status,
                                () -> out[0] = LeaseFence.renewResult(lease, renewed, status,
                                        Boolean.TRUE.equals(renewed) ? 3000L : null,
                                        Boolean.TRUE.equals(renewed) ? null : "a reason"),
                                () -> assertEquals(3000L, out[0], "renew returns validity_ms"),
                                () -> fail("renew never answers none"));
                    }));
                    break;
                }
                case "release": {
                    Boolean released = bool(row, "released");
                    String onRelease = str(row, "release");
                    tests.add(dynamicTest("release " + status + " -> " + onRelease, () -> {
                        ReleaseOutcome[] out = new ReleaseOutcome[1];
                        expect(onRelease, "release " + status,
                                () -> out[0] = LeaseFence.releaseResult(released, status, null),
                                () -> {
                                    assertEquals(status, out[0].status().status(),
                                            "release returns the status");
                                    assertEquals(released, out[0].released());
                                },
                                () -> fail("release never answers none"));
                    }));
                    break;
                }
                default:
                    tests.add(dynamicTest(op + " " + status, () ->
                            fail("answers.json: a statuses row for an operation this library "
                                    + "does not have: " + op)));
            }
        }
        return tests;
    }

    /** The table covers each operation, and each of its outcomes for acquire
     * has a row (so that an emptied table cannot pass). */
    @Test
    void theTableCoversEveryOperation() throws IOException {
        Set<String> ops = new TreeSet<>();
        Set<String> acquireStatuses = new TreeSet<>();
        for (Map<String, Object> row : statuses()) {
            ops.add(str(row, "operation"));
            if ("acquire".equals(row.get("operation"))) {
                acquireStatuses.add(str(row, "status"));
            }
        }
        assertEquals(Set.of("acquire", "renew", "release"), ops);
        assertTrue(acquireStatuses.containsAll(Set.of("acquired", "busy", "unavailable",
                "unknown")), "acquire rows: " + acquireStatuses);
    }

    /** A status no row lists: never a grant, never "none" (only busy is). */
    @Test
    void aStatusTheTableDoesNotListIsNeverAGrant() {
        Lease odd = acquireRow("some_future_status", Boolean.FALSE);
        SQLException a = org.junit.jupiter.api.Assertions.assertThrows(LeaseDeniedException.class,
                () -> LeaseFence.acquireResult(odd, true));
        assertEquals("some_future_status", ((LeaseException) a).status());
        Lease unknown = acquireRow("some_future_status", null);
        LeaseException u = org.junit.jupiter.api.Assertions.assertThrows(
                LeaseUnknownException.class, () -> LeaseFence.acquireResult(unknown, true));
        assertFalse(u instanceof LeaseDeniedException);
        org.junit.jupiter.api.Assertions.assertThrows(SQLException.class,
                () -> LeaseFence.releaseResult(Boolean.FALSE, "some_future_status", null));
    }
}

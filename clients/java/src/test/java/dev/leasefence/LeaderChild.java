package dev.leasefence;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.util.Properties;

/**
 * The old leader of {@link LeadershipTest#frozenLeaderIsFencedOut}, a process
 * of its own (the test freezes it with SIGSTOP): {@code LeaderChild election
 * rowId ttlMs}, connecting as the tests do (LF_JDBC_URL, LF_JDBC_USER,
 * LF_JDBC_PASSWORD_FILE). Runs {@link LeaseFence#leadership}; prints
 * "leader &lt;term&gt;", waits for "write" on stdin; then "first &lt;kind&gt;" (its
 * write through lead.fenced at once), "interrupted" (the work thread was
 * interrupted on the loss), "lost &lt;status&gt;", "fenced &lt;kind&gt;" (lead.fenced
 * again), "raw &lt;kind&gt;" (the same write under its term without the
 * library's check), and "leadership &lt;kind&gt;" (what leadership threw).
 */
public final class LeaderChild {
    private LeaderChild() {
    }

    static Connection connect() throws SQLException, IOException {
        Properties p = new Properties();
        p.setProperty("user", System.getenv().getOrDefault("LF_JDBC_USER", "app"));
        String file = System.getenv("LF_JDBC_PASSWORD_FILE");
        if (file != null) {
            p.setProperty("password", Files.readString(Path.of(file), StandardCharsets.UTF_8).strip());
        }
        return DriverManager.getConnection(System.getenv("LF_JDBC_URL"), p);
    }

    static String kind(Throwable e) {
        if (e == null) {
            return "ok";
        }
        if (e instanceof LeadershipLostException) {
            return "LeadershipLost";
        }
        if (e instanceof StaleGenerationException) {
            return "StaleGeneration:" + ((StaleGenerationException) e).resource();
        }
        return "error:" + e.getClass().getSimpleName() + ":" + String.valueOf(e.getMessage()).replace('\n', ' ');
    }

    static String attempt(FencedWork<?> write, Connection c, Leader lead, boolean raw) {
        try {
            if (raw) {
                LeaseFence.fenced(c, lead.term(), lead.election(), write);
            } else {
                lead.fenced(c, write);
            }
            return "ok";
        } catch (SQLException | RuntimeException e) {
            return kind(e);
        }
    }

    public static void main(String[] args) throws Exception {
        String election = args[0];
        int id = Integer.parseInt(args[1]);
        long ttl = Long.parseLong(args[2]);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        try (Connection conn = connect(); Connection work = connect()) {
            FencedWork<Integer> write = c -> {
                try (PreparedStatement ps = c.prepareStatement(
                        "UPDATE account SET owner = 'old leader' WHERE id = ?")) {
                    ps.setInt(1, id);
                    return ps.executeUpdate();
                }
            };
            try {
                LeaseFence.leadership(conn, election, ttl, LeadershipOptions.DEFAULTS.withValue("child"), lead -> {
                    System.out.println("leader " + lead.term());
                    System.out.flush();
                    try {
                        if (!"write".equals(in.readLine())) {
                            System.exit(1);
                        }
                    } catch (IOException e) {
                        throw new SQLException(e);
                    }
                    System.out.println("first " + attempt(write, work, lead, false));
                    try {
                        Thread.sleep(Long.MAX_VALUE);
                    } catch (InterruptedException e) {
                        System.out.println("interrupted");
                    }
                    LeadershipLostException lost = lead.lostBy();
                    System.out.println("lost " + (lost == null ? "none" : lost.status()));
                    System.out.println("fenced " + attempt(write, work, lead, false));
                    System.out.println("raw " + attempt(write, work, lead, true));
                    System.out.flush();
                    return null;
                });
                System.out.println("leadership ok");
            } catch (SQLException e) {
                System.out.println("leadership " + kind(e));
            }
        }
        System.out.flush();
    }
}

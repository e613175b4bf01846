// TwoHolders — two workers, one resource: the stale one is fenced off.
//
// Worker A acquires the lease "account:<id>" with a short TTL, then stalls past
// it (a GC pause, a slow disk). Worker B acquires the lease — a newer
// generation — and writes the row. A wakes up and tries its write: lease_fence
// refuses it with StaleGenerationException, and B's row stands.
//
// Build and run against the client jar and pgjdbc:
//
//   javac -cp lease-fence.jar:/usr/share/java/postgresql.jar -d out TwoHolders.java
//   java  -cp out:lease-fence.jar:/usr/share/java/postgresql.jar TwoHolders
//
// Connection: LF_JDBC_URL (default jdbc:postgresql://127.0.0.1:5432/appdb),
// LF_JDBC_USER (default app), LF_JDBC_PASSWORD_FILE (a file holding the
// password; none if unset). Needs the table "account" (id, owner, balance) with
// lease_fence.protect('account'), as in test/clients/run.sh. Exit status 0
// when A was fenced off and B's row stands, 1 otherwise.

import dev.leasefence.Lease;
import dev.leasefence.LeaseFence;
import dev.leasefence.ReleaseStatus;
import dev.leasefence.StaleGenerationException;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.Properties;

public class TwoHolders {

    static Connection connect() throws Exception {
        String url = System.getenv().getOrDefault("LF_JDBC_URL",
                "jdbc:postgresql://127.0.0.1:5432/appdb");
        Properties props = new Properties();
        props.setProperty("user", System.getenv().getOrDefault("LF_JDBC_USER", "app"));
        String passwordFile = System.getenv("LF_JDBC_PASSWORD_FILE");
        if (passwordFile != null) {
            props.setProperty("password",
                    Files.readString(Path.of(passwordFile), StandardCharsets.UTF_8).strip());
        }
        return DriverManager.getConnection(url, props);   // autocommit on
    }

    static int setOwner(Connection conn, int id, String owner) throws SQLException {
        try (PreparedStatement ps = conn.prepareStatement(
                "UPDATE account SET owner = ? WHERE id = ?")) {
            ps.setString(1, owner);
            ps.setInt(2, id);
            return ps.executeUpdate();
        }
    }

    public static void main(String[] args) throws Exception {
        try (Connection a = connect(); Connection b = connect()) {
            int id;
            try (PreparedStatement ps = a.prepareStatement(
                    "INSERT INTO account (owner) VALUES ('nobody') RETURNING id");
                 ResultSet rs = ps.executeQuery()) {
                rs.next();
                id = rs.getInt(1);
            }
            String resource = "account:" + id;

            // A: a lease of 300 ms, then a stall of 800 ms
            Lease leaseA = LeaseFence.acquire(a, resource, 300);
            System.out.println("A acquired " + resource + " at generation " + leaseA.generation());
            Thread.sleep(800);

            // B: the lease is free again; a newer generation, and B's write
            Lease leaseB = LeaseFence.acquire(b, resource, 10_000);
            System.out.println("B acquired " + resource + " at generation " + leaseB.generation());
            LeaseFence.fenced(b, leaseB, conn -> setOwner(conn, id, "B"));
            System.out.println("B wrote owner = B");

            // A wakes up and writes under its old generation
            boolean fencedOff = false;
            try {
                LeaseFence.fenced(a, leaseA, conn -> setOwner(conn, id, "A"));
                System.out.println("A's write went through: NOT fenced");
            } catch (StaleGenerationException e) {
                fencedOff = true;
                System.out.println("A's write refused: " + e.getSQLState()
                        + " (resource " + e.resource() + ", table " + e.table() + ")");
            }
            ReleaseStatus releasedA = LeaseFence.release(a, leaseA);
            System.out.println("A's release: " + releasedA);

            String owner;
            long fence;
            try (PreparedStatement ps = b.prepareStatement(
                    "SELECT owner, fence FROM account WHERE id = ?")) {
                ps.setInt(1, id);
                try (ResultSet rs = ps.executeQuery()) {
                    rs.next();
                    owner = rs.getString(1);
                    fence = rs.getLong(2);
                }
            }
            System.out.println("row " + id + ": owner = " + owner + ", fence = " + fence);
            ReleaseStatus releasedB = LeaseFence.release(b, leaseB);
            System.out.println("B's release: " + releasedB);

            boolean ok = fencedOff && "B".equals(owner) && fence == leaseB.generation()
                    && releasedA == ReleaseStatus.NOT_HELD && releasedB == ReleaseStatus.RELEASED;
            System.out.println(ok ? "TwoHolders: ok" : "TwoHolders: FAILED");
            System.exit(ok ? 0 : 1);
        }
    }
}

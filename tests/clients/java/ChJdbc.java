// The ClickHouse JDBC driver against a phasemeter worker: connects to the
// JDBC URL given, runs the queries the integration test names and prints one
// line per result, or the server's error code.
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.Properties;

public class ChJdbc {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        if (args.length >= 3) {
            props.setProperty("user", args[1]);
            props.setProperty("password", args[2]);
        }
        try (Connection conn = DriverManager.getConnection(args[0], props)) {
            System.out.println("product\t" + conn.getMetaData().getDatabaseProductVersion());
            try (Statement st = conn.createStatement();
                 ResultSet rs = st.executeQuery("SELECT model, count() AS n FROM generations GROUP BY model ORDER BY model")) {
                while (rs.next()) {
                    System.out.println("generations\t" + rs.getString(1) + "\t" + rs.getLong(2));
                }
            }
            try (PreparedStatement ps = conn.prepareStatement("SELECT count() FROM generations WHERE model = ?")) {
                ps.setString(1, args.length >= 4 ? args[3] : "m1");
                try (ResultSet rs = ps.executeQuery()) {
                    rs.next();
                    System.out.println("prepared\t" + rs.getLong(1));
                }
            }
            try (ResultSet rs = conn.getMetaData().getTables(null, null, "generations", null)) {
                System.out.println("tables\t" + (rs.next() ? rs.getString("TABLE_NAME") : ""));
            }
            try (Statement st = conn.createStatement()) {
                st.executeUpdate("INSERT INTO generations (model) VALUES ('x')");
                System.out.println("refused\tnone");
            } catch (SQLException e) {
                System.out.println("refused\t" + e.getErrorCode());
            }
        }
    }
}

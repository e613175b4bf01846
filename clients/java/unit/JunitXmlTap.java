import java.io.File;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import javax.xml.parsers.DocumentBuilderFactory;
import org.w3c.dom.Document;
import org.w3c.dom.Element;
import org.w3c.dom.Node;
import org.w3c.dom.NodeList;

/**
 * clients/java/unit/JunitXmlTap.java — a JUnit legacy XML report (the console
 * launcher's --reports-dir) as TAP lines: "ok N - class: test" or "not ok N -
 * class: test" then "# " lines with the failure, one per test case (a dynamic
 * test by its display name), in class order; skipped ones "ok N - ... # SKIP". Exit status 1 when any failed, 2 when the report
 * has no test case. unit.sh compiles it with the tests: java JunitXmlTap REPORT.
 */
public class JunitXmlTap {
    public static void main(String[] args) throws Exception {
        DocumentBuilderFactory f = DocumentBuilderFactory.newInstance();
        f.setFeature("http://apache.org/xml/features/disallow-doctype-decl", true);
        Document doc = f.newDocumentBuilder().parse(new File(args[0]));
        NodeList all = doc.getElementsByTagName("testcase");
        List<Element> cases = new ArrayList<>();
        for (int k = 0; k < all.getLength(); k++) {
            cases.add((Element) all.item(k));
        }
        // the report's order is not the run's: by class, then name, then [index]
        Pattern indexed = Pattern.compile("^(.*)\\[(\\d+)\\]$");
        cases.sort(Comparator.comparing((Element c) -> c.getAttribute("classname"))
                .thenComparing(c -> {
                    Matcher m = indexed.matcher(c.getAttribute("name"));
                    return m.matches() ? m.group(1) : c.getAttribute("name");
                })
                .thenComparingInt(c -> {
                    Matcher m = indexed.matcher(c.getAttribute("name"));
                    return m.matches() ? Integer.parseInt(m.group(2)) : 0;
                }));
        int n = 0;
        int failed = 0;
        for (Element c : cases) {
            String cls = c.getAttribute("classname");
            String test = c.getAttribute("name");
            Matcher m = indexed.matcher(test);
            if (m.matches()) {      // a dynamic test: its display name, from system-out
                for (String line : c.getTextContent().split("\n")) {
                    if (line.startsWith("display-name: ")) {
                        test = m.group(1) + " " + line.substring("display-name: ".length());
                    }
                }
            }
            String name = cls.substring(cls.lastIndexOf('.') + 1) + ": " + test;
            name = name.replace('\n', ' ').replace("#", "\\#");
            String problem = null;
            boolean skipped = false;
            for (Node ch = c.getFirstChild(); ch != null; ch = ch.getNextSibling()) {
                if (!(ch instanceof Element)) {
                    continue;
                }
                String tag = ((Element) ch).getTagName();
                if (tag.equals("failure") || tag.equals("error")) {
                    Element e = (Element) ch;
                    problem = e.getAttribute("message");
                    if (problem.isEmpty()) {
                        problem = e.getAttribute("type");
                    }
                } else if (tag.equals("skipped")) {
                    skipped = true;
                }
            }
            n++;
            if (problem != null) {
                failed++;
                System.out.println("not ok " + n + " - " + name);
                for (String line : problem.split("\n")) {
                    System.out.println("#   " + line);
                }
            } else if (skipped) {
                System.out.println("ok " + n + " - " + name + " # SKIP");
            } else {
                System.out.println("ok " + n + " - " + name);
            }
        }
        System.out.println("1.." + n);
        System.exit(n == 0 ? 2 : failed > 0 ? 1 : 0);
    }
}

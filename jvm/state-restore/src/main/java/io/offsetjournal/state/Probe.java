package io.offsetjournal.state;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;

/**
 * Whether this JVM's Spark has every Spark class the helper's classes name. A runtime
 * that builds Spark's internals its own way (a vendor's fork) may lack one or have it
 * elsewhere: asked before anything is written, it is refused naming the class, not
 * failed in the middle of a write with a NoClassDefFoundError. The list is made when the
 * jar is built, from the compiled classes' own references ({@value #LIST}, one class a
 * line). This class names no Spark class itself, so it loads on any JVM.
 */
public final class Probe {
    /** The resource beside this class listing the Spark classes the helper names. */
    static final String LIST = "spark-classes.txt";

    private Probe() {
    }

    /** The first listed class this JVM cannot load, or null when it has them all. */
    public static String missing() {
        ClassLoader loader = Probe.class.getClassLoader();
        for (String name : listed()) {
            try {
                Class.forName(name, false, loader);
            } catch (ClassNotFoundException | LinkageError e) {
                return name;
            }
        }
        return null;
    }

    /** How many classes are listed (none would be a jar built without its list). */
    public static int count() {
        return listed().length;
    }

    private static String[] listed() {
        try (InputStream in = Probe.class.getResourceAsStream(LIST)) {
            if (in == null) {
                throw new IllegalStateException("the helper jar has no " + LIST
                    + ": it was not built by offset-journal's build");
            }
            return new String(in.readAllBytes(), StandardCharsets.UTF_8).strip().split("\n");
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** {@code java -cp HELPER:SPARK_JARS io.offsetjournal.state.Probe}: prints the first
     * missing class and exits 1, or exits 0. */
    public static void main(String[] args) {
        String found = missing();
        if (found != null) {
            System.out.println(found);
            System.exit(1);
        }
    }
}

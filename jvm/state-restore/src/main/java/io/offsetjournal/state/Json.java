package io.offsetjournal.state;

import java.util.ArrayList;
import java.util.List;

/** A minimal JSON writer: what crosses to Python is plain JSON text, no JVM objects. */
final class Json {
    private Json() {
    }

    static String quote(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"' -> b.append("\\\"");
                case '\\' -> b.append("\\\\");
                case '\n' -> b.append("\\n");
                case '\r' -> b.append("\\r");
                case '\t' -> b.append("\\t");
                default -> {
                    if (c < 0x20) {
                        b.append(String.format("\\u%04x", (int) c));
                    } else {
                        b.append(c);
                    }
                }
            }
        }
        return b.append('"').toString();
    }

    /** A JSON object, its members in the order put (not named Object: that is java.lang's). */
    static final class Members {
        private final List<String> members = new ArrayList<>();

        Members put(String key, String value) {
            members.add(quote(key) + ":" + (value == null ? "null" : quote(value)));
            return this;
        }

        Members put(String key, long value) {
            members.add(quote(key) + ":" + value);
            return this;
        }

        Members put(String key, Array value) {
            members.add(quote(key) + ":" + value);
            return this;
        }

        /** A member whose value is JSON text already (a schema's own JSON). */
        Members raw(String key, String json) {
            members.add(quote(key) + ":" + (json == null ? "null" : json));
            return this;
        }

        @Override
        public String toString() {
            return "{" + String.join(",", members) + "}";
        }
    }

    /** A JSON array. */
    static final class Array {
        private final List<String> items = new ArrayList<>();

        Array add(Object item) {
            items.add(item instanceof String s ? quote(s) : String.valueOf(item));
            return this;
        }

        @Override
        public String toString() {
            return "[" + String.join(",", items) + "]";
        }
    }
}

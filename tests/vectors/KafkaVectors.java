// Prints reference vectors from the real Kafka Java client and Streams library; the printed
// values are pasted as constants into tests/unit/test_murmur2.py, test_serdes.py and test_text.py.
//
// How it was run (not part of the build; jars are not committed):
//   mvn dependency:get -Dartifact=org.apache.kafka:kafka-clients:3.9.1
//   mvn dependency:get -Dartifact=org.apache.kafka:kafka-streams:3.9.1
//   CP=~/.m2/repository/org/apache/kafka/kafka-clients/3.9.1/kafka-clients-3.9.1.jar
//   CP=$CP:~/.m2/repository/org/apache/kafka/kafka-streams/3.9.1/kafka-streams-3.9.1.jar
//   CP=$CP:~/.m2/repository/org/slf4j/slf4j-api/1.7.36/slf4j-api-1.7.36.jar
//   java -cp $CP tests/vectors/KafkaVectors.java
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Locale;
import org.apache.kafka.common.serialization.*;
import org.apache.kafka.common.utils.Utils;
import org.apache.kafka.streams.kstream.*;
import org.apache.kafka.streams.kstream.internals.SessionWindow;
import org.apache.kafka.streams.kstream.internals.TimeWindow;

public class KafkaVectors {
    static String hex(byte[] b) {
        if (b == null) return "null";
        StringBuilder sb = new StringBuilder();
        for (byte x : b) sb.append(String.format("%02x", x & 0xff));
        return sb.toString();
    }

    static byte[] unhex(String s) {
        byte[] out = new byte[s.length() / 2];
        for (int i = 0; i < out.length; i++) out[i] = (byte) Integer.parseInt(s.substring(2 * i, 2 * i + 2), 16);
        return out;
    }

    static String pyStr(String s) {
        StringBuilder sb = new StringBuilder("\"");
        s.codePoints().forEach(cp -> {
            if (cp == '"' || cp == '\\') sb.append('\\').appendCodePoint(cp);
            else if (cp < 0x20 || cp > 0x7e) sb.append(String.format(cp > 0xffff ? "\\U%08x" : "\\u%04x", cp));
            else sb.appendCodePoint(cp);
        });
        return sb.append('"').toString();
    }

    public static void main(String[] args) {
        String[] murmurHex = {
            "", "61", "6162", "616263", "61626364", "6162636465", "3231",
            hex("foobar".getBytes(StandardCharsets.UTF_8)),
            hex("a-little-bit-long-string".getBytes(StandardCharsets.UTF_8)),
            hex("UA1545".getBytes(StandardCharsets.UTF_8)),
            hex("kafka".getBytes(StandardCharsets.UTF_8)),
            hex("h\u00e9llo w\u00f6rld \ud83d\ude00".getBytes(StandardCharsets.UTF_8)),
            "00", "ff", "ffffffff", "80808080ff", "00000000000000000001", "fffefdfcfbfaf9",
        };
        StringBuilder all = new StringBuilder();
        for (int i = 0; i < 256; i++) all.append(String.format("%02x", i));
        String[] withAll = Arrays.copyOf(murmurHex, murmurHex.length + 1);
        withAll[murmurHex.length] = all.toString();
        System.out.println("# murmur2: (hex, murmur2, toPositive, p3, p4, p7, p12)");
        for (String h : withAll) {
            byte[] b = unhex(h);
            int m = Utils.murmur2(b);
            int pos = Utils.toPositive(m);
            System.out.printf("(\"%s\", %d, %d, %d, %d, %d, %d),%n", h, m, pos, pos % 3, pos % 4, pos % 7, pos % 12);
        }

        System.out.println("# long: (value, hex)");
        LongSerializer ls = new LongSerializer();
        for (long v : new long[] {0L, 1L, -1L, 255L, 256L, 1357000000000L, Long.MAX_VALUE, Long.MIN_VALUE})
            System.out.printf("(%d, \"%s\"),%n", v, hex(ls.serialize("t", v)));
        System.out.println("# integer: (value, hex)");
        IntegerSerializer is = new IntegerSerializer();
        for (int v : new int[] {0, 1, -1, 65536, Integer.MAX_VALUE, Integer.MIN_VALUE})
            System.out.printf("(%d, \"%s\"),%n", v, hex(is.serialize("t", v)));
        System.out.println("# double: (value, hex)");
        DoubleSerializer ds = new DoubleSerializer();
        for (double v : new double[] {0.0, -0.0, 1.5, -2.25, 3.141592653589793, 1e300, Double.MIN_VALUE,
                Double.POSITIVE_INFINITY, Double.NEGATIVE_INFINITY, Double.NaN})
            System.out.printf("(%s, \"%s\"),%n", Double.toString(v), hex(ds.serialize("t", v)));
        System.out.println("# string: (value, hex)");
        StringSerializer ss = new StringSerializer();
        for (String v : new String[] {"", "kafka", "h\u00e9llo", "\u65e5\u672c", "\ud83d\ude00", "a\u0000b"})
            System.out.printf("(%s, \"%s\"),%n", pyStr(v), hex(ss.serialize("t", v)));
        System.out.println("# string deserializer on invalid UTF-8: (hex, decoded)");
        StringDeserializer sd = new StringDeserializer();
        for (String h : new String[] {"ff", "61c3", "e282", "eda080", "f09f98", "c0af", "61ff62", "f4908080"})
            System.out.printf("(\"%s\", %s),%n", h, pyStr(sd.deserialize("t", unhex(h))));
        System.out.println("# long deserializer error");
        try { new LongDeserializer().deserialize("t", new byte[3]); }
        catch (Exception e) { System.out.println(e.getClass().getName() + ": " + e.getMessage()); }
        try { new IntegerDeserializer().deserialize("t", new byte[3]); }
        catch (Exception e) { System.out.println(e.getClass().getName() + ": " + e.getMessage()); }

        System.out.println("# windowed");
        TimeWindowedSerializer<String> tws = new TimeWindowedSerializer<>(new StringSerializer());
        Windowed<String> w = new Windowed<>("a", new TimeWindow(10000L, 15000L));
        System.out.println("time " + hex(tws.serialize("t", w)) + " " + w);
        TimeWindowedDeserializer<String> twd = new TimeWindowedDeserializer<>(new StringDeserializer(), Long.MAX_VALUE - 5);
        Windowed<String> big = twd.deserialize("t", unhex("62000000000000000a"));
        System.out.println("time-overflow " + big.window().start() + " " + big.window().end());
        System.out.println("time-empty " + twd.deserialize("t", new byte[0]));
        SessionWindowedSerializer<String> sws = new SessionWindowedSerializer<>(new StringSerializer());
        Windowed<String> sw = new Windowed<>("key", new SessionWindow(1000L, 2500L));
        System.out.println("session " + hex(sws.serialize("t", sw)) + " " + sw);
        TimeWindowedSerializer<Long> twl = new TimeWindowedSerializer<>(new LongSerializer());
        System.out.println("time-long " + hex(twl.serialize("t", new Windowed<>(7L, new TimeWindow(0L, 60000L)))));

        System.out.println("# split: (input, output)");
        String[] lines = {"", " ", "   ", "!!!", "a", "Hello World", " leading space", "trailing space  ",
            "a,,b", "all streams lead to kafka", "H\u00e9llo W\u00f6rld", "don't stop", "__init__ x_y",
            "\u0130stanbul \u00c9COLE", "Stra\u00dfe \u03a3\u039f\u03a6\u039f\u03a3", "tab\tsep\nnl\r\nend",
            "123 456abc", "emoji\ud83d\ude00here", "\u212aelvin", "-a-b-", "x\u00a0y"};
        for (String line : lines) {
            String[] parts = line.toLowerCase(Locale.ROOT).split("\\W+");
            StringBuilder sb = new StringBuilder("[");
            for (int i = 0; i < parts.length; i++) { if (i > 0) sb.append(", "); sb.append(pyStr(parts[i])); }
            System.out.printf("(%s, %s),%n", pyStr(line), sb.append("]"));
        }
    }
}

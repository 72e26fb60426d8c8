package io.streamtable.reference;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.util.Base64;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.TestInputTopic;
import org.apache.kafka.streams.TestOutputTopic;
import org.apache.kafka.streams.TopologyTestDriver;
import org.apache.kafka.streams.test.TestRecord;

/**
 * Runs one of {@link ReferenceApp}'s topologies in Kafka Streams' own {@link TopologyTestDriver}
 * (repartition topics in memory, every record processed and committed before the next).
 *
 * <p>Usage: {@code --topology NAME --input FILE --output TOPIC [--initial-wall-clock MS]
 * [--param key=value ...]}. The input file holds one JSON object per line: {@code topic},
 * {@code key} and {@code value} (base64, or null) and {@code ts} (ms); the records are piped
 * one by one in file order. A line {@code {"advance_wall_clock_ms": N}} advances the driver's
 * wall clock instead (firing wall-clock punctuation). The
 * records of the output topic are printed on stdout, one JSON object per line in the same form.
 * Kafka Streams' default record cache: the driver commits (and so flushes the cache) after every
 * record, so each record's updates are emitted, one per key, as streamtable emits one per key and
 * micro-batch.
 */
public final class ReferenceDriver {
    private ReferenceDriver() {}

    public static void main(String[] args) throws IOException {
        Map<String, String> opts = new HashMap<>();
        Map<String, String> params = new HashMap<>();
        for (int i = 0; i + 1 < args.length; i += 2) {
            if (args[i].equals("--param")) {
                String[] kv = args[i + 1].split("=", 2);
                params.put(kv[0], kv[1]);
            } else {
                opts.put(args[i].substring(2), args[i + 1]);
            }
        }
        String output = opts.get("output");
        params.put("output", output);
        StreamsBuilder builder = new StreamsBuilder();
        ReferenceApp.build(builder, opts.get("topology"), params);
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, "reference-driver");
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, "driver:9092");
        Base64.Decoder b64in = Base64.getDecoder();
        Base64.Encoder b64out = Base64.getEncoder();
        Instant clock =
                opts.containsKey("initial-wall-clock")
                        ? Instant.ofEpochMilli(Long.parseLong(opts.get("initial-wall-clock")))
                        : Instant.now();
        try (TopologyTestDriver driver = new TopologyTestDriver(builder.build(), props, clock);
                BufferedReader in =
                        Files.newBufferedReader(Path.of(opts.get("input")), StandardCharsets.UTF_8)) {
            Map<String, TestInputTopic<byte[], byte[]>> inputs = new HashMap<>();
            String line;
            while ((line = in.readLine()) != null) {
                if (line.isBlank()) {
                    continue;
                }
                JsonNode rec = ReferenceApp.JSON.readTree(line);
                if (rec.has("advance_wall_clock_ms")) {
                    driver.advanceWallClockTime(
                            java.time.Duration.ofMillis(rec.get("advance_wall_clock_ms").asLong()));
                    continue;
                }
                TestInputTopic<byte[], byte[]> topic =
                        inputs.computeIfAbsent(
                                rec.get("topic").asText(),
                                t ->
                                        driver.createInputTopic(
                                                t,
                                                new ByteArraySerializer(),
                                                new ByteArraySerializer()));
                topic.pipeInput(
                        bytes(b64in, rec.get("key")),
                        bytes(b64in, rec.get("value")),
                        Instant.ofEpochMilli(rec.get("ts").asLong()));
            }
            TestOutputTopic<byte[], byte[]> out =
                    driver.createOutputTopic(
                            output, new ByteArrayDeserializer(), new ByteArrayDeserializer());
            StringBuilder text = new StringBuilder();
            for (TestRecord<byte[], byte[]> r : out.readRecordsToList()) {
                ObjectNode o = ReferenceApp.JSON.createObjectNode();
                o.put("key", r.key() == null ? null : b64out.encodeToString(r.key()));
                o.put("value", r.value() == null ? null : b64out.encodeToString(r.value()));
                o.put("ts", r.timestamp());
                text.append(o).append('\n');
            }
            System.out.print(text);
            System.out.flush();
        }
    }

    private static byte[] bytes(Base64.Decoder decoder, JsonNode node) {
        return node == null || node.isNull() ? null : decoder.decode(node.asText());
    }
}

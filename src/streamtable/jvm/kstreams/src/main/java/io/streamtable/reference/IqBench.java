package io.streamtable.reference;

import com.fasterxml.jackson.databind.node.ObjectNode;
import java.time.Duration;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.Random;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StoreQueryParameters;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.QueryableStoreTypes;
import org.apache.kafka.streams.state.ReadOnlyKeyValueStore;
import org.apache.kafka.streams.state.Stores;

/**
 * Kafka Streams' side of {@code bench/interactive_queries.py}: the same count store ("counts",
 * {@code groupByKey().count()} of the input) queried with Kafka Streams' own interactive queries.
 *
 * <p>Usage: {@code --bootstrap-servers B --application-id A --state-dir D --input T --output O
 * --keys N --seconds S [--store rocksdb|memory]}. Keys are {@code k0000000 ..}, as the Python
 * side produces them. Waits until the store holds the N preloaded keys, prints {@code ready} (the
 * Python side then starts ingesting), does point lookups of random keys for S seconds and
 * 1,000-key range scans for min(S, 10) seconds from one thread, and prints one JSON line of
 * figures.
 */
public final class IqBench {
    private IqBench() {}

    public static void main(String[] args) throws Exception {
        Map<String, String> o = new HashMap<>();
        for (int i = 0; i + 1 < args.length; i += 2) {
            o.put(args[i].substring(2), args[i + 1]);
        }
        int keys = Integer.parseInt(o.get("keys"));
        double seconds = Double.parseDouble(o.get("seconds"));
        boolean memory = "memory".equals(o.getOrDefault("store", "rocksdb"));
        StreamsBuilder b = new StreamsBuilder();
        Materialized<String, Long, KeyValueStore<Bytes, byte[]>> store =
                memory
                        ? Materialized.<String, Long>as(Stores.inMemoryKeyValueStore("counts"))
                        : Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as("counts");
        b.stream(o.get("input"), Consumed.with(Serdes.String(), Serdes.String()))
                .groupByKey(Grouped.with(Serdes.String(), Serdes.String()))
                .count(store.withKeySerde(Serdes.String()).withValueSerde(Serdes.Long()))
                .toStream()
                .to(o.get("output"), Produced.with(Serdes.String(), Serdes.Long()));
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, o.get("application-id"));
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, o.get("bootstrap-servers"));
        props.put(StreamsConfig.STATE_DIR_CONFIG, o.get("state-dir"));
        props.put("auto.offset.reset", "earliest");
        try (KafkaStreams streams = new KafkaStreams(b.build(), props)) {
            streams.start();
            ReadOnlyKeyValueStore<String, Long> counts = null;
            long t0 = System.nanoTime();
            while (counts == null) {
                try {
                    counts =
                            streams.store(
                                    StoreQueryParameters.fromNameAndType(
                                            "counts", QueryableStoreTypes.keyValueStore()));
                } catch (RuntimeException notYet) {
                    Thread.sleep(100);
                }
            }
            String last = key(keys - 1);
            while (countAll(counts) < keys) {
                Thread.sleep(500);
            }
            double loadS = (System.nanoTime() - t0) / 1e9;
            System.out.println("ready");
            System.out.flush();
            Random rnd = new Random(7);
            long[] lookups = new long[50_000_000];
            int n = 0;
            long start = System.nanoTime();
            long end = start + (long) (seconds * 1e9);
            while (System.nanoTime() < end && n < lookups.length) {
                String k = key(rnd.nextInt(keys));
                long a = System.nanoTime();
                counts.get(k);
                lookups[n++] = System.nanoTime() - a;
            }
            double lookupS = (System.nanoTime() - start) / 1e9;
            long[] scans = new long[1_000_000];
            int m = 0;
            start = System.nanoTime();
            end = start + (long) (Math.min(seconds, 10) * 1e9);
            while (System.nanoTime() < end && m < scans.length) {
                int i = rnd.nextInt(Math.max(1, keys - 1000));
                long a = System.nanoTime();
                try (KeyValueIterator<String, Long> it = counts.range(key(i), key(i + 999))) {
                    while (it.hasNext()) {
                        it.next();
                    }
                }
                scans[m++] = System.nanoTime() - a;
            }
            ObjectNode r = ReferenceApp.JSON.createObjectNode();
            r.put("engine", memory ? "kafka-streams-memory" : "kafka-streams-rocksdb");
            r.put("keys", keys);
            r.put("start_to_store_loaded_s", Math.round(loadS * 10) / 10.0);
            r.put("lookups", n);
            r.put("lookups_per_s", Math.round(n / lookupS));
            long[] l = Arrays.copyOf(lookups, n);
            Arrays.sort(l);
            r.put("lookup_p50_ms", ms(l, 0.5));
            r.put("lookup_p99_ms", ms(l, 0.99));
            r.put("lookup_max_ms", ms(l, 1.0));
            long[] s = Arrays.copyOf(scans, m);
            Arrays.sort(s);
            r.put("range_1000_scans", m);
            r.put("range_1000_p50_ms", ms(s, 0.5));
            r.put("range_1000_p99_ms", ms(s, 0.99));
            r.put("last_key_count", counts.get(last));
            System.out.println(r);
            System.out.flush();
            streams.close(Duration.ofSeconds(15));
        }
    }

    private static String key(int i) {
        return String.format("k%07d", i);
    }

    private static long countAll(ReadOnlyKeyValueStore<String, Long> store) {
        long n = 0;
        try (KeyValueIterator<String, Long> it = store.all()) {
            while (it.hasNext()) {
                it.next();
                n++;
            }
        } catch (RuntimeException rebalancing) {
            return -1;
        }
        return n;
    }

    private static double ms(long[] sorted, double q) {
        if (sorted.length == 0) {
            return Double.NaN;
        }
        int i = Math.min(sorted.length - 1, (int) (q * sorted.length));
        return Math.round(sorted[i] / 1e3) / 1e3;
    }
}

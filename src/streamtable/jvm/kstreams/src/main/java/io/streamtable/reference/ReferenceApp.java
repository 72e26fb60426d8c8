package io.streamtable.reference;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Joined;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.SessionWindows;
import org.apache.kafka.streams.kstream.SlidingWindows;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.TimeWindowedKStream;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.ValueJoiner;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.kstream.WindowedSerdes;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.WindowStore;
import org.apache.kafka.streams.state.Stores;

/**
 * Runs one fixed Kafka Streams topology until it is terminated (SIGTERM closes it cleanly).
 *
 * <p>Usage: {@code --topology NAME --bootstrap-servers HOST:PORT --application-id ID --state-dir
 * DIR [--param key=value ...] [--config streams.config=value ...]}, or {@code --topology NAME
 * --describe true [--param key=value ...]} to print the topology's {@code describe()} and exit;
 * {@code --config} overrides
 * the defaults below. Topologies: stream-table-join, table-table-join,
 * table-aggregate, flights-weather, flights-planes, flights-fk-planes, windowed-count,
 * windowed-aggregate, flights-hourly, windowed-parity, and the chains of several sub-topologies
 * join-rekey-reduce, count-histogram, count-filter, windowed-count-filter, session-count-filter,
 * sliding-count-filter, table-join-regroup,
 * three-level (see
 * streamtable.reference.kafka_streams).
 *
 * <p>With {@code --param metrics_file=PATH} (windowed topologies), the sum of the tasks'
 * {@code dropped-records-total} metrics is written to PATH as {@code {"dropped-records-total": N}}
 * when the app is asked to stop (before it closes).
 *
 * <p>Every state change is printed on stdout as {@code streamtable-reference: state NEW}; the
 * Python runner waits for {@code RUNNING}. The exit code is 0 after a requested shutdown, 1 when
 * the application failed.
 */
public final class ReferenceApp {
    static final String STATE_LINE = "streamtable-reference: state ";
    static final Serde<String> STR = Serdes.String();
    static final ObjectMapper JSON = new ObjectMapper();

    private ReferenceApp() {}

    public static void main(String[] args) throws InterruptedException {
        // Windowed aggregations log every record dropped for a closed window at WARN; the drop
        // count is read from the metrics instead (metrics_file), so they are not printed.
        System.setProperty(
                "org.slf4j.simpleLogger.log.org.apache.kafka.streams.kstream.internals", "error");
        Map<String, String> opts = new HashMap<>();
        Map<String, String> params = new HashMap<>();
        Map<String, String> config = new HashMap<>();
        for (int i = 0; i < args.length; i += 2) {
            if (i + 1 >= args.length || !args[i].startsWith("--")) {
                throw new IllegalArgumentException("expected --option value pairs, got " + args[i]);
            }
            if (args[i].equals("--param") || args[i].equals("--config")) {
                String[] kv = args[i + 1].split("=", 2);
                if (kv.length != 2) {
                    throw new IllegalArgumentException(args[i] + " needs key=value: " + args[i + 1]);
                }
                (args[i].equals("--param") ? params : config).put(kv[0], kv[1]);
            } else {
                opts.put(args[i].substring(2), args[i + 1]);
            }
        }
        StreamsBuilder builder = new StreamsBuilder();
        build(builder, required(opts, "topology", "option --"), params);
        if ("true".equals(opts.get("describe"))) {
            // Topology.describe() only: no broker, no state
            System.out.print(builder.build().describe());
            System.out.flush();
            System.exit(0);
        }

        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, required(opts, "application-id", "option --"));
        props.put(
                StreamsConfig.BOOTSTRAP_SERVERS_CONFIG,
                required(opts, "bootstrap-servers", "option --"));
        props.put(StreamsConfig.STATE_DIR_CONFIG, required(opts, "state-dir", "option --"));
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.AT_LEAST_ONCE);
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        props.putAll(config);

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        CountDownLatch done = new CountDownLatch(1);
        boolean[] failed = {false};
        String metricsFile = params.get("metrics_file");
        streams.setStateListener(
                (now, before) -> {
                    System.out.println(STATE_LINE + now);
                    System.out.flush();
                    if (now == KafkaStreams.State.ERROR) {
                        failed[0] = true;
                    }
                    if (now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
                        done.countDown();
                    }
                });
        streams.setUncaughtExceptionHandler(
                e -> {
                    System.err.println("streamtable-reference: stream thread failed");
                    e.printStackTrace();
                    failed[0] = true;
                    return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse
                            .SHUTDOWN_CLIENT;
                });
        Runtime.getRuntime()
                .addShutdownHook(
                        new Thread(
                                () -> {
                                    if (metricsFile != null) {
                                        writeMetrics(streams, metricsFile);
                                    }
                                    streams.close(Duration.ofSeconds(15));
                                    done.countDown();
                                }));
        streams.start();
        done.await();
        streams.close(Duration.ofSeconds(15));
        System.exit(failed[0] ? 1 : 0);
    }

    static void build(StreamsBuilder b, String topology, Map<String, String> p) {
        switch (topology) {
            case "stream-table-join" -> streamTableJoin(b, p);
            case "table-table-join" -> tableTableJoin(b, p);
            case "table-aggregate" -> tableAggregate(b, p);
            case "flights-weather" -> flightsWeather(b, p);
            case "flights-planes" -> flightsPlanes(b, p);
            case "flights-fk-planes" -> flightsFkPlanes(b, p);
            case "windowed-count" -> windowedCount(b, p);
            case "windowed-aggregate" -> windowedAggregate(b, p);
            case "flights-hourly" -> flightsHourly(b, p);
            case "windowed-parity" -> windowedParity(b, p);
            case "join-rekey-reduce" -> joinRekeyReduce(b, p);
            case "count-histogram" -> countHistogram(b, p);
            case "count-filter" -> countFilter(b, p);
            case "windowed-count-filter" -> windowedCountFilter(b, p);
            case "session-count-filter" -> sessionCountFilter(b, p);
            case "sliding-count-filter" -> slidingCountFilter(b, p);
            case "table-join-regroup" -> tableJoinRegroup(b, p);
            case "three-level" -> threeLevel(b, p);
            case "flights-carrier-seats" -> flightsCarrierSeats(b, p);
            case "windowed-filter-join" -> windowedFilterJoin(b, p);
            case "processor-punctuation" -> processorPunctuation(b, p);
            case "wordcount" -> wordCount(b, p);
            case "latency-echo" -> latencyEcho(b, p);
            case "latency-max" -> latencyMax(b, p);
            case "latency-count" -> latencyCount(b, p);
            default -> throw new IllegalArgumentException("unknown topology " + topology);
        }
    }

    /** KStream-KTable join; the table is a versioned store, so a stream record sees the table as of its timestamp. */
    static void streamTableJoin(StreamsBuilder b, Map<String, String> p) {
        long historyMs = Long.parseLong(p.getOrDefault("history_ms", "86400000"));
        KStream<String, String> stream = b.stream(required(p, "stream"), Consumed.with(STR, STR));
        KTable<String, String> table =
                b.table(
                        required(p, "table"),
                        Consumed.with(STR, STR),
                        versioned("table-store", Duration.ofMillis(historyMs)));
        ValueJoiner<String, String, String> joiner = (l, r) -> l + "|" + r;
        KStream<String, String> joined =
                switch (kind(p, "inner", "left")) {
                    case "inner" -> stream.join(table, joiner);
                    default -> stream.leftJoin(table, joiner);
                };
        joined.to(required(p, "output"), Produced.with(STR, STR));
    }

    /** KTable-KTable join over plain key-value stores; deletes are written as null values. */
    static void tableTableJoin(StreamsBuilder b, Map<String, String> p) {
        KTable<String, String> left = b.table(required(p, "left"), Consumed.with(STR, STR));
        KTable<String, String> right = b.table(required(p, "right"), Consumed.with(STR, STR));
        ValueJoiner<String, String, String> joiner =
                (l, r) -> String.valueOf(l) + "|" + String.valueOf(r);
        KTable<String, String> joined =
                switch (kind(p, "inner", "left", "outer")) {
                    case "inner" -> left.join(right, joiner);
                    case "left" -> left.leftJoin(right, joiner);
                    default -> left.outerJoin(right, joiner);
                };
        joined.toStream().to(required(p, "output"), Produced.with(STR, STR));
    }

    /** Values "group:amount" summed per group with adder and subtractor (a repartitioning groupBy). */
    static void tableAggregate(StreamsBuilder b, Map<String, String> p) {
        KTable<String, String> table = b.table(required(p, "table"), Consumed.with(STR, STR));
        table.groupBy(
                        (k, v) -> {
                            String[] parts = v.split(":");
                            return KeyValue.pair(parts[0], Long.parseLong(parts[1]));
                        },
                        Grouped.with(STR, Serdes.Long()))
                .aggregate(
                        () -> 0L,
                        (k, v, agg) -> agg + v,
                        (k, v, agg) -> agg - v,
                        Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as("aggregate-store")
                                .withKeySerde(STR)
                                .withValueSerde(Serdes.Long()))
                .toStream()
                .to(required(p, "output"), Produced.with(STR, Serdes.Long()));
    }

    /**
     * Flights re-keyed by origin, joined with the weather table (versioned; history_ms defaults to
     * 30 days). A flight processed more than history_ms behind the weather gets no match.
     */
    static void flightsWeather(StreamsBuilder b, Map<String, String> p) {
        long historyMs = Long.parseLong(p.getOrDefault("history_ms", "2592000000"));
        KTable<String, String> weather =
                b.table(
                        required(p, "weather"),
                        Consumed.with(STR, STR),
                        versioned("weather-store", Duration.ofMillis(historyMs)));
        b.stream(required(p, "flights"), Consumed.with(STR, STR))
                .selectKey((k, v) -> field(v, "origin"))
                .join(weather, (f, w) -> pair("flight", f, "weather", w), Joined.with(STR, STR, STR))
                .to(required(p, "output"), Produced.with(STR, STR));
    }

    /** Flights with a tail number re-keyed by it, joined with the planes table (plain store). */
    static void flightsPlanes(StreamsBuilder b, Map<String, String> p) {
        KTable<String, String> planes = b.table(required(p, "planes"), Consumed.with(STR, STR));
        b.stream(required(p, "flights"), Consumed.with(STR, STR))
                .filter((k, v) -> v != null && field(v, "tailnum") != null)
                .selectKey((k, v) -> field(v, "tailnum"))
                .join(planes, (f, pl) -> pair("flight", f, "plane", pl), Joined.with(STR, STR, STR))
                .to(required(p, "output"), Produced.with(STR, STR));
    }

    /**
     * Flights read as a table (each flight number's latest flight), foreign-key joined with the
     * planes table on the flight's tail number (KIP-213); a flight without one joins nothing.
     */
    static void flightsFkPlanes(StreamsBuilder b, Map<String, String> p) {
        KTable<String, String> planes = b.table(required(p, "planes"), Consumed.with(STR, STR));
        b.table(required(p, "flights"), Consumed.with(STR, STR))
                .join(planes, f -> field(f, "tailnum"), (f, pl) -> pair("flight", f, "plane", pl))
                .toStream()
                .to(required(p, "output"), Produced.with(STR, STR));
    }

    /**
     * Tumbling windows of size_ms with grace_ms: count per key and window (group by key, no
     * repartition); with suppress=true only each window's final count, once it closes. Output key:
     * TimeWindowedSerde (key bytes + 8-byte big-endian window start), value: 8-byte long.
     */
    static void windowedCount(StreamsBuilder b, Map<String, String> p) {
        KTable<Windowed<String>, Long> counts =
                windowCount(windowed(b.stream(required(p, "input"), Consumed.with(STR, STR)).groupByKey(), p), p);
        writeWindowed(suppressed(counts, p), p, Serdes.Long());
    }

    static KTable<Windowed<String>, Long> windowCount(TimeWindowedKStream<String, String> w, Map<String, String> p) {
        return w.count(windowStore("count-store", p, Serdes.Long()));
    }

    static KTable<Windowed<String>, String> windowStats(TimeWindowedKStream<String, String> w, Map<String, String> p) {
        return w.aggregate(
                () -> "0:0:0",
                (k, v, a) -> {
                    String[] parts = a.split(":");
                    long x = Long.parseLong(v);
                    return (Long.parseLong(parts[0]) + 1)
                            + ":"
                            + (Long.parseLong(parts[1]) + x)
                            + ":"
                            + Math.max(Long.parseLong(parts[2]), x);
                },
                windowStore("aggregate-store", p, STR));
    }

    /**
     * windowed-count and windowed-aggregate of one input in one app (group by key, no
     * repartition): the updates to count_output and aggregate_output and, when given, the
     * suppressed final results to count_final_output and aggregate_final_output.
     */
    static void windowedParity(StreamsBuilder b, Map<String, String> p) {
        TimeWindowedKStream<String, String> w =
                windowed(b.stream(required(p, "input"), Consumed.with(STR, STR)).groupByKey(), p);
        KTable<Windowed<String>, Long> counts = windowCount(w, p);
        KTable<Windowed<String>, String> stats = windowStats(w, p);
        Map<String, String> q = new HashMap<>(p);
        q.put("output", required(p, "count_output"));
        writeWindowed(counts, q, Serdes.Long());
        q.put("output", required(p, "aggregate_output"));
        writeWindowed(stats, q, STR);
        q.put("suppress", "true");
        if (p.containsKey("count_final_output")) {
            q.put("output", p.get("count_final_output"));
            writeWindowed(suppressed(counts, q), q, Serdes.Long());
        }
        if (p.containsKey("aggregate_final_output")) {
            q.put("output", p.get("aggregate_final_output"));
            writeWindowed(suppressed(stats, q), q, STR);
        }
    }

    /**
     * Tumbling windows of size_ms with grace_ms over integer values: per key and window the string
     * "count:sum:max" (order-independent). suppress and output as windowed-count, value a string.
     */
    static void windowedAggregate(StreamsBuilder b, Map<String, String> p) {
        KTable<Windowed<String>, String> agg =
                windowStats(windowed(b.stream(required(p, "input"), Consumed.with(STR, STR)).groupByKey(), p), p);
        writeWindowed(suppressed(agg, p), p, STR);
    }

    /**
     * Flights grouped by origin (a repartition) in tumbling windows (size_ms default 1 hour,
     * grace_ms default 2 hours). agg=count (default): flights per origin and window, long values;
     * agg=stats: the demo's hourly statistics as the string
     * "scheduled,departed,cancelled,delayed_15,delay_sum,delay_n".
     */
    static void flightsHourly(StreamsBuilder b, Map<String, String> p) {
        Map<String, String> q = new HashMap<>(p);
        q.putIfAbsent("size_ms", "3600000");
        q.putIfAbsent("grace_ms", "7200000");
        TimeWindowedKStream<String, String> hourly =
                windowed(
                        b.stream(required(p, "flights"), Consumed.with(STR, STR))
                                .groupBy((k, v) -> field(v, "origin"), Grouped.with("flights-by-origin", STR, STR)),
                        q);
        String agg = p.getOrDefault("agg", "count");
        if (agg.equals("count")) {
            writeWindowed(
                    suppressed(
                            hourly.count(windowStore("flights-hourly-store", q, Serdes.Long())),
                            q),
                    q,
                    Serdes.Long());
        } else if (agg.equals("stats")) {
            writeWindowed(
                    suppressed(
                            hourly.aggregate(
                                    () -> "0,0,0,0,0,0",
                                    (k, v, a) -> addFlight(v, a),
                                    windowStore("flights-hourly-store", q, STR)),
                            q),
                    q,
                    STR);
        } else {
            throw new IllegalArgumentException("unsupported agg=" + agg);
        }
    }

    /** The demo's add_flight on "scheduled,departed,cancelled,delayed_15,delay_sum,delay_n". */
    static String addFlight(String flight, String agg) {
        String[] parts = agg.split(",");
        long[] a = new long[6];
        for (int i = 0; i < 6; i++) {
            a[i] = Long.parseLong(parts[i]);
        }
        JsonNode f = parse(flight);
        a[0] += 1;
        JsonNode depTime = f.get("dep_time");
        if (depTime == null || depTime.isNull()) {
            a[2] += 1;
        } else {
            a[1] += 1;
        }
        JsonNode delay = f.get("dep_delay");
        if (delay != null && !delay.isNull()) {
            long d = delay.asLong();
            a[4] += d;
            a[5] += 1;
            if (d > 15) {
                a[3] += 1;
            }
        }
        return a[0] + "," + a[1] + "," + a[2] + "," + a[3] + "," + a[4] + "," + a[5];
    }

    static <V> TimeWindowedKStream<String, V> windowed(
            org.apache.kafka.streams.kstream.KGroupedStream<String, V> grouped, Map<String, String> p) {
        return grouped.windowedBy(
                TimeWindows.ofSizeAndGrace(
                        Duration.ofMillis(Long.parseLong(required(p, "size_ms"))),
                        Duration.ofMillis(Long.parseLong(required(p, "grace_ms")))));
    }

    /**
     * The window store: store=rocksdb (default: Kafka Streams' persistent segmented store) or
     * store=memory (an in-memory window store, retention size + grace, no duplicates).
     */
    static <V> Materialized<String, V, WindowStore<Bytes, byte[]>> windowStore(
            String name, Map<String, String> p, Serde<V> values) {
        String store = p.getOrDefault("store", "rocksdb");
        Materialized<String, V, WindowStore<Bytes, byte[]>> m;
        if (store.equals("rocksdb")) {
            m = Materialized.as(name);
        } else if (store.equals("memory")) {
            long size = Long.parseLong(required(p, "size_ms"));
            long grace = Long.parseLong(required(p, "grace_ms"));
            m = Materialized.as(
                    Stores.inMemoryWindowStore(
                            name, Duration.ofMillis(size + grace), Duration.ofMillis(size), false));
        } else {
            throw new IllegalArgumentException("unsupported store=" + store);
        }
        return m.withKeySerde(STR).withValueSerde(values);
    }

    static <V> KTable<Windowed<String>, V> suppressed(KTable<Windowed<String>, V> table, Map<String, String> p) {
        String suppress = p.getOrDefault("suppress", "false");
        if (suppress.equals("true")) {
            return table.suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()));
        }
        if (!suppress.equals("false")) {
            throw new IllegalArgumentException("unsupported suppress=" + suppress);
        }
        return table;
    }

    static <V> void writeWindowed(KTable<Windowed<String>, V> table, Map<String, String> p, Serde<V> values) {
        long sizeMs = Long.parseLong(required(p, "size_ms"));
        table.toStream()
                .to(
                        required(p, "output"),
                        Produced.with(WindowedSerdes.timeWindowedSerdeFrom(String.class, sizeMs), values));
    }

    /**
     * Clicks (value: a count as text) joined with the users' regions (versioned table), re-keyed by
     * region and summed: Kafka Streams' canonical two-sub-topology example.
     */
    static void joinRekeyReduce(StreamsBuilder b, Map<String, String> p) {
        long historyMs = Long.parseLong(p.getOrDefault("history_ms", "86400000"));
        KTable<String, String> regions =
                b.table(
                        required(p, "table"),
                        Consumed.with(STR, STR),
                        versioned("table-store", Duration.ofMillis(historyMs)));
        b.stream(required(p, "stream"), Consumed.with(STR, STR))
                .join(regions, (clicks, region) -> region + ":" + clicks)
                .map((user, v) -> KeyValue.pair(v.split(":")[0], Long.parseLong(v.split(":")[1])))
                .groupByKey(Grouped.with("by-region", STR, Serdes.Long()))
                .reduce(Long::sum, longStore("region-sums"))
                .toStream()
                .to(required(p, "output"), Produced.with(STR, Serdes.Long()));
    }

    /** Events counted per user, then users per count (a histogram: the table re-grouped). */
    static void countHistogram(StreamsBuilder b, Map<String, String> p) {
        b.stream(required(p, "input"), Consumed.with(STR, STR))
                .groupByKey(Grouped.with(STR, STR))
                .count(Materialized.as("user-counts"))
                .groupBy((user, n) -> KeyValue.pair(String.valueOf(n), user), Grouped.with("histogram", STR, STR))
                .count(Materialized.as("histogram-store"))
                .toStream()
                .to(required(p, "output"), Produced.with(STR, Serdes.Long()));
    }

    /**
     * Events per user, filtered as a table (counts 2, 3 and from 5 pass; 4 stops passing):
     * KTableFilter gets the materialized count's old values. With suppress_ms the filter reads
     * the counts held back by untilTimeLimit(suppress_ms), whose old value is that of each
     * key's last buffered change.
     */
    static void countFilter(StreamsBuilder b, Map<String, String> p) {
        limited(
                        b.stream(required(p, "input"), Consumed.with(STR, STR))
                                .groupByKey(Grouped.with(STR, STR))
                                .count(Materialized.as("user-counts")),
                        p)
                .filter((user, n) -> n >= 2 && n != 4)
                .toStream()
                .to(required(p, "output"), Produced.with(STR, Serdes.Long()));
    }

    /** The table's updates held back by untilTimeLimit(suppress_ms, unbounded) when given. */
    static <K, V> KTable<K, V> limited(KTable<K, V> table, Map<String, String> p) {
        String limitMs = p.get("suppress_ms");
        if (limitMs == null) {
            return table;
        }
        return table.suppress(
                Suppressed.untilTimeLimit(
                        Duration.ofMillis(Long.parseLong(limitMs)),
                        Suppressed.BufferConfig.unbounded()));
    }

    /**
     * Events per user and window, filtered as a table (counts 2, 3 and from 5 pass; 4 stops
     * passing), written as "user@start": KTableFilter gets the window store's old values. With
     * suppress=true the filter reads the final results (untilWindowCloses), whose old value is
     * that of each window's last buffered change; with suppress_ms, the updates held back by
     * untilTimeLimit(suppress_ms).
     */
    static void windowedCountFilter(StreamsBuilder b, Map<String, String> p) {
        filteredWindowCounts(
                limited(
                        suppressed(
                                windowed(
                                                b.stream(
                                                                required(p, "input"),
                                                                Consumed.with(STR, STR))
                                                        .groupByKey(),
                                                p)
                                        .count(windowStore("count-store", p, Serdes.Long())),
                                p),
                        p),
                false,
                p);
    }

    /**
     * Window counts filtered as a table (counts 2, 3 and from 5 pass; 4 stops passing), written
     * keyed "user@start" (withEnd: "user@start-end").
     */
    static void filteredWindowCounts(
            KTable<Windowed<String>, Long> counts, boolean withEnd, Map<String, String> p) {
        counts.filter((wk, n) -> n >= 2 && n != 4)
                .toStream()
                .map(
                        (wk, n) ->
                                KeyValue.pair(
                                        wk.key()
                                                + "@"
                                                + wk.window().start()
                                                + (withEnd ? "-" + wk.window().end() : ""),
                                        n))
                .to(required(p, "output"), Produced.with(STR, Serdes.Long()));
    }

    /**
     * Events per user and session (inactivity gap gap_ms), filtered as a table (counts 2, 3 and
     * from 5 pass; 4 stops passing), written as "user@start-end": KTableFilter gets the session
     * store's old values, merged-away sessions included. With suppress=true the filter reads the
     * final results (untilWindowCloses).
     */
    static void sessionCountFilter(StreamsBuilder b, Map<String, String> p) {
        SessionWindows windows =
                SessionWindows.ofInactivityGapAndGrace(
                        Duration.ofMillis(Long.parseLong(required(p, "gap_ms"))),
                        Duration.ofMillis(Long.parseLong(required(p, "grace_ms"))));
        filteredWindowCounts(
                suppressed(
                        b.stream(required(p, "input"), Consumed.with(STR, STR))
                                .groupByKey()
                                .windowedBy(windows)
                                .count(Materialized.as("session-counts")),
                        p),
                true,
                p);
    }

    /**
     * Events per user in sliding windows (time difference difference_ms), filtered as a table
     * (counts 2, 3 and from 5 pass; 4 stops passing), written as "user@start": KTableFilter gets
     * the window store's old values. With suppress=true the filter reads the final results
     * (untilWindowCloses).
     */
    static void slidingCountFilter(StreamsBuilder b, Map<String, String> p) {
        SlidingWindows windows =
                SlidingWindows.ofTimeDifferenceAndGrace(
                        Duration.ofMillis(Long.parseLong(required(p, "difference_ms"))),
                        Duration.ofMillis(Long.parseLong(required(p, "grace_ms"))));
        filteredWindowCounts(
                suppressed(
                        b.stream(required(p, "input"), Consumed.with(STR, STR))
                                .groupByKey()
                                .windowedBy(windows)
                                .count(Materialized.as("sliding-counts")),
                        p),
                false,
                p);
    }

    /**
     * Kafka's WordCountDemo (streams/examples): lines lower-cased and split on non-word
     * characters, re-keyed by word (a repartition), counted; store=rocksdb (default) or
     * store=memory picks the count's key-value store.
     */
    static void wordCount(StreamsBuilder b, Map<String, String> p) {
        String store = p.getOrDefault("store", "rocksdb");
        Materialized<String, Long, KeyValueStore<Bytes, byte[]>> counts;
        if (store.equals("rocksdb")) {
            counts = Materialized.as("counts-store");
        } else if (store.equals("memory")) {
            counts = Materialized.as(Stores.inMemoryKeyValueStore("counts-store"));
        } else {
            throw new IllegalArgumentException("unsupported store=" + store);
        }
        b.stream(required(p, "input"), Consumed.with(STR, STR))
                .flatMapValues(line -> Arrays.asList(line.toLowerCase(Locale.getDefault()).split("\\W+")))
                .groupBy((key, word) -> word, Grouped.with(STR, STR))
                .count(counts.withKeySerde(STR).withValueSerde(Serdes.Long()))
                .toStream()
                .to(required(p, "output"), Produced.with(STR, Serdes.Long()));
    }

    /** bench/latency.py's stateless topology: the String value parsed into a Long, kept if >= 0. */
    static void latencyEcho(StreamsBuilder b, Map<String, String> p) {
        b.stream(required(p, "input"), Consumed.with(STR, STR))
                .filter((key, value) -> Long.parseLong(value) >= 0)
                .mapValues(value -> Long.parseLong(value))
                .to(required(p, "output"), Produced.with(STR, Serdes.Long()));
    }

    /**
     * bench/latency.py's keyed topology: the String value parsed into a Long, the maximum per key
     * (a reduce over store "latest": one state read and write and one output per record; the
     * output value is a produce time, so the latency of a stateful step can be read off it).
     */
    static void latencyMax(StreamsBuilder b, Map<String, String> p) {
        b.stream(required(p, "input"), Consumed.with(STR, STR))
                .mapValues(value -> Long.parseLong(value))
                .groupByKey(Grouped.with(STR, Serdes.Long()))
                .reduce(Math::max, longStore("latest"))
                .toStream()
                .to(required(p, "output"), Produced.with(STR, Serdes.Long()));
    }

    /**
     * bench/latency.py's keyed count: records counted per key (store "counts"); the benchmark
     * takes a latency from its producer's log (the update (k, n) answers the n-th record of k).
     */
    static void latencyCount(StreamsBuilder b, Map<String, String> p) {
        b.stream(required(p, "input"), Consumed.with(STR, STR))
                .groupByKey(Grouped.with(STR, STR))
                .count(longStore("counts"))
                .toStream()
                .to(required(p, "output"), Produced.with(STR, Serdes.Long()));
    }

    /** Users' regions joined with their scores (two tables), then scores summed per region. */
    static void tableJoinRegroup(StreamsBuilder b, Map<String, String> p) {
        KTable<String, String> regions = b.table(required(p, "left"), Consumed.with(STR, STR));
        KTable<String, String> scores = b.table(required(p, "right"), Consumed.with(STR, STR));
        regions.join(scores, (region, score) -> region + ":" + score)
                .groupBy(
                        (user, v) -> KeyValue.pair(v.split(":")[0], Long.parseLong(v.split(":")[1])),
                        Grouped.with("by-region", STR, Serdes.Long()))
                .aggregate(() -> 0L, (k, v, agg) -> agg + v, (k, v, agg) -> agg - v, longStore("region-scores"))
                .toStream()
                .to(required(p, "output"), Produced.with(STR, Serdes.Long()));
    }

    /**
     * Three sub-topologies: events counted per user (keys "uNN"); the counts re-keyed by group
     * "g" + NN % 4 and reduced to each group's maximum; those re-keyed to "all" and reduced to the
     * overall maximum.
     */
    static void threeLevel(StreamsBuilder b, Map<String, String> p) {
        b.stream(required(p, "input"), Consumed.with(STR, STR))
                .groupByKey(Grouped.with(STR, STR))
                .count(Materialized.as("per-user"))
                .toStream()
                .map((user, n) -> KeyValue.pair("g" + Integer.parseInt(user.substring(1)) % 4, n))
                .groupByKey(Grouped.with("by-group", STR, Serdes.Long()))
                .reduce(Math::max, longStore("group-max"))
                .toStream()
                .map((group, m) -> KeyValue.pair("all", m))
                .groupByKey(Grouped.with("all", STR, Serdes.Long()))
                .reduce(Math::max, longStore("all-max"))
                .toStream()
                .to(required(p, "output"), Produced.with(STR, Serdes.Long()));
    }

    /**
     * Join, re-key, reduce on the flights: flights with a tail number re-keyed by it and joined
     * with the planes (as flights-planes), re-keyed by carrier and the planes' seats summed per
     * carrier (a plane without a seat count adds 0): three sub-topologies.
     */
    static void flightsCarrierSeats(StreamsBuilder b, Map<String, String> p) {
        KTable<String, String> planes = b.table(required(p, "planes"), Consumed.with(STR, STR));
        b.stream(required(p, "flights"), Consumed.with(STR, STR))
                .filter((k, v) -> v != null && field(v, "tailnum") != null)
                .selectKey((k, v) -> field(v, "tailnum"))
                .join(planes, (f, pl) -> field(f, "carrier") + ":" + parse(pl).path("seats").asLong(0), Joined.with(STR, STR, STR))
                .map((tail, v) -> KeyValue.pair(v.split(":")[0], Long.parseLong(v.split(":")[1])))
                .groupByKey(Grouped.with("by-carrier", STR, Serdes.Long()))
                .reduce(Long::sum, longStore("carrier-seats"))
                .toStream()
                .to(required(p, "output"), Produced.with(STR, Serdes.Long()));
    }

    /**
     * Final counts per user and tumbling window (size_ms, grace_ms, suppressed until the window
     * closes), those above 1 re-keyed by user and joined with the users' regions: value
     * "region:count@windowStart". The regions table is versioned (store "regions-store",
     * history_ms), so a final count looks its user's region up as of the window's last record.
     */
    static void processorPunctuation(StreamsBuilder b, Map<String, String> p) {
        long streamMs = Long.parseLong(required(p, "stream_ms"));
        long wallMs = Long.parseLong(required(p, "wall_ms"));
        b.addStateStore(
                Stores.keyValueStoreBuilder(
                        Stores.persistentKeyValueStore("counts"), STR, Serdes.Long()));
        b.stream(required(p, "input"), Consumed.with(STR, STR))
                .process(() -> new CountingProcessor(streamMs, wallMs), "counts")
                .to(required(p, "output"), Produced.with(STR, STR));
    }

    /**
     * Counts records per key in store "counts" and forwards "count"; every stream_ms of stream
     * time forwards (key, "st:count") for every key of the store, every wall_ms of wall-clock
     * time ("total", "wall:sum") when the sum is not 0.
     */
    static final class CountingProcessor
            implements org.apache.kafka.streams.processor.api.Processor<String, String, String, String> {
        private final long streamMs;
        private final long wallMs;
        private org.apache.kafka.streams.processor.api.ProcessorContext<String, String> context;
        private KeyValueStore<String, Long> store;

        CountingProcessor(long streamMs, long wallMs) {
            this.streamMs = streamMs;
            this.wallMs = wallMs;
        }

        @Override
        public void init(org.apache.kafka.streams.processor.api.ProcessorContext<String, String> ctx) {
            context = ctx;
            store = ctx.getStateStore("counts");
            ctx.schedule(
                    Duration.ofMillis(streamMs),
                    org.apache.kafka.streams.processor.PunctuationType.STREAM_TIME,
                    ts -> {
                        try (var it = store.all()) {
                            while (it.hasNext()) {
                                var kv = it.next();
                                context.forward(
                                        new org.apache.kafka.streams.processor.api.Record<>(
                                                kv.key, "st:" + kv.value, ts));
                            }
                        }
                    });
            ctx.schedule(
                    Duration.ofMillis(wallMs),
                    org.apache.kafka.streams.processor.PunctuationType.WALL_CLOCK_TIME,
                    ts -> {
                        long total = 0;
                        try (var it = store.all()) {
                            while (it.hasNext()) {
                                total += it.next().value;
                            }
                        }
                        if (total != 0) {
                            context.forward(
                                    new org.apache.kafka.streams.processor.api.Record<>(
                                            "total", "wall:" + total, ts));
                        }
                    });
        }

        @Override
        public void process(org.apache.kafka.streams.processor.api.Record<String, String> record) {
            Long old = store.get(record.key());
            long n = (old == null ? 0 : old) + 1;
            store.put(record.key(), n);
            context.forward(record.withValue(String.valueOf(n)));
        }
    }

    static void windowedFilterJoin(StreamsBuilder b, Map<String, String> p) {
        long historyMs = Long.parseLong(p.getOrDefault("history_ms", "86400000"));
        KTable<String, String> regions =
                b.table(
                        required(p, "table"),
                        Consumed.with(STR, STR),
                        versioned("regions-store", Duration.ofMillis(historyMs)));
        KTable<Windowed<String>, Long> counts =
                windowed(b.stream(required(p, "input"), Consumed.with(STR, STR)).groupByKey(), p)
                        .count(windowStore("count-store", p, Serdes.Long()));
        counts.suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()))
                .toStream()
                .filter((wk, n) -> n > 1)
                .map((wk, n) -> KeyValue.pair(wk.key(), n + "@" + wk.window().start()))
                .join(regions, (n, region) -> region + ":" + n, Joined.with(STR, STR, STR))
                .to(required(p, "output"), Produced.with(STR, STR));
    }

    static Materialized<String, Long, KeyValueStore<Bytes, byte[]>> longStore(String name) {
        return Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as(name)
                .withKeySerde(STR)
                .withValueSerde(Serdes.Long());
    }

    /** Sum of the tasks' dropped-records-total metrics, written to path as a JSON object. */
    static void writeMetrics(KafkaStreams streams, String path) {
        double dropped = 0;
        for (Map.Entry<MetricName, ? extends Metric> e : streams.metrics().entrySet()) {
            MetricName name = e.getKey();
            if (name.name().equals("dropped-records-total") && name.group().equals("stream-task-metrics")) {
                Object v = e.getValue().metricValue();
                if (v instanceof Number n) {
                    dropped += n.doubleValue();
                }
            }
        }
        try {
            Files.writeString(
                    Path.of(path),
                    "{\"dropped-records-total\": " + (long) dropped + "}\n",
                    StandardCharsets.UTF_8);
        } catch (IOException e) {
            System.err.println("streamtable-reference: could not write metrics: " + e);
        }
    }

    static Materialized<String, String, KeyValueStore<Bytes, byte[]>> versioned(String name, Duration history) {
        return Materialized.<String, String>as(Stores.persistentVersionedKeyValueStore(name, history))
                .withKeySerde(STR)
                .withValueSerde(STR);
    }

    /** A top-level string field of a JSON object, or null when absent, null or not text. */
    static String field(String json, String name) {
        JsonNode node = parse(json).get(name);
        return node == null || !node.isTextual() ? null : node.asText();
    }

    static String pair(String k1, String json1, String k2, String json2) {
        ObjectNode out = JSON.createObjectNode();
        out.set(k1, parse(json1));
        out.set(k2, parse(json2));
        return out.toString();
    }

    static JsonNode parse(String json) {
        try {
            return JSON.readTree(json);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    static String kind(Map<String, String> p, String... allowed) {
        String kind = p.getOrDefault("kind", "inner");
        for (String a : allowed) {
            if (a.equals(kind)) {
                return kind;
            }
        }
        throw new IllegalArgumentException("unsupported kind=" + kind);
    }

    static String required(Map<String, String> m, String key) {
        return required(m, key, "param ");
    }

    static String required(Map<String, String> m, String key, String what) {
        String v = m.get(key);
        if (v == null) {
            throw new IllegalArgumentException("missing " + what + key);
        }
        return v;
    }
}

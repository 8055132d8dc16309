// A long-running Java producer for the KIP-368 re-authentication tests (tests/interop/test_reauth.py,
// test_upstream_reauth.py), run with Kafka's own kafka-clients jar.
//
//   java ReauthProducer produce <client.properties> <topic> <seconds> <records-per-second> [consume]
//       Creates the topic (3 partitions) if needed, then sends keyed records ("rk-<i>", value derived
//       from the key) at a steady rate for <seconds>, with a small linger, so that every connection
//       the producer keeps is in use all the time and must re-authenticate before its session ends.
//       Counts failed sends (callback exceptions) and prints a one-line JSON summary with the
//       producer's own connection and authentication metrics. Exit 0 only if no send failed.
//       With `consume`, a consumer (assigned all partitions, no group) reads the topic at the same
//       time, so its Fetch requests, which the broker parks for up to fetch.max.wait.ms, are in
//       flight when it re-authenticates; it must read every record exactly once with the right
//       value (within 60 s after the last send), and its metrics join the summary.
//
//   java ReauthProducer verify <client.properties> <topic> <records>
//       Reads the topic from the beginning of every partition (no consumer group) and checks that
//       keys rk-0 .. rk-<records-1> each arrive exactly once with the right value and nothing else.
//       Prints a one-line JSON summary. Exit 0 only if everything matched.
//
// The client properties carry bootstrap.servers and the SASL settings; everything else is set here.

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class ReauthProducer {
    /** Producer metrics reported in the summary (group producer-metrics). */
    private static final List<String> REPORTED_METRICS = List.of(
            "connection-creation-total", "connection-close-total",
            "successful-authentication-total", "failed-authentication-total",
            "successful-reauthentication-total", "failed-reauthentication-total",
            "record-error-total", "record-retry-total", "record-send-total");

    public static void main(String[] args) throws Exception {
        if (args.length < 4) {
            usage();
        }
        Properties base = new Properties();
        try (var in = java.nio.file.Files.newInputStream(java.nio.file.Path.of(args[1]))) {
            base.load(in);
        }
        switch (args[0]) {
            case "produce" -> {
                if (args.length != 5 && !(args.length == 6 && args[5].equals("consume"))) {
                    usage();
                }
                System.exit(produce(base, args[2], Integer.parseInt(args[3]), Integer.parseInt(args[4]),
                        args.length == 6));
            }
            case "verify" -> System.exit(verify(base, args[2], Integer.parseInt(args[3])));
            default -> usage();
        }
    }

    private static void usage() {
        System.err.println("usage: ReauthProducer produce <props> <topic> <seconds> <records-per-second> [consume]");
        System.err.println("       ReauthProducer verify <props> <topic> <records>");
        System.exit(2);
    }

    /** The value for a key: a digest, so a value delivered under the wrong key is detected. */
    static String valueFor(String key) throws Exception {
        byte[] d = MessageDigest.getInstance("SHA-256").digest(key.getBytes(StandardCharsets.UTF_8));
        return key + ":" + HexFormat.of().formatHex(d);
    }

    static void createTopic(Properties base, String topic) throws Exception {
        try (Admin admin = Admin.create(base)) {
            admin.createTopics(List.of(new NewTopic(topic, 3, (short) 1))).all().get(60, TimeUnit.SECONDS);
        } catch (ExecutionException e) {
            if (!(e.getCause() instanceof TopicExistsException)) {
                throw e;
            }
        }
        // A created topic is not yet served: wait until every partition answers ListOffsets (the
        // consumer retries NOT_LEADER_OR_FOLLOWER until then), so the timed run starts on a ready topic.
        Properties cp = new Properties();
        cp.putAll(base);
        cp.put("key.deserializer", StringDeserializer.class.getName());
        cp.put("value.deserializer", StringDeserializer.class.getName());
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp)) {
            List<TopicPartition> parts = new ArrayList<>();
            for (PartitionInfo p : consumer.partitionsFor(topic, Duration.ofSeconds(60))) {
                parts.add(new TopicPartition(topic, p.partition()));
            }
            consumer.endOffsets(parts, Duration.ofSeconds(60));
        }
    }

    /** A consumer reading the whole topic while the producer writes it. */
    static final class ConcurrentConsumer implements Runnable {
        private final Properties props;
        private final String topic;
        final Set<String> seen = new HashSet<>();
        int duplicates;
        int badValues;
        volatile long target = Long.MAX_VALUE;
        volatile String error = "";
        final Map<String, Double> metrics = new TreeMap<>();

        ConcurrentConsumer(Properties base, String topic) {
            props = new Properties();
            props.putAll(base);
            props.put("key.deserializer", StringDeserializer.class.getName());
            props.put("value.deserializer", StringDeserializer.class.getName());
            props.put("enable.auto.commit", "false");
            this.topic = topic;
        }

        @Override
        public void run() {
            try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
                List<TopicPartition> parts = new ArrayList<>();
                for (PartitionInfo p : consumer.partitionsFor(topic, Duration.ofSeconds(60))) {
                    parts.add(new TopicPartition(topic, p.partition()));
                }
                consumer.assign(parts);
                consumer.seekToBeginning(parts);
                long deadline = Long.MAX_VALUE;
                while (seen.size() < target && System.nanoTime() < deadline) {
                    for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                        if (!seen.add(String.valueOf(r.key()))) {
                            duplicates++;
                        }
                        if (r.key() == null || !valueFor(r.key()).equals(r.value())) {
                            badValues++;
                        }
                    }
                    if (target != Long.MAX_VALUE && deadline == Long.MAX_VALUE) {
                        deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
                    }
                }
                collect(consumer.metrics(), "consumer-metrics", metrics);
            } catch (Exception e) {
                error = e.toString();
            }
        }
    }

    static void collect(Map<MetricName, ? extends Metric> all, String group, Map<String, Double> into) {
        for (Map.Entry<MetricName, ? extends Metric> m : all.entrySet()) {
            MetricName n = m.getKey();
            if (n.group().equals(group) && REPORTED_METRICS.contains(n.name())) {
                Object v = m.getValue().metricValue();
                if (v instanceof Double d) {
                    into.put(n.name(), d);
                }
            }
        }
    }

    static String json(Map<String, Double> metrics) {
        StringBuilder m = new StringBuilder("{");
        for (Map.Entry<String, Double> e : metrics.entrySet()) {
            if (m.length() > 1) {
                m.append(',');
            }
            m.append('"').append(e.getKey()).append("\":").append(e.getValue().longValue());
        }
        return m.append('}').toString();
    }

    static int produce(Properties base, String topic, int seconds, int rate, boolean consume) throws Exception {
        createTopic(base, topic);
        ConcurrentConsumer consumer = consume ? new ConcurrentConsumer(base, topic) : null;
        Thread consumerThread = null;
        if (consumer != null) {
            consumerThread = new Thread(consumer, "concurrent-consumer");
            consumerThread.start();
        }
        Properties pp = new Properties();
        pp.putAll(base);
        pp.put("acks", "all");
        pp.put("linger.ms", "5");
        pp.put("key.serializer", StringSerializer.class.getName());
        pp.put("value.serializer", StringSerializer.class.getName());
        AtomicLong acked = new AtomicLong();
        AtomicLong failed = new AtomicLong();
        AtomicReference<String> firstError = new AtomicReference<>("");
        long sent = 0;
        Map<String, Double> metrics = new TreeMap<>();
        long start = System.nanoTime();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(pp)) {
            long end = start + TimeUnit.SECONDS.toNanos(seconds);
            long intervalNanos = TimeUnit.SECONDS.toNanos(1) / rate;
            long next = start;
            while (System.nanoTime() < end) {
                String key = "rk-" + sent;
                producer.send(new ProducerRecord<>(topic, key, valueFor(key)), (md, e) -> {
                    if (e == null) {
                        acked.incrementAndGet();
                    } else {
                        failed.incrementAndGet();
                        firstError.compareAndSet("", e.toString());
                    }
                });
                sent++;
                next += intervalNanos;
                long sleep = next - System.nanoTime();
                if (sleep > 0) {
                    TimeUnit.NANOSECONDS.sleep(sleep);
                }
            }
            producer.flush();
            collect(producer.metrics(), "producer-metrics", metrics);
        }
        long elapsedMs = (System.nanoTime() - start) / 1_000_000;
        boolean ok = failed.get() == 0 && acked.get() == sent;
        String consumed = "null";
        if (consumer != null) {
            consumer.target = sent;
            consumerThread.join(TimeUnit.SECONDS.toMillis(90));
            boolean consumedOk = !consumerThread.isAlive() && consumer.error.isEmpty()
                    && consumer.seen.size() == sent && consumer.duplicates == 0 && consumer.badValues == 0;
            ok &= consumedOk;
            consumed = String.format("{\"ok\":%s,\"distinct\":%d,\"duplicates\":%d,\"bad_values\":%d,"
                            + "\"error\":\"%s\",\"client_metrics\":%s}",
                    consumedOk, consumer.seen.size(), consumer.duplicates, consumer.badValues,
                    consumer.error.replace("\"", "'"), json(consumer.metrics));
        }
        System.out.printf("{\"ok\":%s,\"sent\":%d,\"acked\":%d,\"failed\":%d,\"first_error\":\"%s\","
                        + "\"elapsed_ms\":%d,\"client_metrics\":%s,\"consumer\":%s}%n",
                ok, sent, acked.get(), failed.get(), firstError.get().replace("\"", "'"), elapsedMs,
                json(metrics), consumed);
        return ok ? 0 : 1;
    }

    static int verify(Properties base, String topic, int n) throws Exception {
        Properties cp = new Properties();
        cp.putAll(base);
        cp.put("key.deserializer", StringDeserializer.class.getName());
        cp.put("value.deserializer", StringDeserializer.class.getName());
        cp.put("enable.auto.commit", "false");
        Set<String> seen = new HashSet<>();
        int duplicates = 0;
        int badValues = 0;
        int unexpected = 0;
        long records = 0;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp)) {
            List<TopicPartition> parts = new ArrayList<>();
            for (PartitionInfo p : consumer.partitionsFor(topic, Duration.ofSeconds(60))) {
                parts.add(new TopicPartition(topic, p.partition()));
            }
            consumer.assign(parts);
            consumer.seekToBeginning(parts);
            Map<TopicPartition, Long> endOffsets = consumer.endOffsets(parts, Duration.ofSeconds(60));
            long total = endOffsets.values().stream().mapToLong(Long::longValue).sum();
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(90);
            while (records < total && System.nanoTime() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    records++;
                    String key = r.key();
                    if (key == null || !key.startsWith("rk-")) {
                        unexpected++;
                        continue;
                    }
                    int i;
                    try {
                        i = Integer.parseInt(key.substring(3));
                    } catch (NumberFormatException e) {
                        unexpected++;
                        continue;
                    }
                    if (i < 0 || i >= n) {
                        unexpected++;
                    }
                    if (!seen.add(key)) {
                        duplicates++;
                    }
                    if (!valueFor(key).equals(r.value())) {
                        badValues++;
                    }
                }
            }
        }
        boolean ok = seen.size() == n && duplicates == 0 && badValues == 0 && unexpected == 0;
        System.out.printf("{\"ok\":%s,\"expected\":%d,\"records\":%d,\"distinct\":%d,\"duplicates\":%d,"
                        + "\"bad_values\":%d,\"unexpected\":%d}%n",
                ok, n, records, seen.size(), duplicates, badValues, unexpected);
        return ok ? 0 : 1;
    }
}

// Java-client checks for Portcullis' interop tests, run with Kafka's own kafka-clients jar.
//
//   java RoundTrip roundtrip <client.properties> <topic> <records> <group> <classic|consumer>
//       Creates the topic (3 partitions), produces <records> keyed records with values derived from
//       their keys, consumes them back with a consumer group, checks every value and that each key
//       arrives exactly once, commits offsets, and reads the committed offsets back with
//       Admin.listConsumerGroupOffsets: they must equal each partition's end offset. Prints a one-line
//       JSON summary. Exit 0 only if everything matched.
//
//   java RoundTrip expect-auth-failure <client.properties>
//       Exit 0 only if a describeCluster fails with SaslAuthenticationException (a wrong password or
//       an unknown user must be refused, not time out or succeed).
//
// The client properties carry bootstrap.servers and the SASL settings; everything else is set here.

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.SaslAuthenticationException;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class RoundTrip {
    private static final Duration CONSUME_TIMEOUT = Duration.ofSeconds(90);

    public static void main(String[] args) throws Exception {
        if (args.length < 2) {
            usage();
        }
        Properties base = new Properties();
        try (var in = java.nio.file.Files.newInputStream(java.nio.file.Path.of(args[1]))) {
            base.load(in);
        }
        switch (args[0]) {
            case "roundtrip" -> {
                if (args.length != 6) {
                    usage();
                }
                System.exit(roundTrip(base, args[2], Integer.parseInt(args[3]), args[4], args[5]));
            }
            case "expect-auth-failure" -> System.exit(expectAuthFailure(base));
            default -> usage();
        }
    }

    private static void usage() {
        System.err.println("usage: RoundTrip roundtrip <props> <topic> <records> <group> <classic|consumer>");
        System.err.println("       RoundTrip expect-auth-failure <props>");
        System.exit(2);
    }

    /** The value for a key: a digest, so a value delivered under the wrong key is detected. */
    static String valueFor(String key) throws Exception {
        byte[] d = MessageDigest.getInstance("SHA-256").digest(key.getBytes(StandardCharsets.UTF_8));
        return key + ":" + HexFormat.of().formatHex(d) + ":" + "x".repeat(20);
    }

    static int roundTrip(Properties base, String topic, int n, String group, String groupProtocol)
            throws Exception {
        long t0 = System.nanoTime();
        try (Admin admin = Admin.create(base)) {
            try {
                admin.createTopics(List.of(new NewTopic(topic, 3, (short) 1))).all().get(30, TimeUnit.SECONDS);
            } catch (ExecutionException e) {
                if (!(e.getCause() instanceof TopicExistsException)) {
                    throw e;
                }
            }
        }

        Properties pp = new Properties();
        pp.putAll(base);
        pp.put("acks", "all");
        pp.put("linger.ms", "5");
        pp.put("key.serializer", StringSerializer.class.getName());
        pp.put("value.serializer", StringSerializer.class.getName());
        Map<TopicPartition, Long> produced = new HashMap<>();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(pp)) {
            List<Future<RecordMetadata>> sends = new ArrayList<>(n);
            for (int i = 0; i < n; i++) {
                String key = "key-" + i;
                sends.add(producer.send(new ProducerRecord<>(topic, key, valueFor(key))));
            }
            producer.flush();
            for (Future<RecordMetadata> f : sends) {
                RecordMetadata md = f.get(60, TimeUnit.SECONDS);
                produced.merge(new TopicPartition(md.topic(), md.partition()), 1L, Long::sum);
            }
        }
        long t1 = System.nanoTime();

        Properties cp = new Properties();
        cp.putAll(base);
        cp.put("group.id", group);
        cp.put("group.protocol", groupProtocol);
        cp.put("auto.offset.reset", "earliest");
        cp.put("enable.auto.commit", "false");
        cp.put("key.deserializer", StringDeserializer.class.getName());
        cp.put("value.deserializer", StringDeserializer.class.getName());
        Set<String> seen = new HashSet<>();
        int duplicates = 0;
        int badValues = 0;
        Map<TopicPartition, Long> endOffsets;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp)) {
            consumer.subscribe(List.of(topic));
            long deadline = System.nanoTime() + CONSUME_TIMEOUT.toNanos();
            while (seen.size() < n && System.nanoTime() < deadline) {
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(500));
                for (ConsumerRecord<String, String> r : records) {
                    if (!seen.add(r.key())) {
                        duplicates++;
                    }
                    if (r.key() == null || !valueFor(r.key()).equals(r.value())) {
                        badValues++;
                    }
                }
                if (!records.isEmpty()) {
                    consumer.commitSync(Duration.ofSeconds(30));
                }
            }
            consumer.commitSync(Duration.ofSeconds(30));
            endOffsets = consumer.endOffsets(consumer.assignment(), Duration.ofSeconds(30));
        }
        long t2 = System.nanoTime();

        // Read the commits back through a fresh Admin connection: this needs FindCoordinator(GROUP)
        // and OffsetFetch to reach the group coordinator through the gateway's rewritten address.
        Map<TopicPartition, OffsetAndMetadata> committed;
        try (Admin admin = Admin.create(base)) {
            committed = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata()
                    .get(60, TimeUnit.SECONDS);
        }
        long committedTotal = 0;
        List<String> offsetMismatches = new ArrayList<>();
        for (Map.Entry<TopicPartition, Long> e : endOffsets.entrySet()) {
            OffsetAndMetadata c = committed.get(e.getKey());
            long got = c == null ? -1 : c.offset();
            committedTotal += Math.max(got, 0);
            if (got != e.getValue()) {
                offsetMismatches.add(e.getKey() + " committed=" + got + " end=" + e.getValue());
            }
        }
        long producedTotal = produced.values().stream().mapToLong(Long::longValue).sum();
        boolean ok = seen.size() == n && duplicates == 0 && badValues == 0 && producedTotal == n
                && offsetMismatches.isEmpty() && committedTotal == n && endOffsets.size() == 3;
        System.out.printf(
                "{\"ok\":%s,\"records\":%d,\"produced\":%d,\"consumed_distinct\":%d,\"duplicates\":%d,"
                        + "\"bad_values\":%d,\"partitions\":%d,\"committed_total\":%d,"
                        + "\"offset_mismatches\":\"%s\",\"produce_ms\":%d,\"consume_ms\":%d}%n",
                ok, n, producedTotal, seen.size(), duplicates, badValues, endOffsets.size(), committedTotal,
                String.join("; ", offsetMismatches), (t1 - t0) / 1_000_000, (t2 - t1) / 1_000_000);
        return ok ? 0 : 1;
    }

    static int expectAuthFailure(Properties base) throws Exception {
        Properties p = new Properties();
        p.putAll(base);
        p.put("default.api.timeout.ms", "20000");
        p.put("request.timeout.ms", "15000");
        try (Admin admin = Admin.create(p)) {
            String id = admin.describeCluster().clusterId().get(30, TimeUnit.SECONDS);
            System.out.println("UNEXPECTED: authenticated, cluster id " + id);
            return 1;
        } catch (ExecutionException e) {
            if (e.getCause() instanceof SaslAuthenticationException) {
                System.out.println("SaslAuthenticationException: " + e.getCause().getMessage());
                return 0;
            }
            System.out.println("UNEXPECTED: " + e.getCause());
            return 1;
        } catch (java.util.concurrent.TimeoutException e) {
            System.out.println("UNEXPECTED: timed out without an authentication error");
            return 1;
        }
    }
}

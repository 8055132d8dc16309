import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Locale;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;

import org.HdrHistogram.Histogram;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourceType;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * The pieces of scripts/bench-datapath.sh that Kafka's own tools do not cover, on Kafka's own
 * client library:
 *
 * <pre>
 *   topic-create BOOTSTRAP CONFIG NAME PARTITIONS
 *   topic-delete BOOTSTRAP CONFIG NAME...
 *   acls         BOOTSTRAP CONFIG PRINCIPAL TOPIC_PREFIX GROUP_PREFIX...
 *   latency      BOOTSTRAP CONFIG TOPIC RATE SECONDS WARMUP_SECONDS RECORD_SIZE ACKS
 * </pre>
 *
 * <p>{@code latency} is an open-loop probe: a producer sends RATE records per second (on a fixed
 * schedule, not waiting for earlier records) while a consumer assigned to the topic's partitions
 * reads them; each record carries its send time (System.nanoTime, same process), so the
 * end-to-end latency is measured in microseconds, which EndToEndLatency (closed loop, whole
 * milliseconds in its percentiles) cannot show. Prints one JSON object; exits 1 if a send failed
 * or a record never arrived.
 */
public final class DatapathTool {
    private DatapathTool() {}

    public static void main(String[] args) throws Exception {
        if (args.length < 3) {
            usage();
        }
        Properties props = load(args[1], args[2]);
        switch (args[0]) {
            case "topic-create" -> topicCreate(props, args[3], Integer.parseInt(args[4]));
            case "topic-delete" -> topicDelete(props, List.of(args).subList(3, args.length));
            case "acls" -> acls(props, args[3], args[4], List.of(args).subList(5, args.length));
            case "latency" -> System.exit(latency(props, args[3], Integer.parseInt(args[4]),
                    Integer.parseInt(args[5]), Integer.parseInt(args[6]), Integer.parseInt(args[7]),
                    args[8]));
            default -> usage();
        }
    }

    private static void usage() {
        System.err.println("usage: DatapathTool topic-create|topic-delete|acls|latency BOOTSTRAP CONFIG ...");
        System.exit(2);
    }

    private static Properties load(String bootstrap, String config) throws IOException {
        Properties p = new Properties();
        try (InputStream in = new FileInputStream(config)) {
            p.load(in);
        }
        p.put("bootstrap.servers", bootstrap);
        return p;
    }

    private static void topicCreate(Properties props, String name, int partitions) throws Exception {
        try (Admin admin = Admin.create(props)) {
            admin.createTopics(List.of(new NewTopic(name, partitions, (short) 1))).all().get(60, TimeUnit.SECONDS);
        } catch (ExecutionException e) {
            if (!(e.getCause() instanceof TopicExistsException)) {
                throw e;
            }
        }
    }

    private static void topicDelete(Properties props, List<String> names) throws Exception {
        try (Admin admin = Admin.create(props)) {
            admin.deleteTopics(names).all().get(60, TimeUnit.SECONDS);
        } catch (ExecutionException e) {
            if (!(e.getCause() instanceof UnknownTopicOrPartitionException)) {
                throw e;
            }
        }
    }

    /** What the benchmark clients need, and nothing more: prefixed topic and group ACLs. */
    private static void acls(Properties props, String principal, String topicPrefix, List<String> groupPrefixes)
            throws Exception {
        List<AclBinding> bindings = new ArrayList<>();
        for (AclOperation op : List.of(AclOperation.WRITE, AclOperation.READ, AclOperation.DESCRIBE)) {
            bindings.add(new AclBinding(new ResourcePattern(ResourceType.TOPIC, topicPrefix, PatternType.PREFIXED),
                    new AccessControlEntry(principal, "*", op, AclPermissionType.ALLOW)));
        }
        for (String group : groupPrefixes) {
            bindings.add(new AclBinding(new ResourcePattern(ResourceType.GROUP, group, PatternType.PREFIXED),
                    new AccessControlEntry(principal, "*", AclOperation.READ, AclPermissionType.ALLOW)));
        }
        try (Admin admin = Admin.create(props)) {
            admin.createAcls(bindings).all().get(60, TimeUnit.SECONDS);
        }
    }

    private static int latency(Properties base, String topic, int rate, int seconds, int warmupSeconds,
            int recordSize, String acks) throws Exception {
        Properties pp = new Properties();
        pp.putAll(base);
        pp.put(ProducerConfig.ACKS_CONFIG, acks);
        pp.put(ProducerConfig.LINGER_MS_CONFIG, "0");
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        Properties cp = new Properties();
        cp.putAll(base);
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());

        long total = (long) rate * (seconds + warmupSeconds);
        long warmup = (long) rate * warmupSeconds;
        Histogram e2e = new Histogram(TimeUnit.SECONDS.toNanos(60), 3);
        Histogram ack = new Histogram(TimeUnit.SECONDS.toNanos(60), 3);
        AtomicLong sendErrors = new AtomicLong();
        AtomicLong late = new AtomicLong();
        long received = 0;
        long duplicates = 0;
        boolean[] seen = new boolean[(int) total];
        String firstError = null;

        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(cp);
                KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(pp)) {
            List<TopicPartition> parts = new ArrayList<>();
            consumer.partitionsFor(topic, Duration.ofSeconds(30)).forEach(p -> parts.add(new TopicPartition(topic, p.partition())));
            Collections.sort(parts, (a, b) -> Integer.compare(a.partition(), b.partition()));
            consumer.assign(parts);
            consumer.seekToEnd(parts);
            for (TopicPartition p : parts) {
                consumer.position(p, Duration.ofSeconds(30));
            }
            // Connect the producer before the clock starts.
            producer.partitionsFor(topic);

            Thread sender = new Thread(() -> {
                long period = TimeUnit.SECONDS.toNanos(1) / rate;
                long start = System.nanoTime();
                for (long i = 0; i < total; i++) {
                    long due = start + i * period;
                    long now;
                    while ((now = System.nanoTime()) < due) {
                        LockSupport.parkNanos(due - now);
                    }
                    if (now - due > period) {
                        late.incrementAndGet();
                    }
                    byte[] value = new byte[Math.max(recordSize, 16)];
                    ByteBuffer.wrap(value).putLong(i).putLong(System.nanoTime());
                    final long seq = i;
                    final long sentAt = System.nanoTime();
                    producer.send(new ProducerRecord<>(topic, value), (md, ex) -> {
                        if (ex != null) {
                            if (sendErrors.getAndIncrement() == 0) {
                                System.err.println("send failed: " + ex);
                            }
                        } else if (seq >= warmup) {
                            synchronized (ack) {
                                ack.recordValue(Math.max(0, System.nanoTime() - sentAt));
                            }
                        }
                    });
                }
                producer.flush();
            }, "sender");
            sender.start();

            long deadline = Long.MAX_VALUE;
            while (received < total && System.nanoTime() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(100))) {
                    long now = System.nanoTime();
                    ByteBuffer b = ByteBuffer.wrap(r.value());
                    long seq = b.getLong();
                    long sentAt = b.getLong();
                    if (seq < 0 || seq >= total) {
                        firstError = firstError == null ? "record with sequence " + seq : firstError;
                        continue;
                    }
                    if (seen[(int) seq]) {
                        duplicates++;
                        continue;
                    }
                    seen[(int) seq] = true;
                    received++;
                    if (seq >= warmup) {
                        e2e.recordValue(Math.max(0, now - sentAt));
                    }
                }
                if (!sender.isAlive() && deadline == Long.MAX_VALUE) {
                    deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(15);
                }
            }
            sender.join();
        }
        long missing = total - received;
        boolean ok = sendErrors.get() == 0 && missing == 0 && firstError == null;
        System.out.println(String.format(Locale.ROOT,
                "{\"sent\":%d,\"received\":%d,\"missing\":%d,\"duplicates\":%d,\"send_errors\":%d,\"late_sends\":%d,"
                        + "\"measured\":%d,\"rate\":%d,\"record_size\":%d,\"acks\":\"%s\","
                        + "\"e2e_us\":{\"p50\":%.1f,\"p90\":%.1f,\"p99\":%.1f,\"p999\":%.1f,\"max\":%.1f,\"mean\":%.1f},"
                        + "\"ack_us\":{\"p50\":%.1f,\"p99\":%.1f,\"max\":%.1f},\"ok\":%b%s}",
                total, received, missing, duplicates, sendErrors.get(), late.get(), e2e.getTotalCount(), rate,
                recordSize, acks, us(e2e, 50), us(e2e, 90), us(e2e, 99), us(e2e, 99.9), e2e.getMaxValue() / 1e3,
                e2e.getMean() / 1e3, us(ack, 50), us(ack, 99), ack.getMaxValue() / 1e3, ok,
                firstError == null ? "" : ",\"error\":\"" + firstError.replace("\"", "'") + "\""));
        return ok ? 0 : 1;
    }

    private static double us(Histogram h, double percentile) {
        return h.getValueAtPercentile(percentile) / 1e3;
    }
}

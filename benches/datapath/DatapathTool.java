import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Properties;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicIntegerArray;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;

import org.HdrHistogram.Histogram;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.PartitionInfo;
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
 *   produce-many BOOTSTRAP CONFIG TOPIC CLIENTS RECORDS RECORD_SIZE BATCH_SIZE ACKS
 *   consume-many BOOTSTRAP CONFIG TOPIC CLIENTS RECORDS GROUP TIMEOUT_MS
 * </pre>
 *
 * <p>{@code latency} is an open-loop probe: a producer sends RATE records per second (on a fixed
 * schedule, not waiting for earlier records) while a consumer assigned to the topic's partitions
 * reads them; each record carries its send time (System.nanoTime, same process), so the
 * end-to-end latency is measured in microseconds, which EndToEndLatency (closed loop, whole
 * milliseconds in its percentiles) cannot show. Prints one JSON object; exits 1 if a send failed
 * or a record never arrived.
 *
 * <p>{@code produce-many} and {@code consume-many} are ProducerPerformance and
 * ConsumerPerformance with CLIENTS clients, each its own KafkaProducer / KafkaConsumer (so its
 * own connections) on its own thread, measured the way those tools measure one client. Each
 * prints one JSON object; exits 1 on a send error or when fewer records than asked arrived.
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
            case "produce-many" -> System.exit(produceMany(props, args[3], Integer.parseInt(args[4]),
                    Long.parseLong(args[5]), Integer.parseInt(args[6]), Integer.parseInt(args[7]), args[8]));
            case "consume-many" -> System.exit(consumeMany(props, args[3], Integer.parseInt(args[4]),
                    Long.parseLong(args[5]), args[6], Long.parseLong(args[7])));
            default -> usage();
        }
    }

    private static void usage() {
        System.err.println("usage: DatapathTool topic-create|topic-delete|acls|latency|produce-many|consume-many BOOTSTRAP CONFIG ...");
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

    /**
     * CLIENTS producers send RECORDS records of RECORD_SIZE bytes between them (split as evenly
     * as possible), as fast as they can, as ProducerPerformance does with one: the same payload
     * (random letters, regenerated per record, so the client's CPU per record is comparable), no
     * key, linger.ms left at the client's default. Seconds run from the first send of any client
     * to the last acknowledgement; MB is 1024 × 1024 bytes of record values, as in
     * ProducerPerformance.
     */
    private static int produceMany(Properties base, String topic, int clients, long records, int recordSize,
            int batchSize, String acks) throws Exception {
        // Each producer keeps the default buffer pool (32 MiB), as ProducerPerformance's one
        // does; the script gives this JVM a heap for 50 of them (-Xmx3g). A small pool (2.5 MiB
        // each was tried) made a producer's sender spin while sends waited for buffer memory:
        // in one run of three, direct or through Portcullis alike, the client burned both cores
        // for 55 s (client CPU 100+ s/GiB, 26 young GCs: not the heap).
        long bufferMemory = 32L << 20;
        List<KafkaProducer<byte[], byte[]>> producers = new ArrayList<>();
        for (int i = 0; i < clients; i++) {
            Properties pp = new Properties();
            pp.putAll(base);
            pp.put(ProducerConfig.ACKS_CONFIG, acks);
            pp.put(ProducerConfig.BATCH_SIZE_CONFIG, Integer.toString(batchSize));
            pp.put(ProducerConfig.BUFFER_MEMORY_CONFIG, Long.toString(bufferMemory));
            // Distinct ids: one id twice makes the client's JMX registration fail (a WARN with an
            // exception, which the benchmark counts as an error).
            pp.put(ProducerConfig.CLIENT_ID_CONFIG, "perf-producer-client-" + i);
            pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
            pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
            producers.add(new KafkaProducer<>(pp));
        }
        AtomicLong acked = new AtomicLong();
        AtomicLong errors = new AtomicLong();
        AtomicLong firstSend = new AtomicLong(Long.MAX_VALUE);
        AtomicLong lastAck = new AtomicLong(Long.MIN_VALUE);
        CountDownLatch go = new CountDownLatch(1);
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < clients; i++) {
            KafkaProducer<byte[], byte[]> producer = producers.get(i);
            long share = records / clients + (i < records % clients ? 1 : 0);
            Thread t = new Thread(() -> {
                SplittableRandom random = new SplittableRandom(0);
                byte[] payload = new byte[recordSize];
                try {
                    go.await();
                    firstSend.accumulateAndGet(System.nanoTime(), Math::min);
                    for (long n = 0; n < share; n++) {
                        // send() copies the value into a batch before it returns, so the
                        // array can be refilled for the next record (as ProducerPerformance does).
                        for (int j = 0; j < payload.length; j++) {
                            payload[j] = (byte) (random.nextInt(26) + 65);
                        }
                        producer.send(new ProducerRecord<>(topic, payload), (md, ex) -> {
                            if (ex == null) {
                                acked.incrementAndGet();
                                lastAck.accumulateAndGet(System.nanoTime(), Math::max);
                            } else if (errors.getAndIncrement() == 0) {
                                System.err.println("send failed: " + ex);
                            }
                        });
                    }
                } catch (Exception e) {
                    errors.incrementAndGet();
                    System.err.println("producer thread failed: " + e);
                } finally {
                    producer.close(); // sends what is left and waits for its acknowledgements
                }
            }, "producer-" + i);
            threads.add(t);
            t.start();
        }
        go.countDown();
        for (Thread t : threads) {
            t.join();
        }
        long n = acked.get();
        double seconds = n > 0 ? (lastAck.get() - firstSend.get()) / 1e9 : 0;
        System.out.println(String.format(Locale.ROOT,
                "{\"records\":%d,\"errors\":%d,\"seconds\":%.4f,\"mb_per_s\":%.4f,\"msg_per_s\":%.1f,"
                        + "\"clients\":%d,\"buffer_memory\":%d}",
                n, errors.get(), seconds, rate((double) n * recordSize / (1024 * 1024), seconds),
                rate(n, seconds), clients, bufferMemory));
        return errors.get() == 0 && n == records ? 0 : 1;
    }

    /**
     * CLIENTS consumers in group GROUP read TOPIC from the earliest offset until RECORDS records
     * arrived between them, with ConsumerPerformance's consumer settings. As ConsumerPerformance
     * separates the group join (rebalance.time.ms) from the fetch phase (fetch.MB.sec), so does
     * this: every consumer pauses the partitions it is given until each of them holds at least
     * one and together they hold all (the group is stable; with the classic protocol and
     * group.initial.rebalance.delay.ms=0 the members join one after another and the group
     * rebalances several times before). Then all resume; the fetch phase runs from the first
     * record any of them receives to the moment the total reaches RECORDS. MB counts key + value
     * bytes in units of 1024 × 1024, as fetch.MB.sec does. TIMEOUT_MS without progress (the group
     * settling, or a record arriving) ends the run with an error.
     */
    private static int consumeMany(Properties base, String topic, int clients, long records, String group,
            long timeoutMs) throws Exception {
        List<KafkaConsumer<byte[], byte[]>> consumers = new ArrayList<>();
        for (int i = 0; i < clients; i++) {
            Properties cp = new Properties();
            cp.putAll(base);
            cp.put(ConsumerConfig.GROUP_ID_CONFIG, group);
            cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
            cp.put(ConsumerConfig.RECEIVE_BUFFER_CONFIG, Integer.toString(2 * 1024 * 1024));
            cp.put(ConsumerConfig.MAX_PARTITION_FETCH_BYTES_CONFIG, Integer.toString(1024 * 1024));
            cp.put(ConsumerConfig.CHECK_CRCS_CONFIG, "false");
            cp.put(ConsumerConfig.CLIENT_ID_CONFIG, "perf-consumer-client-" + i);
            cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
            cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
            consumers.add(new KafkaConsumer<>(cp));
        }
        List<PartitionInfo> infos = consumers.get(0).partitionsFor(topic, Duration.ofSeconds(30));
        int partitions = infos == null ? 0 : infos.size();
        if (partitions < clients) {
            System.err.println("ERROR: " + topic + " has " + partitions + " partitions, fewer than " + clients
                    + " consumers");
            consumers.forEach(KafkaConsumer::close);
            return 1;
        }
        long start = System.nanoTime();
        AtomicIntegerArray held = new AtomicIntegerArray(clients);
        AtomicBoolean ready = new AtomicBoolean();
        AtomicBoolean failed = new AtomicBoolean();
        AtomicLong readyAt = new AtomicLong();
        AtomicLong total = new AtomicLong();
        AtomicLong bytes = new AtomicLong();
        AtomicLong firstRecord = new AtomicLong(Long.MAX_VALUE);
        AtomicLong reachedAt = new AtomicLong();
        AtomicLong lastProgress = new AtomicLong(start);
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < clients; i++) {
            KafkaConsumer<byte[], byte[]> consumer = consumers.get(i);
            int me = i;
            Thread t = new Thread(() -> {
                Set<TopicPartition> owned = new HashSet<>();
                // Runs inside poll() on this thread, so it may pause this consumer's partitions.
                ConsumerRebalanceListener listener = new ConsumerRebalanceListener() {
                    @Override
                    public void onPartitionsRevoked(Collection<TopicPartition> parts) {
                        owned.removeAll(parts);
                        held.set(me, owned.size());
                    }

                    @Override
                    public void onPartitionsAssigned(Collection<TopicPartition> parts) {
                        owned.addAll(parts);
                        held.set(me, owned.size());
                        // A new generation of the group is progress too: 50 members may take
                        // several rebalances to settle.
                        lastProgress.accumulateAndGet(System.nanoTime(), Math::max);
                        if (ready.get()) {
                            return;
                        }
                        consumer.pause(parts);
                        int sum = 0;
                        for (int c = 0; c < clients; c++) {
                            if (held.get(c) == 0) {
                                return;
                            }
                            sum += held.get(c);
                        }
                        if (sum == partitions && ready.compareAndSet(false, true)) {
                            readyAt.set(System.nanoTime());
                        }
                    }
                };
                boolean resumed = false;
                try {
                    consumer.subscribe(List.of(topic), listener);
                    while (total.get() < records && !failed.get()) {
                        ConsumerRecords<byte[], byte[]> batch = consumer.poll(Duration.ofMillis(100));
                        long now = System.nanoTime();
                        if (!resumed && ready.get()) {
                            consumer.resume(consumer.paused());
                            resumed = true;
                        }
                        if (!batch.isEmpty()) {
                            firstRecord.accumulateAndGet(now, Math::min);
                            lastProgress.accumulateAndGet(now, Math::max);
                            long b = 0;
                            for (ConsumerRecord<byte[], byte[]> r : batch) {
                                b += (r.key() == null ? 0 : r.key().length) + (r.value() == null ? 0 : r.value().length);
                            }
                            bytes.addAndGet(b);
                            long before = total.getAndAdd(batch.count());
                            if (before < records && before + batch.count() >= records) {
                                reachedAt.set(now);
                            }
                        } else if (now - lastProgress.get() > TimeUnit.MILLISECONDS.toNanos(timeoutMs)) {
                            if (failed.compareAndSet(false, true)) {
                                System.err.println("ERROR: no progress for " + timeoutMs + " ms ("
                                        + (ready.get() ? "fetching" : "waiting for the group to settle") + ")");
                            }
                        }
                    }
                } catch (Exception e) {
                    failed.set(true);
                    System.err.println("consumer thread failed: " + e);
                } finally {
                    consumer.close();
                }
            }, "consumer-" + i);
            threads.add(t);
            t.start();
        }
        for (Thread t : threads) {
            t.join();
        }
        long n = total.get();
        double seconds = n >= records ? (reachedAt.get() - firstRecord.get()) / 1e9 : 0;
        long rebalanceMs = ready.get() ? TimeUnit.NANOSECONDS.toMillis(readyAt.get() - start) : -1;
        System.out.println(String.format(Locale.ROOT,
                "{\"records\":%d,\"seconds\":%.4f,\"mb_per_s\":%.4f,\"msg_per_s\":%.1f,\"rebalance_ms\":%d,"
                        + "\"clients\":%d,\"partitions\":%d}",
                n, seconds, rate(bytes.get() / (1024.0 * 1024), seconds), rate(n, seconds), rebalanceMs, clients,
                partitions));
        return n >= records && !failed.get() ? 0 : 1;
    }

    /** amount / seconds, 0 when no time passed (JSON has no Infinity). */
    private static double rate(double amount, double seconds) {
        return seconds > 0 ? amount / seconds : 0;
    }

    private static double us(Histogram h, double percentile) {
        return h.getValueAtPercentile(percentile) / 1e3;
    }
}

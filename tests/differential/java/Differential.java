// Differential authorization test: one scenario table, run against real Kafka and against Portcullis,
// with the same Java client code on both sides. See tests/differential/README.md and docs/testing.md.
//
//   java Differential --table scenarios.yaml --expected expected.yaml --report report.json \
//        [--target NAME=BOOTSTRAP@USERS.properties]... [--record] [--only ID,ID...]
//
// The first --target is the reference (Kafka's SASL listener). For every target the runner:
//   1. as the admin (a super user on both sides) creates the table's fixtures under a prefix unique to
//      the run and the target (topics with records, groups with committed offsets, a transactional id);
//   2. for each scenario: deletes every ACL, creates the scenario's ACLs through the target's own
//      CreateAcls, waits until DescribeAcls shows exactly them, then runs the scenario's operation as the
//      acting user with a fresh client and bounded timeouts, and normalises the outcome to a string:
//      "OK", "OK <what was visible>", or the Kafka error name (Errors.forException) of the failure.
// Resource names in the table are written without the prefix; the runner adds it (every TOPIC, GROUP
// and TRANSACTIONAL_ID name except the LITERAL wildcard "*") and strips it from what it reports, so the
// two targets' outcomes are comparable string for string.
//
// Verdict: every target's outcome must equal the reference's outcome for the same scenario, and the
// reference's outcomes must equal the recorded ones in --expected (recorded from Kafka with --record;
// never written by hand). Exit 0 only if all are equal; 1 on any mismatch; 2 on bad usage.
// --record runs only the first target and rewrites --expected with its outcomes.

import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;
import java.util.stream.Collectors;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.dataformat.yaml.YAMLFactory;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.AlterConfigsOptions;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.admin.CreateTopicsOptions;
import org.apache.kafka.clients.admin.DescribeClusterOptions;
import org.apache.kafka.clients.admin.DescribeConsumerGroupsOptions;
import org.apache.kafka.clients.admin.DescribeTopicsOptions;
import org.apache.kafka.clients.admin.ListConsumerGroupOffsetsSpec;
import org.apache.kafka.clients.admin.ListTopicsOptions;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.TransactionListing;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.ApiException;
import org.apache.kafka.common.errors.TopicAuthorizationException;
import org.apache.kafka.common.protocol.Errors;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourceType;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class Differential {
    /** Upper bound for one client call; an operation is a handful of calls. */
    static final int CALL_MS = 10_000;
    static final Duration POLL_BUDGET = Duration.ofSeconds(10);
    static final int FIXTURE_RECORDS = 3;
    static final String ADMIN = "admin";
    /** Wall-clock budget for one pass over the table on one target (a pass takes ~25 s on Kafka). */
    static final long TARGET_BUDGET_S = Long.parseLong(System.getenv().getOrDefault("DIFFERENTIAL_BUDGET_S", "420"));

    // ------------------------------------------------------------------------------------------
    // The table

    record Acl(AclPermissionType permission, String principal, String host, AclOperation operation,
               ResourceType type, PatternType pattern, String name) {
        /** "ALLOW User:bob * WRITE TOPIC LITERAL orders" (the name may contain no spaces). */
        static Acl parse(String s) {
            String[] f = s.trim().split("\\s+");
            if (f.length != 7) {
                throw new IllegalArgumentException("ACL needs 7 fields (PERMISSION PRINCIPAL HOST OPERATION TYPE PATTERN NAME): " + s);
            }
            return new Acl(AclPermissionType.fromString(f[0]), f[1], f[2], AclOperation.fromString(f[3]),
                    ResourceType.fromString(f[4]), PatternType.fromString(f[5]), f[6]);
        }

        AclBinding binding(Names names) {
            return new AclBinding(new ResourcePattern(type, names.resource(type, pattern, name), pattern),
                    new AccessControlEntry(principal, host, operation, permission));
        }
    }

    record Scenario(String id, String as, String op, Map<String, String> args, List<Acl> acls) {}

    record Fixtures(List<String> topics, Map<String, String> groups, List<String> transactions) {}

    record Table(Fixtures fixtures, List<Scenario> scenarios) {}

    @SuppressWarnings("unchecked")
    static Table loadTable(Path path) throws IOException {
        Map<String, Object> root = new ObjectMapper(new YAMLFactory()).readValue(path.toFile(), Map.class);
        Map<String, Object> fx = (Map<String, Object>) root.getOrDefault("fixtures", Map.of());
        Fixtures fixtures = new Fixtures(
                (List<String>) fx.getOrDefault("topics", List.of()),
                (Map<String, String>) fx.getOrDefault("groups", Map.of()),
                (List<String>) fx.getOrDefault("transactions", List.of()));
        List<Scenario> scenarios = new ArrayList<>();
        Set<String> ids = new HashSet<>();
        for (Map<String, Object> m : (List<Map<String, Object>>) root.get("scenarios")) {
            String id = (String) m.get("id");
            if (id == null || !ids.add(id)) {
                throw new IllegalArgumentException("missing or duplicate scenario id: " + id);
            }
            Map<String, String> args = new LinkedHashMap<>();
            for (String k : List.of("topic", "group", "txn", "count")) {
                if (m.containsKey(k)) {
                    args.put(k, String.valueOf(m.get(k)));
                }
            }
            List<Acl> acls = new ArrayList<>();
            for (Object a : (List<Object>) m.getOrDefault("acls", List.of())) {
                acls.add(Acl.parse((String) a));
            }
            String op = (String) m.get("op");
            if (!OPERATIONS.contains(op)) {
                throw new IllegalArgumentException(id + ": unknown op " + op);
            }
            scenarios.add(new Scenario(id, (String) m.get("as"), op, args, acls));
        }
        return new Table(fixtures, scenarios);
    }

    /** Run-specific resource names: every topic, group and transactional id gets the run's prefix. */
    record Names(String prefix) {
        String of(String bare) {
            return prefix + bare;
        }

        String resource(ResourceType type, PatternType pattern, String name) {
            boolean prefixed = type == ResourceType.TOPIC || type == ResourceType.GROUP
                    || type == ResourceType.TRANSACTIONAL_ID;
            if (!prefixed || (pattern == PatternType.LITERAL && name.equals("*"))) {
                return name;
            }
            return prefix + name;
        }

        String strip(String name) {
            return name.startsWith(prefix) ? name.substring(prefix.length()) : name;
        }

        boolean ours(String name) {
            return name.startsWith(prefix);
        }
    }

    // ------------------------------------------------------------------------------------------
    // A target: a bootstrap address and the users' passwords there

    record Target(String name, String bootstrap, Properties passwords) {
        Properties client(String user) {
            String password = passwords.getProperty(user);
            if (password == null) {
                throw new IllegalArgumentException("no password for user " + user + " on target " + name);
            }
            Properties p = new Properties();
            p.put("bootstrap.servers", bootstrap);
            p.put("security.protocol", "SASL_PLAINTEXT");
            p.put("sasl.mechanism", "SCRAM-SHA-512");
            p.put("sasl.jaas.config", "org.apache.kafka.common.security.scram.ScramLoginModule required username=\""
                    + user + "\" password=\"" + password + "\";");
            p.put("client.id", "differential-" + user);
            p.put("request.timeout.ms", String.valueOf(CALL_MS));
            p.put("default.api.timeout.ms", String.valueOf(CALL_MS + 2_000));
            p.put("reconnect.backoff.max.ms", "1000");
            p.put("retry.backoff.max.ms", "1000");
            return p;
        }
    }

    // ------------------------------------------------------------------------------------------
    // Outcomes

    /** The normalised name of a failure: Kafka's error name for the innermost Kafka exception. */
    static String failure(Throwable t, Names names) {
        Throwable e = t;
        while ((e instanceof ExecutionException || e instanceof CompletionException
                || (e instanceof KafkaException && !(e instanceof ApiException)))
                && e.getCause() != null && e.getCause() != e) {
            e = e.getCause();
        }
        Errors error = Errors.forException(e);
        String out = error.name();
        if (error == Errors.UNKNOWN_SERVER_ERROR) {
            // Some client paths report a broker error only as the text of a plain KafkaException
            // ("Unexpected error in TxnOffsetCommitResponse: Topic authorization failed."): name it by
            // the error whose standard message ends the text.
            String msg = e.getMessage() == null ? "" : e.getMessage();
            Errors named = null;
            for (Errors candidate : Errors.values()) {
                String m = candidate.message();
                if (candidate != Errors.NONE && m != null && !m.isEmpty() && msg.endsWith(m)
                        && (named == null || m.length() > named.message().length())) {
                    named = candidate;
                }
            }
            out = named != null ? named.name() + "(in " + e.getClass().getSimpleName() + ")"
                    : out + "(" + e.getClass().getSimpleName() + ")";
        }
        if (e instanceof TopicAuthorizationException tae && !tae.unauthorizedTopics().isEmpty()) {
            out += " topics=" + sorted(tae.unauthorizedTopics(), names::strip);
        }
        return out;
    }

    static String sorted(Collection<String> items, Function<String, String> f) {
        return items.stream().map(f).collect(Collectors.toCollection(TreeSet::new)).toString()
                .replace(" ", "");
    }

    static String ops(Set<AclOperation> ops) {
        if (ops == null) {
            return "null";
        }
        return sorted(ops.stream().map(AclOperation::name).toList(), Function.identity());
    }

    static String aclString(AclBinding b, Names names) {
        AccessControlEntry e = b.entry();
        ResourcePattern r = b.pattern();
        return e.permissionType() + " " + e.principal() + " " + e.host() + " " + e.operation() + " "
                + r.resourceType() + " " + r.patternType() + " " + names.strip(r.name());
    }

    // ------------------------------------------------------------------------------------------
    // Operations: each returns "OK" or "OK <detail>", or throws

    static final Set<String> OPERATIONS = Set.of(
            "produce", "produce_idempotent", "fetch", "consume", "commit", "committed",
            "list_groups", "describe_group", "delete_group", "group_offsets", "delete_group_offsets",
            "txn_init", "txn_produce", "txn_offsets", "list_transactions", "describe_transactions",
            "create_topic", "delete_topic", "describe_topic", "list_topics", "describe_topic_configs",
            "alter_topic_config", "create_partitions", "delete_records", "describe_producers",
            "describe_cluster", "describe_log_dirs", "describe_broker_configs", "alter_broker_config",
            "describe_acls", "create_acls");

    interface Op {
        String run() throws Exception;
    }

    static final class Runner {
        final Target target;
        final Names names;

        Runner(Target target, Names names) {
            this.target = target;
            this.names = names;
        }

        KafkaProducer<String, String> producer(String user, Map<String, Object> extra) {
            Properties p = target.client(user);
            p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, String.valueOf(CALL_MS));
            p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, String.valueOf(CALL_MS + 1_000));
            p.put(ProducerConfig.LINGER_MS_CONFIG, "0");
            p.put(ProducerConfig.ACKS_CONFIG, "all");
            p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "false");
            p.put(ProducerConfig.RETRIES_CONFIG, "0");
            p.putAll(extra);
            return new KafkaProducer<>(p, new StringSerializer(), new StringSerializer());
        }

        KafkaConsumer<String, String> consumer(String user, String group) {
            Properties p = target.client(user);
            if (group != null) {
                p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
            }
            p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
            p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
            p.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "10000");
            p.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "1000");
            return new KafkaConsumer<>(p, new StringDeserializer(), new StringDeserializer());
        }

        Admin admin(String user) {
            return Admin.create(target.client(user));
        }

        static <T> T get(org.apache.kafka.common.KafkaFuture<T> f) throws Exception {
            return f.get(CALL_MS + 2_000, TimeUnit.MILLISECONDS);
        }

        /** Polls until a record arrives; the outcome names how many were read. */
        static String pollSome(KafkaConsumer<String, String> c) {
            long deadline = System.nanoTime() + POLL_BUDGET.toNanos();
            int n = 0;
            while (n == 0 && System.nanoTime() < deadline) {
                ConsumerRecords<String, String> rs = c.poll(Duration.ofMillis(200));
                n += rs.count();
            }
            return n == 0 ? "NO_RECORDS" : "OK";
        }

        String run(Scenario s) throws Exception {
            String user = s.as();
            String topic = s.args().containsKey("topic") ? names.of(s.args().get("topic")) : null;
            String group = s.args().containsKey("group") ? names.of(s.args().get("group")) : null;
            String txn = s.args().containsKey("txn") ? names.of(s.args().get("txn")) : null;
            TopicPartition tp0 = topic == null ? null : new TopicPartition(topic, 0);
            switch (s.op()) {
                case "produce", "produce_idempotent" -> {
                    boolean idem = s.op().equals("produce_idempotent");
                    Map<String, Object> extra = idem
                            ? Map.of(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true", ProducerConfig.RETRIES_CONFIG, "3")
                            : Map.of();
                    try (var p = producer(user, extra)) {
                        p.send(new ProducerRecord<>(topic, "k", "v")).get(CALL_MS + 2_000, TimeUnit.MILLISECONDS);
                        return "OK";
                    }
                }
                case "fetch" -> {
                    try (var c = consumer(user, null)) {
                        c.assign(List.of(tp0));
                        c.seekToBeginning(List.of(tp0));
                        return pollSome(c);
                    }
                }
                case "consume" -> {
                    try (var c = consumer(user, group)) {
                        c.subscribe(List.of(topic));
                        String r = pollSome(c);
                        if (r.equals("OK")) {
                            c.commitSync(Duration.ofMillis(CALL_MS));
                        }
                        return r;
                    }
                }
                case "commit" -> {
                    try (var c = consumer(user, group)) {
                        c.assign(List.of(tp0));
                        c.commitSync(Map.of(tp0, new OffsetAndMetadata(1)), Duration.ofMillis(CALL_MS));
                        return "OK";
                    }
                }
                case "committed" -> {
                    try (var c = consumer(user, group)) {
                        Map<TopicPartition, OffsetAndMetadata> m = c.committed(Set.of(tp0), Duration.ofMillis(CALL_MS));
                        OffsetAndMetadata o = m.get(tp0);
                        return "OK offset=" + (o == null ? "none" : String.valueOf(o.offset()));
                    }
                }
                case "list_groups" -> {
                    try (var a = admin(user)) {
                        var groups = get(a.listGroups().all());
                        return "OK groups=" + sorted(groups.stream().map(g -> g.groupId()).filter(names::ours).toList(),
                                names::strip);
                    }
                }
                case "describe_group" -> {
                    try (var a = admin(user)) {
                        ConsumerGroupDescription d = get(a.describeConsumerGroups(List.of(group),
                                new DescribeConsumerGroupsOptions().includeAuthorizedOperations(true)).describedGroups().get(group));
                        return "OK state=" + d.groupState() + " ops=" + ops(d.authorizedOperations());
                    }
                }
                case "delete_group" -> {
                    try (var a = admin(user)) {
                        get(a.deleteConsumerGroups(List.of(group)).all());
                        return "OK";
                    }
                }
                case "group_offsets" -> {
                    try (var a = admin(user)) {
                        var m = get(a.listConsumerGroupOffsets(Map.of(group, new ListConsumerGroupOffsetsSpec()))
                                .partitionsToOffsetAndMetadata(group));
                        return "OK partitions=" + sorted(m.keySet().stream().map(TopicPartition::toString).toList(), names::strip);
                    }
                }
                case "delete_group_offsets" -> {
                    try (var a = admin(user)) {
                        get(a.deleteConsumerGroupOffsets(group, Set.of(tp0)).all());
                        return "OK";
                    }
                }
                case "txn_init", "txn_produce", "txn_offsets" -> {
                    Map<String, Object> extra = Map.of(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txn,
                            ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true",
                            ProducerConfig.RETRIES_CONFIG, "3",
                            ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "10000");
                    try (var p = producer(user, extra)) {
                        p.initTransactions();
                        if (s.op().equals("txn_init")) {
                            return "OK";
                        }
                        p.beginTransaction();
                        try {
                            p.send(new ProducerRecord<>(topic, "k", "v")).get(CALL_MS + 2_000, TimeUnit.MILLISECONDS);
                            if (s.op().equals("txn_offsets")) {
                                // An unjoined consumer's metadata (generation -1), as a producer
                                // outside a consumer group sends it; creating the consumer is local.
                                org.apache.kafka.clients.consumer.ConsumerGroupMetadata md;
                                try (var c = consumer(user, group)) {
                                    md = c.groupMetadata();
                                }
                                p.sendOffsetsToTransaction(Map.of(tp0, new OffsetAndMetadata(1)), md);
                            }
                            p.commitTransaction();
                            return "OK";
                        } catch (Exception e) {
                            try {
                                p.abortTransaction();
                            } catch (Exception ignored) {
                                // The producer may be in a fatal state; the first error is the outcome.
                            }
                            throw e;
                        } finally {
                            p.close(Duration.ofSeconds(2));
                        }
                    }
                }
                case "list_transactions" -> {
                    try (var a = admin(user)) {
                        Collection<TransactionListing> l = get(a.listTransactions().all());
                        return "OK txns=" + sorted(l.stream().map(TransactionListing::transactionalId).filter(names::ours).toList(),
                                names::strip);
                    }
                }
                case "describe_transactions" -> {
                    try (var a = admin(user)) {
                        var d = get(a.describeTransactions(List.of(txn)).description(txn));
                        return "OK state=" + d.state();
                    }
                }
                case "create_topic" -> {
                    try (var a = admin(user)) {
                        get(a.createTopics(List.of(new NewTopic(topic, 1, (short) 1)), new CreateTopicsOptions()).all());
                        return "OK";
                    }
                }
                case "delete_topic" -> {
                    try (var a = admin(user)) {
                        get(a.deleteTopics(List.of(topic)).all());
                        return "OK";
                    }
                }
                case "describe_topic" -> {
                    try (var a = admin(user)) {
                        TopicDescription d = get(a.describeTopics(List.of(topic),
                                new DescribeTopicsOptions().includeAuthorizedOperations(true)).allTopicNames()).get(topic);
                        return "OK partitions=" + d.partitions().size() + " ops=" + ops(d.authorizedOperations());
                    }
                }
                case "list_topics" -> {
                    try (var a = admin(user)) {
                        Set<String> t = get(a.listTopics(new ListTopicsOptions().listInternal(true)).names());
                        return "OK topics=" + sorted(t.stream().filter(names::ours).toList(), names::strip);
                    }
                }
                case "describe_topic_configs" -> {
                    try (var a = admin(user)) {
                        var res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
                        var c = get(a.describeConfigs(List.of(res)).all()).get(res);
                        ConfigEntry e = c.get("cleanup.policy");
                        return "OK cleanup.policy=" + (e == null ? "none" : e.value());
                    }
                }
                case "alter_topic_config" -> {
                    try (var a = admin(user)) {
                        var res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
                        var op = new AlterConfigOp(new ConfigEntry("retention.ms", "3600000"), AlterConfigOp.OpType.SET);
                        get(a.incrementalAlterConfigs(Map.of(res, List.of(op)), new AlterConfigsOptions().validateOnly(true)).all());
                        return "OK";
                    }
                }
                case "create_partitions" -> {
                    try (var a = admin(user)) {
                        int count = Integer.parseInt(s.args().getOrDefault("count", "2"));
                        get(a.createPartitions(Map.of(topic, NewPartitions.increaseTo(count))).all());
                        return "OK";
                    }
                }
                case "delete_records" -> {
                    try (var a = admin(user)) {
                        var r = get(a.deleteRecords(Map.of(tp0, RecordsToDelete.beforeOffset(1))).lowWatermarks().get(tp0));
                        return "OK low=" + r.lowWatermark();
                    }
                }
                case "describe_producers" -> {
                    try (var a = admin(user)) {
                        get(a.describeProducers(List.of(tp0)).partitionResult(tp0));
                        return "OK";
                    }
                }
                case "describe_cluster" -> {
                    try (var a = admin(user)) {
                        var d = a.describeCluster(new DescribeClusterOptions().includeAuthorizedOperations(true));
                        int nodes = get(d.nodes()).size();
                        return "OK nodes=" + nodes + " ops=" + ops(get(d.authorizedOperations()));
                    }
                }
                case "describe_log_dirs" -> {
                    try (var a = admin(user)) {
                        var m = get(a.describeLogDirs(List.of(1)).allDescriptions());
                        return "OK brokers=" + m.keySet();
                    }
                }
                case "describe_broker_configs" -> {
                    try (var a = admin(user)) {
                        var res = new ConfigResource(ConfigResource.Type.BROKER, "1");
                        var c = get(a.describeConfigs(List.of(res)).all()).get(res);
                        ConfigEntry e = c.get("num.io.threads");
                        return "OK num.io.threads=" + (e == null ? "none" : e.value());
                    }
                }
                case "alter_broker_config" -> {
                    try (var a = admin(user)) {
                        var res = new ConfigResource(ConfigResource.Type.BROKER, "1");
                        var op = new AlterConfigOp(new ConfigEntry("log.cleaner.backoff.ms", "15000"), AlterConfigOp.OpType.SET);
                        get(a.incrementalAlterConfigs(Map.of(res, List.of(op)), new AlterConfigsOptions().validateOnly(true)).all());
                        return "OK";
                    }
                }
                case "describe_acls" -> {
                    try (var a = admin(user)) {
                        Collection<AclBinding> acls = get(a.describeAcls(AclBindingFilter.ANY).values());
                        return "OK acls=" + acls.stream().map(b -> aclString(b, names)).sorted().toList();
                    }
                }
                case "create_acls" -> {
                    try (var a = admin(user)) {
                        // A binding no scenario uses, removed by the next reset.
                        var b = new AclBinding(new ResourcePattern(ResourceType.TOPIC, names.of("created-by-user"), PatternType.LITERAL),
                                new AccessControlEntry("User:dave", "*", AclOperation.READ, AclPermissionType.ALLOW));
                        get(a.createAcls(List.of(b)).all());
                        return "OK";
                    }
                }
                default -> throw new IllegalArgumentException("unknown op " + s.op());
            }
        }
    }

    // ------------------------------------------------------------------------------------------
    // One pass over the table against one target

    static Map<String, String> runTarget(Target target, Names names, Table table, List<Scenario> scenarios,
                                         PrintStream log) throws Exception {
        Map<String, String> outcomes = new LinkedHashMap<>();
        long started = System.nanoTime();
        try (Admin admin = Admin.create(target.client(ADMIN))) {
            resetAcls(admin, List.of());
            setUpFixtures(target, admin, names, table.fixtures(), log);
            Runner runner = new Runner(target, names);
            List<AclBinding> current = List.of();
            boolean aclsKnown = true;
            long budgetEnd = started + TimeUnit.SECONDS.toNanos(TARGET_BUDGET_S);
            for (Scenario s : scenarios) {
                long t0 = System.nanoTime();
                if (t0 > budgetEnd) {
                    // A target that answers with timeouts must not hold the suite for half an hour.
                    outcomes.put(s.id(), "NOT_RUN (target exceeded " + TARGET_BUDGET_S + " s)");
                    continue;
                }
                String outcome;
                List<AclBinding> wanted = s.acls().stream().map(a -> a.binding(names)).toList();
                try {
                    // After a scenario that ran with no ACLs and could create none, there is nothing to reset.
                    if (!aclsKnown || !current.isEmpty() || !wanted.isEmpty() || s.op().equals("create_acls")) {
                        resetAcls(admin, wanted);
                    }
                    current = wanted;
                    aclsKnown = !s.op().equals("create_acls");
                } catch (Exception e) {
                    aclsKnown = false;
                    outcomes.put(s.id(), "SETUP_FAILED " + failure(e, names));
                    log.printf("  %-40s %s%n", s.id(), outcomes.get(s.id()));
                    continue;
                }
                try {
                    outcome = runner.run(s);
                } catch (Exception e) {
                    outcome = failure(e, names);
                    if (System.getenv("DIFFERENTIAL_TRACE") != null) {
                        e.printStackTrace(log);
                    }
                }
                outcomes.put(s.id(), outcome);
                log.printf("  %-40s %-6dms %s%n", s.id(), (System.nanoTime() - t0) / 1_000_000, outcome);
            }
            resetAcls(admin, List.of());
        }
        log.printf("[%s] %d scenarios in %ds%n", target.name(), scenarios.size(), (System.nanoTime() - started) / 1_000_000_000);
        return outcomes;
    }

    /** Deletes every ACL, creates `wanted`, and waits until DescribeAcls shows exactly `wanted`. */
    static void resetAcls(Admin admin, List<AclBinding> wanted) throws Exception {
        Runner.get(admin.deleteAcls(List.of(AclBindingFilter.ANY)).all());
        if (!wanted.isEmpty()) {
            Runner.get(admin.createAcls(wanted).all());
        }
        Set<AclBinding> want = new HashSet<>(wanted);
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        while (true) {
            Set<AclBinding> have = new HashSet<>(Runner.get(admin.describeAcls(AclBindingFilter.ANY).values()));
            if (have.equals(want)) {
                return;
            }
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("ACLs did not converge: want " + want + ", have " + have);
            }
            Thread.sleep(20);
        }
    }

    static void setUpFixtures(Target target, Admin admin, Names names, Fixtures fx, PrintStream log) throws Exception {
        long t0 = System.nanoTime();
        List<NewTopic> topics = fx.topics().stream().map(t -> new NewTopic(names.of(t), 1, (short) 1)).toList();
        Runner.get(admin.createTopics(topics).all());
        // Wait until every topic has a leader before producing.
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        List<String> tnames = topics.stream().map(NewTopic::name).toList();
        while (true) {
            try {
                var d = Runner.get(admin.describeTopics(tnames).allTopicNames());
                if (d.values().stream().allMatch(t -> t.partitions().stream().allMatch(p -> p.leader() != null))) {
                    break;
                }
            } catch (ExecutionException e) {
                // UNKNOWN_TOPIC_OR_PARTITION while the metadata propagates
            }
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("fixture topics have no leader");
            }
            Thread.sleep(100);
        }
        Runner r = new Runner(target, names);
        // Retries on: a just-created partition may still answer NOT_LEADER; every record must land, or
        // the scenarios that read or delete records would measure the fixture, not the authorizer.
        Map<String, Object> retrying = Map.of(ProducerConfig.RETRIES_CONFIG, "10",
                ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, "1");
        try (var p = r.producer(ADMIN, retrying)) {
            List<java.util.concurrent.Future<?>> sent = new ArrayList<>();
            for (String t : tnames) {
                for (int i = 0; i < FIXTURE_RECORDS; i++) {
                    sent.add(p.send(new ProducerRecord<>(t, "k" + i, "v" + i)));
                }
            }
            p.flush();
            for (var f : sent) {
                f.get(CALL_MS, TimeUnit.MILLISECONDS);
            }
        }
        for (var g : fx.groups().entrySet()) {
            TopicPartition tp = new TopicPartition(names.of(g.getValue()), 0);
            Runner.get(admin.alterConsumerGroupOffsets(names.of(g.getKey()), Map.of(tp, new OffsetAndMetadata(2))).all());
        }
        for (String txn : fx.transactions()) {
            Map<String, Object> extra = Map.of(ProducerConfig.TRANSACTIONAL_ID_CONFIG, names.of(txn),
                    ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true", ProducerConfig.RETRIES_CONFIG, "3");
            try (var p = r.producer(ADMIN, extra)) {
                p.initTransactions();
                p.beginTransaction();
                p.send(new ProducerRecord<>(tnames.get(0), "txk", "txv"));
                p.commitTransaction();
            }
        }
        log.printf("[%s] fixtures under prefix %s ready in %dms%n", target.name(), names.prefix(),
                (System.nanoTime() - t0) / 1_000_000);
    }

    // ------------------------------------------------------------------------------------------
    // Expected outcomes file: "id: 'outcome'" lines, written only by --record

    static Map<String, String> loadExpected(Path p) throws IOException {
        if (!Files.exists(p)) {
            return Map.of();
        }
        @SuppressWarnings("unchecked")
        Map<String, Object> m = new ObjectMapper(new YAMLFactory()).readValue(p.toFile(), Map.class);
        Map<String, String> out = new LinkedHashMap<>();
        if (m != null) {
            m.forEach((k, v) -> out.put(k, String.valueOf(v)));
        }
        return out;
    }

    static void writeExpected(Path p, Map<String, String> outcomes, String from) throws IOException {
        StringBuilder sb = new StringBuilder();
        sb.append("# Outcomes recorded from Apache Kafka ").append(from).append(" by\n")
          .append("#   Differential --record (tests/differential/run.sh --record). Do not edit by hand.\n");
        for (var e : outcomes.entrySet()) {
            sb.append(e.getKey()).append(": '").append(e.getValue().replace("'", "''")).append("'\n");
        }
        Files.writeString(p, sb.toString(), StandardCharsets.UTF_8);
    }

    static String json(String s) {
        StringBuilder sb = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"' -> sb.append("\\\"");
                case '\\' -> sb.append("\\\\");
                case '\n' -> sb.append("\\n");
                default -> {
                    if (c < 0x20) {
                        sb.append(String.format("\\u%04x", (int) c));
                    } else {
                        sb.append(c);
                    }
                }
            }
        }
        return sb.append('"').toString();
    }

    // ------------------------------------------------------------------------------------------

    public static void main(String[] argv) throws Exception {
        Path tablePath = null;
        Path expectedPath = null;
        Path reportPath = null;
        boolean record = false;
        Set<String> only = null;
        List<Target> targets = new ArrayList<>();
        for (int i = 0; i < argv.length; i++) {
            switch (argv[i]) {
                case "--table" -> tablePath = Path.of(argv[++i]);
                case "--expected" -> expectedPath = Path.of(argv[++i]);
                case "--report" -> reportPath = Path.of(argv[++i]);
                case "--record" -> record = true;
                case "--only" -> only = Set.of(argv[++i].split(","));
                case "--target" -> {
                    String spec = argv[++i];
                    int eq = spec.indexOf('='), at = spec.lastIndexOf('@');
                    if (eq < 1 || at < eq) {
                        usage("bad --target " + spec);
                    }
                    Properties pw = new Properties();
                    try (var in = Files.newInputStream(Path.of(spec.substring(at + 1)))) {
                        pw.load(in);
                    }
                    targets.add(new Target(spec.substring(0, eq), spec.substring(eq + 1, at), pw));
                }
                default -> usage("unknown argument " + argv[i]);
            }
        }
        if (tablePath == null || expectedPath == null || targets.isEmpty()) {
            usage("--table, --expected and at least one --target are required");
        }
        Table table = loadTable(tablePath);
        Set<String> onlyIds = only;
        List<Scenario> scenarios = table.scenarios().stream()
                .filter(s -> onlyIds == null || onlyIds.contains(s.id())).toList();
        if (record) {
            targets = targets.subList(0, 1);
        }
        String run = Long.toString(System.currentTimeMillis() % 100_000_000L, 36);
        PrintStream log = System.out;

        Map<String, Map<String, String>> results = new LinkedHashMap<>();
        for (Target t : targets) {
            Names names = new Names("df-" + run + "-" + t.name() + "-");
            log.printf("[%s] %d scenarios against %s%n", t.name(), scenarios.size(), t.bootstrap());
            Map<String, String> outcomes;
            try {
                outcomes = runTarget(t, names, table, scenarios, log);
            } catch (Exception e) {
                log.printf("[%s] aborted: %s%n", t.name(), e);
                e.printStackTrace(log);
                outcomes = new LinkedHashMap<>();
                String why = "TARGET_FAILED " + failure(e, names);
                for (Scenario s : scenarios) {
                    outcomes.put(s.id(), why);
                }
            }
            results.put(t.name(), outcomes);
        }

        Target ref = targets.get(0);
        Map<String, String> refOut = results.get(ref.name());
        if (record) {
            Map<String, String> merged = new LinkedHashMap<>();
            Map<String, String> old = loadExpected(expectedPath);
            for (Scenario s : table.scenarios()) {
                String v = refOut.containsKey(s.id()) ? refOut.get(s.id()) : old.get(s.id());
                if (v != null) {
                    merged.put(s.id(), v);
                }
            }
            writeExpected(expectedPath, merged, "4.4 (its SASL_PLAINTEXT listener, StandardAuthorizer)");
            log.printf("recorded %d outcomes into %s%n", refOut.size(), expectedPath);
        }
        Map<String, String> expected = loadExpected(expectedPath);

        // Mismatch table: one row per (scenario, comparison) that differs.
        List<String[]> rows = new ArrayList<>();
        for (Scenario s : scenarios) {
            String want = expected.get(s.id());
            String got = refOut.get(s.id());
            if (want == null) {
                rows.add(new String[] {s.id(), "recorded", "(none: run --record)", ref.name(), got});
            } else if (!want.equals(got)) {
                rows.add(new String[] {s.id(), "recorded", want, ref.name(), got});
            }
            for (Target t : targets.subList(1, targets.size())) {
                String other = results.get(t.name()).get(s.id());
                if (!got.equals(other)) {
                    rows.add(new String[] {s.id(), ref.name(), got, t.name(), other});
                }
            }
        }
        long agree = scenarios.stream().filter(s -> rows.stream().noneMatch(r -> r[0].equals(s.id()))).count();
        log.println();
        if (rows.isEmpty()) {
            log.printf("differential: all %d scenarios identical on %s%n", scenarios.size(),
                    targets.stream().map(Target::name).collect(Collectors.joining(", ")) + " and the recorded outcomes");
        } else {
            log.printf("differential: %d mismatches (%d of %d scenarios agree everywhere)%n", rows.size(), agree, scenarios.size());
            log.printf("%-38s | %-12s | %-50s | %-12s | %s%n", "scenario", "reference", "reference outcome", "other", "other outcome");
            for (String[] r : rows) {
                log.printf("%-38s | %-12s | %-50s | %-12s | %s%n", (Object[]) r);
            }
        }
        if (reportPath != null) {
            StringBuilder sb = new StringBuilder("{\n  \"targets\": [");
            sb.append(targets.stream().map(t -> json(t.name())).collect(Collectors.joining(", "))).append("],\n");
            sb.append("  \"scenarios\": [\n");
            List<String> items = new ArrayList<>();
            for (Scenario s : scenarios) {
                StringBuilder it = new StringBuilder("    {\"id\": ").append(json(s.id()));
                it.append(", \"recorded\": ").append(expected.containsKey(s.id()) ? json(expected.get(s.id())) : "null");
                for (Target t : targets) {
                    it.append(", ").append(json(t.name())).append(": ").append(json(results.get(t.name()).get(s.id())));
                }
                items.add(it.append("}").toString());
            }
            sb.append(String.join(",\n", items)).append("\n  ],\n  \"mismatches\": ").append(rows.size()).append("\n}\n");
            Files.writeString(reportPath, sb.toString(), StandardCharsets.UTF_8);
        }
        System.exit(rows.isEmpty() ? 0 : 1);
    }

    static void usage(String why) {
        System.err.println(why);
        System.err.println("usage: Differential --table FILE --expected FILE [--report FILE] [--record] [--only ID,...]"
                + " --target NAME=HOST:PORT@USERS.properties [--target ...]");
        System.exit(2);
    }
}

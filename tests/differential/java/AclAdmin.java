// The Java AdminClient's ACL calls against one endpoint, for tests/interop/test_acl_tools.py:
//
//   java AclAdmin <client.properties> <topic-prefix> <principal> [eventual]
//
// `eventual` is for Kafka itself: its brokers answer DescribeAcls from their metadata image, which
// catches up with the controller after CreateAcls/DeleteAcls return, so after each write the program
// waits (up to 10 s) until the write is visible before reading. Portcullis is run without it: it
// answers a write only once its own view has applied it, so reads right after must already see it.
//
// As the client of the properties (an admin), it creates bindings for <principal> (a PREFIXED topic
// ALLOW, a LITERAL topic DENY with a host, USER-resource CREATE_TOKENS/DESCRIBE_TOKENS on User:alice,
// a TRANSACTIONAL_ID and a GROUP binding), then reads them back with several filters, deletes with a
// filter, and reads back again. Each step prints one JSON line {"step": ..., "acls": [...]} with the
// bindings it saw, each as "PERMISSION PRINCIPAL HOST OPERATION TYPE PATTERN NAME", sorted; the test
// compares them with the exact expected rows. Everything it created is deleted at the end.

import java.util.Collection;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourcePatternFilter;
import org.apache.kafka.common.resource.ResourceType;

public final class AclAdmin {
    static final long TIMEOUT_S = 15;

    public static void main(String[] args) throws Exception {
        if (args.length < 3 || args.length > 4 || (args.length == 4 && !args[3].equals("eventual"))) {
            System.err.println("usage: AclAdmin <client.properties> <topic-prefix> <principal> [eventual]");
            System.exit(2);
        }
        Properties props = new Properties();
        try (var in = java.nio.file.Files.newInputStream(java.nio.file.Path.of(args[0]))) {
            props.load(in);
        }
        props.put("request.timeout.ms", "10000");
        props.put("default.api.timeout.ms", "15000");
        String prefix = args[1];
        String principal = args[2];
        boolean eventual = args.length == 4;
        try (Admin admin = Admin.create(props)) {
            List<AclBinding> bindings = List.of(
                    binding(ResourceType.TOPIC, prefix, PatternType.PREFIXED, principal, "*", AclOperation.READ, AclPermissionType.ALLOW),
                    binding(ResourceType.TOPIC, prefix + "secret", PatternType.LITERAL, principal, "127.0.0.1", AclOperation.ALL, AclPermissionType.DENY),
                    binding(ResourceType.USER, "User:alice", PatternType.LITERAL, principal, "*", AclOperation.CREATE_TOKENS, AclPermissionType.ALLOW),
                    binding(ResourceType.USER, "User:alice", PatternType.LITERAL, principal, "*", AclOperation.DESCRIBE_TOKENS, AclPermissionType.ALLOW),
                    binding(ResourceType.TRANSACTIONAL_ID, prefix + "tx", PatternType.LITERAL, principal, "*", AclOperation.WRITE, AclPermissionType.ALLOW),
                    binding(ResourceType.GROUP, prefix + "group", PatternType.PREFIXED, principal, "*", AclOperation.READ, AclPermissionType.ALLOW));
            admin.createAcls(bindings).all().get(TIMEOUT_S, TimeUnit.SECONDS);
            AccessControlEntryFilter byPrincipal = new AccessControlEntryFilter(principal, null, AclOperation.ANY, AclPermissionType.ANY);
            AclBindingFilter allOfPrincipal = new AclBindingFilter(ResourcePatternFilter.ANY, byPrincipal);
            if (eventual) awaitVisible(admin, allOfPrincipal, bindings.size());

            print("by-principal", describe(admin, new AclBindingFilter(ResourcePatternFilter.ANY, byPrincipal)));
            print("user-resource", describe(admin, new AclBindingFilter(
                    new ResourcePatternFilter(ResourceType.USER, "User:alice", PatternType.ANY), byPrincipal)));
            print("topic-prefixed", describe(admin, new AclBindingFilter(
                    new ResourcePatternFilter(ResourceType.TOPIC, prefix, PatternType.PREFIXED), AccessControlEntryFilter.ANY)));
            print("topic-match", describe(admin, new AclBindingFilter(
                    new ResourcePatternFilter(ResourceType.TOPIC, prefix + "secret", PatternType.MATCH), byPrincipal)));
            print("deny-only", describe(admin, new AclBindingFilter(ResourcePatternFilter.ANY,
                    new AccessControlEntryFilter(principal, null, AclOperation.ANY, AclPermissionType.DENY))));

            // Delete the USER bindings and the DENY with two filters in one request.
            Collection<AclBinding> deleted = admin.deleteAcls(List.of(
                    new AclBindingFilter(new ResourcePatternFilter(ResourceType.USER, null, PatternType.ANY), byPrincipal),
                    new AclBindingFilter(ResourcePatternFilter.ANY,
                            new AccessControlEntryFilter(principal, "127.0.0.1", AclOperation.ANY, AclPermissionType.ANY))))
                    .all().get(TIMEOUT_S, TimeUnit.SECONDS);
            print("deleted", deleted);
            if (eventual) awaitVisible(admin, allOfPrincipal, bindings.size() - deleted.size());
            print("after-delete", describe(admin, new AclBindingFilter(ResourcePatternFilter.ANY, byPrincipal)));

            Collection<AclBinding> rest = admin.deleteAcls(List.of(new AclBindingFilter(ResourcePatternFilter.ANY, byPrincipal)))
                    .all().get(TIMEOUT_S, TimeUnit.SECONDS);
            print("deleted-rest", rest);
            if (eventual) awaitVisible(admin, allOfPrincipal, 0);
            print("empty", describe(admin, new AclBindingFilter(ResourcePatternFilter.ANY, byPrincipal)));
        }
    }

    static AclBinding binding(ResourceType type, String name, PatternType pattern, String principal, String host,
                              AclOperation op, AclPermissionType permission) {
        return new AclBinding(new ResourcePattern(type, name, pattern), new AccessControlEntry(principal, host, op, permission));
    }

    static Collection<AclBinding> describe(Admin admin, AclBindingFilter filter) throws Exception {
        return admin.describeAcls(filter).values().get(TIMEOUT_S, TimeUnit.SECONDS);
    }

    /** Waits until `filter` matches `count` bindings (Kafka's brokers apply ACL changes asynchronously). */
    static void awaitVisible(Admin admin, AclBindingFilter filter, int count) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (describe(admin, filter).size() != count) {
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("ACL change not visible after 10 s (expected " + count + " bindings)");
            }
            Thread.sleep(50);
        }
    }

    static void print(String step, Collection<AclBinding> acls) {
        List<String> rows = acls.stream().map(b -> {
            AccessControlEntry e = b.entry();
            ResourcePattern r = b.pattern();
            return quote(e.permissionType() + " " + e.principal() + " " + e.host() + " " + e.operation() + " "
                    + r.resourceType() + " " + r.patternType() + " " + r.name());
        }).sorted().toList();
        System.out.println("{\"step\": " + quote(step) + ", \"acls\": [" + String.join(", ", rows) + "]}");
    }

    static String quote(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }
}

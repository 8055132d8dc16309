package dev.portcullis.bench;

import java.io.BufferedReader;
import java.io.IOException;
import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.metrics.Metrics;
import org.apache.kafka.common.metrics.internals.PluginMetricsImpl;
import org.apache.kafka.common.network.ClientInformation;
import org.apache.kafka.common.network.ListenerName;
import org.apache.kafka.common.protocol.ApiKeys;
import org.apache.kafka.common.requests.RequestContext;
import org.apache.kafka.common.requests.RequestHeader;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourceType;
import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.common.security.auth.SecurityProtocol;
import org.apache.kafka.common.utils.internals.SecurityUtils;
import org.apache.kafka.metadata.authorizer.StandardAcl;
import org.apache.kafka.metadata.authorizer.StandardAuthorizer;
import org.apache.kafka.server.authorizer.Action;
import org.apache.kafka.server.authorizer.AuthorizationResult;

/**
 * Reads the plain-text ACL corpus written by the Rust generator
 * (plugins/acl/examples/gen_corpus.rs; format documented in plugins/acl/src/corpus.rs) and
 * loads it into Kafka's own StandardAuthorizer.
 */
public final class Corpus {
    /** One authorization case of the corpus. */
    public static final class Case {
        public final String name;
        public final boolean byResourceType;
        public final RequestContext context;
        public final AclOperation operation;
        public final ResourceType resourceType;
        public final List<Action> actions;

        Case(String name, boolean byResourceType, RequestContext context, AclOperation operation,
             ResourceType resourceType, List<Action> actions) {
            this.name = name;
            this.byResourceType = byResourceType;
            this.context = context;
            this.operation = operation;
            this.resourceType = resourceType;
            this.actions = actions;
        }

        /** Runs the case once; this is what the benchmark measures. */
        public AuthorizationResult run(StandardAuthorizer authorizer) {
            if (byResourceType) {
                return authorizer.authorizeByResourceType(context, operation, resourceType);
            }
            return authorizer.authorize(context, actions).get(0);
        }
    }

    public final Map<Uuid, StandardAcl> acls = new HashMap<>();
    public final List<Case> cases = new ArrayList<>();

    /** Kafka's enum names without underscores, as the Rust side prints them (`kafka_name`). */
    private static AclOperation operation(String s) {
        return AclOperation.fromString(s);
    }

    private static ResourceType resourceType(String s) {
        return ResourceType.fromString(s);
    }

    private static RequestContext context(String principal, String host) throws IOException {
        KafkaPrincipal p = SecurityUtils.parseKafkaPrincipal(principal);
        RequestHeader header = new RequestHeader(ApiKeys.PRODUCE, (short) 9, "bench-client", 1);
        return new RequestContext(header, "1", InetAddress.getByName(host), p,
            ListenerName.normalised("PLAIN"), SecurityProtocol.SASL_PLAINTEXT, ClientInformation.EMPTY, false);
    }

    public static Corpus read(Path path) throws IOException {
        Corpus corpus = new Corpus();
        ResourceType type = null;
        PatternType pattern = null;
        String name = null;
        try (BufferedReader in = Files.newBufferedReader(path, StandardCharsets.UTF_8)) {
            String line;
            int lineNo = 0;
            while ((line = in.readLine()) != null) {
                lineNo++;
                if (line.isEmpty() || line.startsWith("#")) continue;
                String[] f = line.split("\t", -1);
                switch (f[0]) {
                    case "resource":
                        type = resourceType(f[1]);
                        pattern = PatternType.fromString(f[2]);
                        name = f[3];
                        break;
                    case "acl":
                        corpus.acls.put(Uuid.randomUuid(), new StandardAcl(type, name, pattern, f[1], f[2],
                            operation(f[3]), AclPermissionType.fromString(f[4])));
                        break;
                    case "authorize": {
                        // The AuthorizerBenchmark action: logIfAllowed and logIfDenied set.
                        Action action = new Action(operation(f[4]),
                            new ResourcePattern(resourceType(f[5]), f[6], PatternType.LITERAL), 1, true, true);
                        corpus.cases.add(new Case(f[1], false, context(f[2], f[3]), operation(f[4]),
                            resourceType(f[5]), List.of(action)));
                        break;
                    }
                    case "by_resource_type":
                        corpus.cases.add(new Case(f[1], true, context(f[2], f[3]), operation(f[4]),
                            resourceType(f[5]), List.of()));
                        break;
                    default:
                        throw new IOException(path + ":" + lineNo + ": unknown record " + f[0]);
                }
            }
        }
        return corpus;
    }

    /** A StandardAuthorizer holding the corpus, initial load complete (no super users, deny by default). */
    public StandardAuthorizer authorizer() {
        StandardAuthorizer authorizer = new StandardAuthorizer();
        authorizer.configure(Map.of());
        // As the broker does: the authorizer records its decisions in plugin metrics.
        authorizer.withPluginMetrics(new PluginMetricsImpl(new Metrics(), Map.of("role", "broker")));
        authorizer.loadSnapshot(acls);
        authorizer.completeInitialLoad();
        return authorizer;
    }

    public Case find(String caseName) {
        for (Case c : cases) {
            if (c.name.equals(caseName)) return c;
        }
        throw new IllegalArgumentException("no case " + caseName);
    }
}

// The delegation-token differential: one fixed sequence of token operations and misuse cases, run
// with Kafka's Java Admin client against one endpoint (Kafka's SASL listener, or Portcullis), printing
// one JSON line per step. tests/interop/test_token_differential.py runs it against both and requires
// the same outcome for every step, and timestamps within clock tolerance.
//
//   java TokenDifferential BOOTSTRAP USERS.properties
//
// USERS.properties: user=password for admin, alice (super users on both sides), bob, carol, dave.
// Tokens are named by labels (t1, t2, ...) so the two runs compare although their ids differ; only
// tokens this run created are reported by Describe.
//
// Each line: {"step": id, "outcome": "NONE" | Kafka error name, and per kind:
//   create:   "owner", "requester", "renewers", "expiry_rel", "max_rel" (relative to the issue time)
//   renew/expire: "expiry_rel" (relative to when the call was sent), or "expiry": "max" when the
//             answer is the token's own max timestamp (a capped answer depends on how long ago the
//             token was issued, which differs between runs by how long the waits took)
//   describe: "visible" (sorted labels)}

import java.io.FileReader;
import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import com.fasterxml.jackson.databind.ObjectMapper;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.CreateDelegationTokenOptions;
import org.apache.kafka.clients.admin.DescribeDelegationTokenOptions;
import org.apache.kafka.clients.admin.ExpireDelegationTokenOptions;
import org.apache.kafka.clients.admin.RenewDelegationTokenOptions;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.protocol.Errors;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourcePatternFilter;
import org.apache.kafka.common.resource.ResourceType;
import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.common.security.token.delegation.DelegationToken;

public final class TokenDifferential {
    private final String bootstrap;
    private final Properties passwords;
    private final Map<String, Admin> admins = new HashMap<>();
    private final Map<String, DelegationToken> tokens = new LinkedHashMap<>();
    private final ObjectMapper json = new ObjectMapper();
    private final List<AclBinding> grants = new ArrayList<>();

    TokenDifferential(String bootstrap, Properties passwords) {
        this.bootstrap = bootstrap;
        this.passwords = passwords;
    }

    private Properties base(String user, String password, boolean token) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("security.protocol", "SASL_PLAINTEXT");
        p.put("sasl.mechanism", "SCRAM-SHA-512");
        p.put("sasl.jaas.config", "org.apache.kafka.common.security.scram.ScramLoginModule required username=\""
                + user + "\" password=\"" + password + "\"" + (token ? " tokenauth=\"true\"" : "") + ";");
        p.put("request.timeout.ms", "20000");
        p.put("default.api.timeout.ms", "30000");
        return p;
    }

    private Admin as(String user) {
        return admins.computeIfAbsent(user, u -> Admin.create(base(u, passwords.getProperty(u), false)));
    }

    /** An Admin that authenticates with the token (its id and Base64 HMAC, tokenauth=true). */
    private Admin withToken(String label) {
        DelegationToken t = tokens.get(label);
        return admins.computeIfAbsent("token:" + label,
                k -> Admin.create(base(t.tokenInfo().tokenId(), t.hmacAsBase64String(), true)));
    }

    private static KafkaPrincipal principal(String s) {
        int i = s.indexOf(':');
        return new KafkaPrincipal(s.substring(0, i), s.substring(i + 1));
    }

    private void emit(Map<String, Object> line) throws Exception {
        System.out.println(json.writeValueAsString(line));
        System.out.flush();
    }

    private static String error(Throwable t) {
        Throwable cause = t instanceof ExecutionException && t.getCause() != null ? t.getCause() : t;
        return Errors.forException(cause).name();
    }

    void create(String step, Admin admin, String owner, List<String> renewers, long maxLife, String label)
            throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("step", step);
        CreateDelegationTokenOptions options = new CreateDelegationTokenOptions().maxlifeTimeMs(maxLife);
        List<KafkaPrincipal> r = new ArrayList<>();
        for (String s : renewers) {
            r.add(principal(s));
        }
        options.renewers(r);
        if (owner != null) {
            options.owner(principal(owner));
        }
        try {
            DelegationToken t = admin.createDelegationToken(options).delegationToken().get(60, TimeUnit.SECONDS);
            if (label != null) {
                tokens.put(label, t);
            }
            var info = t.tokenInfo();
            out.put("outcome", "NONE");
            out.put("owner", info.ownerAsString());
            out.put("requester", info.tokenRequester().toString());
            out.put("renewers", info.renewersAsString().toString());
            out.put("expiry_rel", info.expiryTimestamp() - info.issueTimestamp());
            out.put("max_rel", info.maxTimestamp() - info.issueTimestamp());
        } catch (ExecutionException e) {
            out.put("outcome", error(e));
        }
        emit(out);
    }

    void renew(String step, Admin admin, byte[] hmac, long period) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("step", step);
        long sent = System.currentTimeMillis();
        try {
            long expiry = admin.renewDelegationToken(hmac, new RenewDelegationTokenOptions().renewTimePeriodMs(period))
                    .expiryTimestamp().get(60, TimeUnit.SECONDS);
            out.put("outcome", "NONE");
            putExpiry(out, hmac, expiry, sent);
        } catch (ExecutionException e) {
            out.put("outcome", error(e));
        }
        emit(out);
    }

    void expire(String step, Admin admin, byte[] hmac, long period) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("step", step);
        long sent = System.currentTimeMillis();
        try {
            long expiry = admin.expireDelegationToken(hmac,
                    new ExpireDelegationTokenOptions().expiryTimePeriodMs(period)).expiryTimestamp().get(60, TimeUnit.SECONDS);
            out.put("outcome", "NONE");
            putExpiry(out, hmac, expiry, sent);
        } catch (ExecutionException e) {
            out.put("outcome", error(e));
        }
        emit(out);
    }

    /** Reports a renewed or expired token's expiry: "max" if capped at its max timestamp, else relative to the send time. */
    private void putExpiry(Map<String, Object> out, byte[] hmac, long expiry, long sent) {
        for (DelegationToken t : tokens.values()) {
            if (Arrays.equals(t.hmac(), hmac) && t.tokenInfo().maxTimestamp() == expiry) {
                out.put("expiry", "max");
                return;
            }
        }
        out.put("expiry_rel", expiry - sent);
    }

    void describe(String step, Admin admin, List<String> owners) throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("step", step);
        DescribeDelegationTokenOptions options = new DescribeDelegationTokenOptions();
        if (owners != null) {
            List<KafkaPrincipal> o = new ArrayList<>();
            for (String s : owners) {
                o.add(principal(s));
            }
            options.owners(o);
        }
        try {
            List<DelegationToken> found = admin.describeDelegationToken(options).delegationTokens()
                    .get(60, TimeUnit.SECONDS);
            TreeSet<String> visible = new TreeSet<>();
            for (DelegationToken t : found) {
                for (Map.Entry<String, DelegationToken> mine : tokens.entrySet()) {
                    if (mine.getValue().tokenInfo().tokenId().equals(t.tokenInfo().tokenId())) {
                        visible.add(mine.getKey());
                    }
                }
            }
            out.put("outcome", "NONE");
            out.put("visible", new ArrayList<>(visible));
        } catch (ExecutionException e) {
            out.put("outcome", error(e));
        }
        emit(out);
    }

    void grant(String principal, AclOperation operation, ResourceType type, String name) throws Exception {
        AclBinding b = new AclBinding(new ResourcePattern(type, name, PatternType.LITERAL),
                new AccessControlEntry(principal, "*", operation, AclPermissionType.ALLOW));
        as("admin").createAcls(List.of(b)).all().get(60, TimeUnit.SECONDS);
        grants.add(b);
        awaitAcls(b.toFilter(), true);
    }

    /**
     * Waits (up to 10 s) until DescribeAcls shows the filter's bindings present or gone. Kafka's
     * brokers apply ACL writes from the metadata log after CreateAcls/DeleteAcls return, so a
     * request right after a grant may still be refused there; Portcullis answers a write only once
     * its view has it, so against it the first read already agrees.
     */
    private void awaitAcls(AclBindingFilter filter, boolean present) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (true) {
            boolean seen = !as("admin").describeAcls(filter).values().get(30, TimeUnit.SECONDS).isEmpty();
            if (seen == present) {
                return;
            }
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("ACLs not " + (present ? "visible" : "gone") + " after 10 s: " + filter);
            }
            Thread.sleep(50);
        }
    }

    /**
     * Waits (up to 10 s) until a super user's DescribeDelegationToken shows the tokens of `labels`
     * present or gone. Kafka's broker answers Describe from a cache it fills from the metadata log
     * after the controller has answered Create or Expire, so right after one the broker may not show
     * it yet (seen under load: an owner's describe without the token just created for it);
     * Portcullis answers a write only once its view has it, so against it the first read agrees.
     */
    private void awaitTokens(Collection<String> labels, boolean present) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (true) {
            Set<String> shown = new HashSet<>();
            for (DelegationToken t : as("admin").describeDelegationToken().delegationTokens().get(30, TimeUnit.SECONDS)) {
                shown.add(t.tokenInfo().tokenId());
            }
            boolean settled = labels.stream()
                    .allMatch(label -> shown.contains(tokens.get(label).tokenInfo().tokenId()) == present);
            if (settled) {
                return;
            }
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("tokens " + labels + " not " + (present ? "visible" : "gone") + " after 10 s");
            }
            Thread.sleep(50);
        }
    }

    void revokeGrants() throws Exception {
        List<AclBindingFilter> filters = new ArrayList<>();
        for (String user : List.of("User:carol", "User:alice")) {
            filters.add(new AclBindingFilter(new ResourcePatternFilter(ResourceType.USER, user, PatternType.LITERAL),
                    AccessControlEntryFilter.ANY));
        }
        for (AclBinding b : grants) {
            filters.add(b.toFilter());
        }
        as("admin").deleteAcls(filters).all().get(60, TimeUnit.SECONDS);
        for (AclBindingFilter f : filters) {
            awaitAcls(f, false);
        }
    }

    byte[] hmac(String label) {
        return tokens.get(label).hmac();
    }

    void run() throws Exception {
        revokeGrants();
        long day = 86_400_000L;
        // Create: Kafka's lifetimes.
        create("create-self-default", as("alice"), null, List.of("User:bob"), -1, "t1");
        create("create-short-max-life", as("alice"), null, List.of(), 2_000, "t2");
        create("create-max-life-capped", as("alice"), null, List.of(), 30 * day, "t3");
        create("create-zero-max-life", as("carol"), null, List.of(), 0, "t4");
        create("create-owner-is-requester", as("carol"), "User:carol", List.of(), -1, "t5");
        // Misuse at create.
        create("create-group-renewer", as("alice"), null, List.of("Group:ops"), -1, null);
        create("create-for-other-without-acl", as("bob"), "User:carol", List.of(), -1, null);
        create("create-for-other-as-super-user", as("admin"), "User:carol", List.of("User:dave"), -1, "t6");
        grant("User:bob", AclOperation.CREATE_TOKENS, ResourceType.USER, "User:carol");
        create("create-for-other-with-acl", as("bob"), "User:carol", List.of(), -1, "t7");
        create("create-for-a-group-owner-with-acl", as("admin"), "Group:ops", List.of(), -1, "t8");
        create("create-one-minute-max", as("alice"), null, List.of(), 60_000, "t9");
        // Describe: who sees what, once the broker shows the tokens created above (t2, whose
        // 2-s life may be over by then, is not waited for; no describe below expects it).
        awaitTokens(List.of("t1", "t3", "t4", "t5", "t6", "t7", "t8", "t9"), true);
        describe("describe-owner", as("carol"), null);
        describe("describe-renewer", as("dave"), null);
        describe("describe-requester", as("bob"), null);
        describe("describe-stranger", as("dave"), List.of("User:alice"));
        describe("describe-owner-filter-renewer", as("alice"), List.of("User:bob"));
        describe("describe-empty-owner-list", as("carol"), List.of());
        grant("User:dave", AclOperation.DESCRIBE_TOKENS, ResourceType.USER, "User:carol");
        describe("describe-with-describe-tokens", as("dave"), null);
        grant("User:bob", AclOperation.DESCRIBE, ResourceType.DELEGATION_TOKEN, tokens.get("t1").tokenInfo().tokenId());
        describe("describe-with-describe-on-token", as("bob"), null);
        // Renew.
        renew("renew-by-stranger", as("dave"), hmac("t1"), 1_000);
        renew("renew-by-requester-not-renewer", as("bob"), hmac("t7"), 1_000);
        renew("renew-by-renewer-shortens", as("bob"), hmac("t1"), 1_000);
        renew("renew-default-period", as("alice"), hmac("t1"), -1);
        renew("renew-zero-period", as("alice"), hmac("t1"), 0);
        renew("renew-capped-at-expiry-time", as("alice"), hmac("t1"), 30 * day);
        renew("renew-capped-at-max", as("alice"), hmac("t9"), day);
        renew("renew-unknown-hmac", as("alice"), new SecureRandom().generateSeed(64), -1);
        renew("renew-short-hmac", as("alice"), new byte[] {1, 2, 3}, -1);
        // Expire.
        expire("expire-extends-to-period", as("alice"), hmac("t3"), 3 * day);
        expire("expire-capped-at-max", as("alice"), hmac("t3"), 30 * day);
        expire("expire-zero-expires-now", as("carol"), hmac("t4"), 0);
        Thread.sleep(2_100); // t2 passes its max (2 s); t4 is past its expiry
        renew("renew-after-expiry", as("alice"), hmac("t2"), -1);
        renew("renew-after-expire-zero", as("carol"), hmac("t4"), -1);
        expire("expire-positive-after-expiry", as("alice"), hmac("t2"), 1_000);
        expire("expire-negative-by-stranger", as("bob"), hmac("t2"), -1);
        expire("expire-negative-removes-expired", as("alice"), hmac("t2"), -1);
        // Token sessions may use none of the token APIs.
        create("token-session-creates", withToken("t1"), null, List.of(), -1, null);
        describe("token-session-describes", withToken("t1"), null);
        renew("token-session-renews", withToken("t1"), hmac("t1"), -1);
        expire("token-session-expires", withToken("t1"), hmac("t1"), -1);
        // Removal: renew, expire and describe no longer find it.
        expire("expire-negative-by-owner", as("carol"), hmac("t5"), -1);
        awaitTokens(List.of("t5"), false);
        renew("renew-removed", as("carol"), hmac("t5"), -1);
        expire("expire-removed", as("carol"), hmac("t5"), -1);
        describe("describe-after-removal", as("carol"), List.of("User:carol"));
        // Clean up what this run created.
        for (String label : List.of("t1", "t3", "t4", "t6", "t7", "t8", "t9")) {
            try {
                as("admin").expireDelegationToken(hmac(label),
                        new ExpireDelegationTokenOptions().expiryTimePeriodMs(-1)).expiryTimestamp().get();
            } catch (ExecutionException e) {
                // the admin is not the owner or a renewer of every token; the owners expire theirs
                String owner = tokens.get(label).tokenInfo().owner().getName();
                if (passwords.getProperty(owner) != null) {
                    try {
                        as(owner).expireDelegationToken(hmac(label),
                                new ExpireDelegationTokenOptions().expiryTimePeriodMs(-1)).expiryTimestamp().get();
                    } catch (ExecutionException ignored) {
                        // left to the sweep
                    }
                }
            }
        }
        revokeGrants();
    }

    public static void main(String[] args) throws Exception {
        Properties passwords = new Properties();
        try (FileReader r = new FileReader(args[1])) {
            passwords.load(r);
        }
        TokenDifferential d = new TokenDifferential(args[0], passwords);
        try {
            d.run();
        } finally {
            for (Admin a : d.admins.values()) {
                a.close();
            }
        }
    }
}

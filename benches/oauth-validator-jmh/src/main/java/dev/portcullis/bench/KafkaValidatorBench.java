package dev.portcullis.bench;

import java.lang.reflect.Constructor;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.Key;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import javax.security.auth.callback.Callback;
import javax.security.auth.login.AppConfigurationEntry;

import org.apache.kafka.common.security.oauthbearer.BrokerJwtValidator;
import org.apache.kafka.common.security.oauthbearer.DefaultJwtValidator;
import org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule;
import org.apache.kafka.common.security.oauthbearer.OAuthBearerToken;
import org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallback;
import org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler;
import org.apache.kafka.common.security.oauthbearer.internals.secured.CloseableVerificationKeyResolver;
import org.jose4j.jwk.JsonWebKeySet;
import org.jose4j.jws.JsonWebSignature;
import org.jose4j.jwx.JsonWebStructure;
import org.jose4j.keys.resolvers.JwksVerificationKeyResolver;
import org.jose4j.lang.UnresolvableKeyException;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Warmup;

/**
 * Kafka 4.4's broker-side OAUTHBEARER validation of one token whose key is already cached, on the
 * key set and token files MakeTokens wrote (the Rust bench reads the same files):
 *
 * <ul>
 *   <li>{@code callbackHandler}: what a broker's SASL server calls per login (KIP-768):
 *       {@link OAuthBearerValidatorCallbackHandler#handle} with one
 *       {@link OAuthBearerValidatorCallback}, configured as a broker configures it
 *       ({@code sasl.oauthbearer.jwks.endpoint.url} a {@code file:} URL, expected audience and
 *       issuer, the default {@code DefaultJwtValidator}, which delegates to
 *       {@link BrokerJwtValidator}). Kafka's file key resolver checks the file's mtime on every
 *       key lookup (a {@code stat}; an {@code https:} key set is held in memory instead);</li>
 *   <li>{@code validatorFile}: {@link BrokerJwtValidator#validate} alone, same configuration;</li>
 *   <li>{@code validatorInMemory}: {@link BrokerJwtValidator#validate} with the parsed key set in
 *       memory (jose4j's {@code JwksVerificationKeyResolver}, what the file resolver wraps and
 *       what the {@code https:} resolver does with its cached keys): no {@code stat}.</li>
 * </ul>
 *
 * Every setup validates the token once on every path and checks the principal, so a refusal
 * cannot pass for a fast validation; {@code callbackHandler} also checks each answer (the
 * handler reports a refusal in the callback, not by throwing). Sample mode, so the result has a
 * median (p0.50) comparable with criterion's median. The JVM needs
 * {@code -Dorg.apache.kafka.sasl.oauthbearer.allowed.urls=<the file: URL>}, as a broker does
 * (scripts/bench-oauth.sh passes it with -jvmArgsAppend).
 */
@State(Scope.Benchmark)
@Fork(value = 1, jvmArgsAppend = {"-Xms512m", "-Xmx512m"})
@Warmup(iterations = 3, time = 1)
@Measurement(iterations = 5, time = 1)
@BenchmarkMode(Mode.SampleTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
public class KafkaValidatorBench {
    /** The directory MakeTokens wrote. */
    @Param({""})
    public String dir;

    /** The token file's name without .jwt: RS256, ES256 or EdDSA. */
    @Param({"RS256"})
    public String kind;

    @Param({"https://idp.example/realms/kafka"})
    public String issuer;

    @Param({"kafka"})
    public String audience;

    private String token;
    private String principal;
    private OAuthBearerValidatorCallbackHandler handler;
    private BrokerJwtValidator fileValidator;
    private BrokerJwtValidator memoryValidator;

    @Setup(Level.Trial)
    public void setup() throws Exception {
        Path d = Path.of(dir).toAbsolutePath();
        token = Files.readString(d.resolve(kind + ".jwt")).trim();
        principal = Files.readString(d.resolve("principal")).trim();

        Map<String, Object> configs = brokerConfigs(d.resolve("jwks.json").toUri().toString());
        List<AppConfigurationEntry> jaas = List.of(new AppConfigurationEntry(
            OAuthBearerLoginModule.class.getName(), AppConfigurationEntry.LoginModuleControlFlag.REQUIRED, Map.of()));

        handler = new OAuthBearerValidatorCallbackHandler();
        handler.configure(configs, OAuthBearerLoginModule.OAUTHBEARER_MECHANISM, jaas);
        check(callbackHandler(), "callbackHandler");

        fileValidator = new BrokerJwtValidator();
        fileValidator.configure(configs, OAuthBearerLoginModule.OAUTHBEARER_MECHANISM, jaas);
        check(validatorFile(), "validatorFile");

        JwksVerificationKeyResolver keys = new JwksVerificationKeyResolver(
            new JsonWebKeySet(Files.readString(d.resolve("jwks.json"))).getJsonWebKeys());
        CloseableVerificationKeyResolver inMemory = new CloseableVerificationKeyResolver() {
            @Override
            public Key resolveKey(JsonWebSignature jws, List<JsonWebStructure> nesting) throws UnresolvableKeyException {
                return keys.resolveKey(jws, nesting);
            }
        };
        // The package-private constructor Kafka's own tests use to hand the validator a resolver.
        Constructor<BrokerJwtValidator> c = BrokerJwtValidator.class.getDeclaredConstructor(CloseableVerificationKeyResolver.class);
        c.setAccessible(true);
        memoryValidator = c.newInstance(inMemory);
        memoryValidator.configure(configs, OAuthBearerLoginModule.OAUTHBEARER_MECHANISM, jaas);
        check(validatorInMemory(), "validatorInMemory");
    }

    /** The OAUTHBEARER settings of a broker's listener, with the broker's defaults for the rest. */
    private Map<String, Object> brokerConfigs(String jwksUrl) {
        Map<String, Object> m = new HashMap<>();
        m.put("sasl.oauthbearer.jwks.endpoint.url", jwksUrl);
        m.put("sasl.oauthbearer.expected.audience", List.of(audience));
        m.put("sasl.oauthbearer.expected.issuer", issuer);
        m.put("sasl.oauthbearer.jwt.validator.class", DefaultJwtValidator.class);
        m.put("sasl.oauthbearer.scope.claim.name", "scope");
        m.put("sasl.oauthbearer.sub.claim.name", "sub");
        m.put("sasl.oauthbearer.clock.skew.seconds", 30);
        m.put("sasl.oauthbearer.jwks.endpoint.refresh.ms", 3_600_000L);
        m.put("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", 100L);
        m.put("sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms", 10_000L);
        return m;
    }

    private void check(OAuthBearerToken t, String path) {
        if (t == null || !principal.equals(t.principalName())) {
            throw new IllegalStateException(path + ": " + kind + " token not accepted as " + principal
                + " (got " + (t == null ? "null" : t.principalName()) + ")");
        }
    }

    @TearDown(Level.Trial)
    public void close() throws Exception {
        handler.close();
        fileValidator.close();
        memoryValidator.close();
    }

    @Benchmark
    public OAuthBearerToken callbackHandler() throws Exception {
        OAuthBearerValidatorCallback callback = new OAuthBearerValidatorCallback(token);
        handler.handle(new Callback[] {callback});
        OAuthBearerToken t = callback.token();
        if (t == null) {
            throw new IllegalStateException("refused: " + callback.errorStatus());
        }
        return t;
    }

    @Benchmark
    public OAuthBearerToken validatorFile() throws Exception {
        return fileValidator.validate(token);
    }

    @Benchmark
    public OAuthBearerToken validatorInMemory() throws Exception {
        return memoryValidator.validate(token);
    }
}

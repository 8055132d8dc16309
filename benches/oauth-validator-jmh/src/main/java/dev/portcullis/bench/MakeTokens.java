package dev.portcullis.bench;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.KeyPair;
import java.security.KeyPairGenerator;
import java.security.spec.ECGenParameterSpec;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import org.jose4j.jwk.JsonWebKey;
import org.jose4j.jwk.JsonWebKeySet;
import org.jose4j.jwk.PublicJsonWebKey;
import org.jose4j.jws.AlgorithmIdentifiers;
import org.jose4j.jws.JsonWebSignature;
import org.jose4j.jwt.JwtClaims;
import org.jose4j.jwt.NumericDate;

/**
 * Writes the key set and the tokens both benches read, once per run, so Portcullis and Kafka
 * validate the same bytes:
 *
 * <pre>
 *   DIR/jwks.json       the public keys (RSA-2048 "rsa", P-256 "p256", Ed25519 "ed")
 *   DIR/RS256.jwt       one signed access token per algorithm, same claims,
 *   DIR/ES256.jwt       exp ten years ahead (both validators use the real clock)
 *   DIR/EdDSA.jwt
 *   DIR/principal       the tokens' sub, which both validators must return
 * </pre>
 *
 * Usage: {@code java -cp oauth-validator-jmh.jar dev.portcullis.bench.MakeTokens DIR ISSUER AUDIENCE}.
 * The claims are the Keycloak-sized access token of the Rust bench's in-memory cases.
 */
public final class MakeTokens {
    static final String SUB = "5f0c6a1e-4b3d-4c55-8a0e-1f2d3c4b5a69";

    private MakeTokens() {}

    public static void main(String[] args) throws Exception {
        if (args.length != 3) {
            System.err.println("usage: MakeTokens DIR ISSUER AUDIENCE");
            System.exit(2);
        }
        Path dir = Path.of(args[0]);
        String issuer = args[1];
        String audience = args[2];
        Files.createDirectories(dir);

        KeyPairGenerator rsa = KeyPairGenerator.getInstance("RSA");
        rsa.initialize(2048);
        KeyPairGenerator ec = KeyPairGenerator.getInstance("EC");
        ec.initialize(new ECGenParameterSpec("secp256r1"));
        KeyPairGenerator ed = KeyPairGenerator.getInstance("Ed25519");

        record Kind(String alg, String kid, KeyPair pair) {}
        List<Kind> kinds = List.of(
            new Kind(AlgorithmIdentifiers.RSA_USING_SHA256, "rsa", rsa.generateKeyPair()),
            new Kind(AlgorithmIdentifiers.ECDSA_USING_P256_CURVE_AND_SHA256, "p256", ec.generateKeyPair()),
            new Kind(AlgorithmIdentifiers.EDDSA, "ed", ed.generateKeyPair()));

        List<JsonWebKey> jwks = new ArrayList<>();
        for (Kind k : kinds) {
            PublicJsonWebKey jwk = PublicJsonWebKey.Factory.newPublicJwk(k.pair().getPublic());
            jwk.setKeyId(k.kid());
            jwk.setAlgorithm(k.alg());
            jwk.setUse("sig");
            jwks.add(jwk);

            JsonWebSignature jws = new JsonWebSignature();
            jws.setHeader("typ", "JWT");
            jws.setAlgorithmHeaderValue(k.alg());
            jws.setKeyIdHeaderValue(k.kid());
            jws.setPayload(claims(issuer, audience).toJson());
            jws.setKey(k.pair().getPrivate());
            Files.writeString(dir.resolve(k.alg() + ".jwt"), jws.getCompactSerialization(), StandardCharsets.US_ASCII);
        }
        Files.writeString(dir.resolve("jwks.json"),
            new JsonWebKeySet(jwks).toJson(JsonWebKey.OutputControlLevel.PUBLIC_ONLY), StandardCharsets.UTF_8);
        Files.writeString(dir.resolve("principal"), SUB, StandardCharsets.UTF_8);
    }

    static JwtClaims claims(String issuer, String audience) {
        long now = System.currentTimeMillis() / 1000;
        JwtClaims c = new JwtClaims();
        c.setExpirationTime(NumericDate.fromSeconds(now + 10L * 365 * 24 * 3600));
        c.setIssuedAt(NumericDate.fromSeconds(now - 5));
        c.setJwtId("0b5a7c1e-2f0e-4a8e-9a59-7c1f4f3f2d11");
        c.setIssuer(issuer);
        c.setAudience(audience, "account");
        c.setSubject(SUB);
        c.setClaim("typ", "Bearer");
        c.setClaim("azp", "kafka-client");
        c.setClaim("scope", "openid profile email kafka");
        c.setStringListClaim("groups", "readers", "payments");
        c.setClaim("preferred_username", "service-account-kafka-client");
        c.setClaim("realm_access", Map.of("roles", List.of("offline_access", "uma_authorization")));
        return c;
    }
}

// Runs one of the interop suite's Java programs (RoundTrip, ReauthProducer, ...) as an OAUTHBEARER
// client, for tests/interop/test_oauth*.py:
//
//   java OAuthRun <allowed-urls> <MainClass> <args...>
//
// Kafka 4.x's OAuthBearerLoginCallbackHandler refuses every token endpoint URL that is not on the
// JVM's allow-list, the system property org.apache.kafka.sasl.oauthbearer.allowed.urls (a comma-
// separated list; the lesson of CVE-2025-27817). The suite's JavaTool passes no JVM options, so the
// property is set here, before the program makes its first client. The SASL settings themselves
// (sasl.mechanism=OAUTHBEARER, the login callback handler, sasl.oauthbearer.token.endpoint.url and the
// JAAS line with clientId/clientSecret) come in the program's client.properties.

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.util.Arrays;

public final class OAuthRun {
    public static void main(String[] args) throws Throwable {
        if (args.length < 2) {
            System.err.println("usage: OAuthRun <allowed-urls> <MainClass> <args...>");
            System.exit(2);
        }
        System.setProperty("org.apache.kafka.sasl.oauthbearer.allowed.urls", args[0]);
        Method main = Class.forName(args[1]).getMethod("main", String[].class);
        try {
            main.invoke(null, (Object) Arrays.copyOfRange(args, 2, args.length));
        } catch (InvocationTargetException e) {
            throw e.getCause();
        }
    }
}

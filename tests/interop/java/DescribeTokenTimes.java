// Describes the delegation tokens owned by one principal with Kafka's Admin client and prints their
// timestamps in milliseconds (DelegationTokenCommand prints minutes only, too coarse to see a
// renewal move a token's expiry by seconds).
//
//   java DescribeTokenTimes BOOTSTRAP USER PASSWORD OWNER_NAME
//
// stdout: one JSON object per token: {"id":"...","issued":ms,"expiry":ms,"max":ms}. Exits 1 with
// the stack trace on stderr on any failure.

import java.util.List;
import java.util.Properties;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.DescribeDelegationTokenOptions;
import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.common.security.token.delegation.DelegationToken;
import org.apache.kafka.common.security.token.delegation.TokenInformation;

public final class DescribeTokenTimes {
    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", args[0]);
        p.put("security.protocol", "SASL_PLAINTEXT");
        p.put("sasl.mechanism", "SCRAM-SHA-512");
        p.put("sasl.jaas.config", "org.apache.kafka.common.security.scram.ScramLoginModule required "
                + "username=\"" + args[1] + "\" password=\"" + args[2] + "\";");
        try (Admin admin = Admin.create(p)) {
            DescribeDelegationTokenOptions options = new DescribeDelegationTokenOptions()
                    .owners(List.of(new KafkaPrincipal(KafkaPrincipal.USER_TYPE, args[3])));
            for (DelegationToken token : admin.describeDelegationToken(options).delegationTokens().get()) {
                TokenInformation info = token.tokenInfo();
                System.out.printf("{\"id\":\"%s\",\"issued\":%d,\"expiry\":%d,\"max\":%d}%n",
                        info.tokenId(), info.issueTimestamp(), info.expiryTimestamp(), info.maxTimestamp());
            }
        }
    }
}

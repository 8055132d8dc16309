// A Java producer and consumer that authenticate with a delegation token (SCRAM-SHA-512 with
// tokenauth=true, the way Kafka documents it), produce and read back records, then stay connected
// and idle until told to check whether a fresh login with the same token still works.
//
//   java TokenSessions BOOTSTRAP TOKEN_ID HMAC_BASE64 TOPIC COUNT
//
// stdout, one JSON object per line:
//   {"phase":"ready","produced":N,"consumed":N,"mismatches":N}   after the round trip
//   {"phase":"check","login":"ok"|"failed","error":"..."}        after reading "check" on stdin
// Then it closes its clients and exits 0. Any unexpected failure exits 1 with the stack trace on stderr.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashSet;
import java.util.List;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class TokenSessions {
    static Properties common(String bootstrap, String tokenId, String hmac) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("security.protocol", "SASL_PLAINTEXT");
        p.put("sasl.mechanism", "SCRAM-SHA-512");
        p.put("sasl.jaas.config", "org.apache.kafka.common.security.scram.ScramLoginModule required "
                + "username=\"" + tokenId + "\" password=\"" + hmac + "\" tokenauth=\"true\";");
        return p;
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], tokenId = args[1], hmac = args[2], topic = args[3];
        int count = Integer.parseInt(args[4]);

        Properties pp = common(bootstrap, tokenId, hmac);
        pp.put("key.serializer", StringSerializer.class.getName());
        pp.put("value.serializer", StringSerializer.class.getName());
        pp.put("acks", "all");
        pp.put("enable.idempotence", "false");
        KafkaProducer<String, String> producer = new KafkaProducer<>(pp);
        for (int i = 0; i < count; i++) {
            producer.send(new ProducerRecord<>(topic, "k" + i, "v" + i)).get(60, TimeUnit.SECONDS);
        }
        producer.flush();

        Properties cp = common(bootstrap, tokenId, hmac);
        cp.put("key.deserializer", StringDeserializer.class.getName());
        cp.put("value.deserializer", StringDeserializer.class.getName());
        cp.put("auto.offset.reset", "earliest");
        KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp);
        TopicPartition tp = new TopicPartition(topic, 0);
        consumer.assign(List.of(tp));
        consumer.seekToBeginning(List.of(tp));
        Set<String> seen = new HashSet<>();
        int mismatches = 0;
        long deadline = System.currentTimeMillis() + 60_000;
        while (seen.size() < count && System.currentTimeMillis() < deadline) {
            for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                if (!r.value().equals("v" + r.key().substring(1))) {
                    mismatches++;
                }
                seen.add(r.key());
            }
        }
        System.out.println("{\"phase\":\"ready\",\"produced\":" + count + ",\"consumed\":" + seen.size()
                + ",\"mismatches\":" + mismatches + "}");
        System.out.flush();

        // Idle until asked: both clients keep their connections open, sending nothing.
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null && !line.trim().equals("check")) {
            // wait
        }

        Properties fresh = common(bootstrap, tokenId, hmac);
        fresh.put("key.serializer", StringSerializer.class.getName());
        fresh.put("value.serializer", StringSerializer.class.getName());
        fresh.put("max.block.ms", "20000");
        String login;
        String error = "";
        try (KafkaProducer<String, String> again = new KafkaProducer<>(fresh)) {
            again.send(new ProducerRecord<>(topic, "after", "after")).get(30, TimeUnit.SECONDS);
            login = "ok";
        } catch (ExecutionException e) {
            login = "failed";
            error = e.getCause().getClass().getSimpleName() + ": " + e.getCause().getMessage();
        } catch (Exception e) {
            login = "failed";
            error = e.getClass().getSimpleName() + ": " + e.getMessage();
        }
        System.out.println("{\"phase\":\"check\",\"login\":\"" + login + "\",\"error\":\""
                + error.replace("\\", "\\\\").replace("\"", "'") + "\"}");
        System.out.flush();
        producer.close(Duration.ofSeconds(5));
        consumer.close(Duration.ofSeconds(5));
    }
}

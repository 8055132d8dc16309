package dev.portcullis.bench;

import java.nio.file.Path;

import org.apache.kafka.metadata.authorizer.StandardAuthorizer;
import org.apache.kafka.server.authorizer.AuthorizationResult;

/** Prints {@code <case>\t<ALLOWED|DENIED>} for every case, as Kafka's StandardAuthorizer decides. */
public final class Decide {
    public static void main(String[] args) throws Exception {
        if (args.length != 1) {
            System.err.println("usage: Decide <corpus.acl>");
            System.exit(2);
        }
        Corpus corpus = Corpus.read(Path.of(args[0]));
        StandardAuthorizer authorizer = corpus.authorizer();
        for (Corpus.Case c : corpus.cases) {
            AuthorizationResult result = c.run(authorizer);
            System.out.println(c.name + "\t" + result.name());
        }
    }
}

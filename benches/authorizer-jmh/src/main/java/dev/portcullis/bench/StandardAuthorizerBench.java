package dev.portcullis.bench;

import java.nio.file.Path;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.metadata.authorizer.StandardAuthorizer;
import org.apache.kafka.server.authorizer.AuthorizationResult;
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
import org.openjdk.jmh.annotations.Warmup;

/**
 * Kafka's StandardAuthorizer on a corpus file shared with the Rust criterion bench. Sample
 * mode, so the result has a median (p0.50) comparable with criterion's median.
 * Parameters are set by scripts/bench-authorizer.sh with -p corpus=... -p caseName=...
 */
@State(Scope.Benchmark)
@Fork(value = 1, jvmArgsAppend = {"-Xms1g", "-Xmx10g"})
@Warmup(iterations = 2, time = 1)
@Measurement(iterations = 3, time = 1)
@BenchmarkMode(Mode.SampleTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
public class StandardAuthorizerBench {
    @Param({""})
    public String corpus;

    @Param({""})
    public String caseName;

    private StandardAuthorizer authorizer;
    private Corpus.Case theCase;

    @Setup(Level.Trial)
    public void setup() throws Exception {
        Corpus c = Corpus.read(Path.of(corpus));
        authorizer = c.authorizer();
        theCase = c.find(caseName);
        c.acls.clear();
    }

    @Benchmark
    public AuthorizationResult run() {
        return theCase.run(authorizer);
    }
}

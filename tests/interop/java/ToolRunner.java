// Runs Kafka's own command-line tools (their `main`, from the kafka-tools jar) once per input line,
// all in one JVM: a JVM start per command costs seconds on a 2-core machine.
//
//   java ToolRunner < commands     (each line: a JSON array: the tool's class name, then its arguments)
//
// Prints one JSON line per command: {"rc": exit status, "out": stdout, "err": stderr}. The tools report
// failures through Exit.exit, which is redirected here to end only the command, not the JVM.

import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.databind.ObjectMapper;

import org.apache.kafka.common.utils.internals.Exit;

public final class ToolRunner {
    static final class ExitCalled extends RuntimeException {
        final int status;

        ExitCalled(int status) {
            super("exit " + status);
            this.status = status;
        }
    }

    public static void main(String[] args) throws Exception {
        ObjectMapper json = new ObjectMapper();
        PrintStream realOut = System.out;
        PrintStream realErr = System.err;
        Exit.setExitProcedure((status, message) -> {
            throw new ExitCalled(status);
        });
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            @SuppressWarnings("unchecked")
            List<String> command = json.readValue(line, List.class);
            Method main = Class.forName(command.get(0)).getMethod("main", String[].class);
            String[] toolArgs = command.subList(1, command.size()).toArray(new String[0]);
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            ByteArrayOutputStream err = new ByteArrayOutputStream();
            int rc = 0;
            System.setOut(new PrintStream(out, true, StandardCharsets.UTF_8));
            System.setErr(new PrintStream(err, true, StandardCharsets.UTF_8));
            try {
                main.invoke(null, (Object) toolArgs);
            } catch (InvocationTargetException e) {
                if (e.getCause() instanceof ExitCalled exit) {
                    rc = exit.status;
                } else {
                    e.getCause().printStackTrace(System.err);
                    rc = 99;
                }
            } catch (Throwable t) {
                t.printStackTrace(System.err);
                rc = 99;
            } finally {
                System.out.flush();
                System.err.flush();
                System.setOut(realOut);
                System.setErr(realErr);
            }
            Map<String, Object> result = new LinkedHashMap<>();
            result.put("rc", rc);
            result.put("out", out.toString(StandardCharsets.UTF_8));
            result.put("err", err.toString(StandardCharsets.UTF_8));
            realOut.println(json.writeValueAsString(result));
            realOut.flush();
        }
    }
}

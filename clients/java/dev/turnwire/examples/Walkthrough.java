package dev.turnwire.examples;

import com.google.gson.GsonBuilder;
import com.google.protobuf.ByteString;
import com.google.rpc.ErrorInfo;
import dev.turnwire.common.v1.InputItem;
import dev.turnwire.common.v1.ModelRef;
import dev.turnwire.common.v1.TurnKind;
import dev.turnwire.coordinator.v1.CancelOperationRequest;
import dev.turnwire.coordinator.v1.GetOperationRequest;
import dev.turnwire.coordinator.v1.Operation;
import dev.turnwire.coordinator.v1.OperationEvent;
import dev.turnwire.coordinator.v1.OperationState;
import dev.turnwire.coordinator.v1.SubmitTurnRequest;
import dev.turnwire.coordinator.v1.SubmitTurnResponse;
import dev.turnwire.coordinator.v1.Turn;
import io.grpc.ManagedChannel;
import io.grpc.StatusRuntimeException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.UUID;
import java.util.concurrent.TimeUnit;

/**
 * A Turnwire client in Java (grpc-java), end to end against a live coordinator, with the blocking
 * stub or the asynchronous one ({@code --stub blocking|async}):
 *
 * <ol>
 *   <li>submits a turn with an idempotency key, submits it again (a replay: the same operation),
 *       and watches it to its terminal state;
 *   <li>submits a slow turn, watches until it runs, cancels it, and resumes the watch from the last
 *       sequence it saw to the terminal state;
 *   <li>decodes the google.rpc.ErrorInfo of three refusals: the key reused for another turn, a
 *       call without a token, and another principal's read.
 * </ol>
 *
 * <p>Prints one JSON summary on stdout; exit 0 when every step behaved as the contract says, 1
 * otherwise (the summary's "problems" says why), 2 on bad usage. Flags fall back to
 * TURNWIRE_ADDRESS, TURNWIRE_TOKEN, TURNWIRE_CA_FILE and TURNWIRE_OTHER_TOKEN. See
 * docs/CLIENTS.md.
 */
public final class Walkthrough {
  private static final String USAGE =
      String.join(
          "\n",
          "usage: java dev.turnwire.examples.Walkthrough --address HOST:PORT --token TOKEN"
              + " --other-token TOKEN [options]",
          "",
          "  --address HOST:PORT    the coordinator (env TURNWIRE_ADDRESS)",
          "  --token TOKEN          a token with the submit, read and cancel scopes"
              + " (env TURNWIRE_TOKEN)",
          "  --other-token TOKEN    another principal's token with the read scope"
              + " (env TURNWIRE_OTHER_TOKEN)",
          "  --ca-file FILE         TLS, trusting this CA (env TURNWIRE_CA_FILE); without it,"
              + " plaintext (loopback only)",
          "  --stub blocking|async  which grpc-java stub makes the calls (default blocking)",
          "  --timeout SECONDS      give up on a call after this long (default 60)",
          "  --cancel-sleep-ms N    how long the turn that is cancelled would sleep"
              + " (default 30000)");

  private final TurnApi api;
  private final TurnApi anonymous;
  private final TurnApi other;
  private final int cancelSleepMs;

  private Walkthrough(TurnApi api, TurnApi anonymous, TurnApi other, int cancelSleepMs) {
    this.api = api;
    this.anonymous = anonymous;
    this.other = other;
    this.cancelSleepMs = cancelSleepMs;
  }

  private static String newKey() {
    return "java-" + UUID.randomUUID();
  }

  private static Turn turn(String text, Map<String, String> parameters) {
    return Turn.newBuilder()
        // kind is required: it picks the runner's slot pool (PROTOCOL.md R4).
        .setKind(TurnKind.TURN_KIND_WRITABLE)
        .setModel(
            ModelRef.newBuilder()
                .setProvider("example")
                .setName("echo")
                .putAllParameters(parameters))
        .addInputItems(
            InputItem.newBuilder()
                .setItemId("1")
                .setRole("user")
                .setContentType("text/plain")
                .setContent(ByteString.copyFromUtf8(text)))
        .build();
  }

  /** Events as "sequence:state"; a uint64 printed unsigned, in full. */
  private static List<String> events(List<OperationEvent> events) {
    List<String> rendered = new ArrayList<>();
    for (OperationEvent event : events) {
      rendered.add(Long.toUnsignedString(event.getSequence()) + ":" + event.getToState());
    }
    return rendered;
  }

  private Map<String, Object> submitAndWatch(String text) {
    String key = newKey();
    SubmitTurnRequest request =
        SubmitTurnRequest.newBuilder().setIdempotencyKey(key).setTurn(turn(text, Map.of())).build();
    SubmitTurnResponse first = api.submit(request);
    // The same key with the same request: a replay, never a second operation.
    SubmitTurnResponse again = api.submit(request);
    String operationId = first.getOperation().getOperationId();
    TurnApi.Watched watched = api.watch(operationId, 0, null);
    Operation operation = watched.operation;
    Map<String, Object> summary = new LinkedHashMap<>();
    summary.put("operation_id", operationId);
    summary.put("idempotency_key", key);
    summary.put("replayed", again.getReplayed());
    summary.put("replay_operation_id", again.getOperation().getOperationId());
    summary.put("events", events(watched.events));
    summary.put("state", operation.getState().name());
    summary.put("last_event_sequence", Long.toUnsignedString(operation.getLastEventSequence()));
    summary.put("output_text", operation.getResult().getOutput().toString(StandardCharsets.UTF_8));
    return summary;
  }

  private Map<String, Object> cancelWhileRunning() {
    SubmitTurnRequest request =
        SubmitTurnRequest.newBuilder()
            .setIdempotencyKey(newKey())
            .setTurn(turn("cancel me", Map.of("sleep_ms", Integer.toString(cancelSleepMs))))
            .build();
    String operationId = api.submit(request).getOperation().getOperationId();
    // Watch until the runner confirms the start (or the turn ends), then stop watching.
    TurnApi.Watched running =
        api.watch(
            operationId,
            0,
            event ->
                event.getToState() == OperationState.OPERATION_STATE_RUNNING
                    || Turnwire.isTerminal(event.getToState()));
    api.cancel(CancelOperationRequest.newBuilder().setOperationId(operationId).build());
    // Resume from the cursor: every later event exactly once, to the terminal one.
    TurnApi.Watched rest = api.watch(operationId, running.cursor, null);
    Map<String, Object> summary = new LinkedHashMap<>();
    summary.put("operation_id", operationId);
    summary.put(
        "state_before_cancel", running.operation == null ? null : running.operation.getState().name());
    summary.put("resumed_after_sequence", Long.toUnsignedString(running.cursor));
    summary.put("events_after_cancel", events(rest.events));
    summary.put("state", rest.operation.getState().name());
    summary.put("stop_reason", rest.operation.getStopReason().name());
    return summary;
  }

  /** A refused call's code and ErrorInfo; a call that went through is {"refused": false}. */
  private static Map<String, Object> refusal(Runnable call) {
    Map<String, Object> rendered = new LinkedHashMap<>();
    try {
      call.run();
      rendered.put("refused", false);
      return rendered;
    } catch (StatusRuntimeException error) {
      return refusal(error);
    }
  }

  private static Map<String, Object> refusal(StatusRuntimeException error) {
    Turnwire.Refusal decoded = Turnwire.refusalOf(error);
    Map<String, Object> rendered = new LinkedHashMap<>();
    rendered.put("refused", true);
    rendered.put("code", decoded.code.name());
    ErrorInfo info = decoded.errorInfo;
    if (info != null) {
      rendered.put("reason", info.getReason());
      rendered.put("domain", info.getDomain());
      rendered.put("metadata", new TreeMap<>(info.getMetadataMap()));
    }
    return rendered;
  }

  private Map<String, Object> refusals(Map<String, Object> submitted) {
    String key = (String) submitted.get("idempotency_key");
    GetOperationRequest read =
        GetOperationRequest.newBuilder()
            .setOperationId((String) submitted.get("operation_id"))
            .build();
    Map<String, Object> summary = new LinkedHashMap<>();
    // The first turn's key with another turn: IDEMPOTENCY_KEY_REUSED, nothing stored.
    summary.put(
        "idempotency_key_reused",
        refusal(
            () ->
                api.submit(
                    SubmitTurnRequest.newBuilder()
                        .setIdempotencyKey(key)
                        .setTurn(turn("another turn", Map.of()))
                        .build())));
    // No authorization metadata at all: UNAUTHENTICATED / CREDENTIALS_MISSING.
    summary.put("missing_token", refusal(() -> anonymous.get(read)));
    // Another principal reads the first turn: NOT_FOUND, exactly like a random id (§7).
    summary.put("cross_tenant_read", refusal(() -> other.get(read)));
    return summary;
  }

  @SuppressWarnings("unchecked")
  private static List<String> problemsWith(Map<String, Object> summary) {
    List<String> problems = new ArrayList<>();
    Map<String, Object> submitted = (Map<String, Object>) summary.get("submitted");
    if (!"OPERATION_STATE_SUCCEEDED".equals(submitted.get("state"))) {
      problems.add("first turn ended " + submitted.get("state"));
    }
    if (!Boolean.TRUE.equals(submitted.get("replayed"))
        || !submitted.get("operation_id").equals(submitted.get("replay_operation_id"))) {
      problems.add("the same key and request did not replay the first operation");
    }
    Map<String, Object> cancelled = (Map<String, Object>) summary.get("cancelled");
    if (!"OPERATION_STATE_CANCELLED".equals(cancelled.get("state"))) {
      problems.add("cancelled turn ended " + cancelled.get("state"));
    }
    Map<String, String> want =
        Map.of(
            "idempotency_key_reused", "IDEMPOTENCY_KEY_REUSED",
            "missing_token", "CREDENTIALS_MISSING",
            "cross_tenant_read", "OPERATION_NOT_FOUND");
    Map<String, Object> refusals = (Map<String, Object>) summary.get("refusals");
    for (Map.Entry<String, String> expected : new TreeMap<>(want).entrySet()) {
      Object reason = ((Map<String, Object>) refusals.get(expected.getKey())).get("reason");
      if (!expected.getValue().equals(reason)) {
        problems.add(expected.getKey() + ": reason " + reason + ", want " + expected.getValue());
      }
    }
    return problems;
  }

  private static int usageError(String message) {
    System.err.println("error: " + message);
    System.err.println(USAGE);
    return 2;
  }

  private static int run(String[] argv) throws Exception {
    Map<String, String> options = new LinkedHashMap<>();
    options.put("--address", System.getenv("TURNWIRE_ADDRESS"));
    options.put("--token", System.getenv("TURNWIRE_TOKEN"));
    options.put("--other-token", System.getenv("TURNWIRE_OTHER_TOKEN"));
    options.put("--ca-file", System.getenv("TURNWIRE_CA_FILE"));
    options.put("--stub", "blocking");
    options.put("--timeout", "60");
    options.put("--cancel-sleep-ms", "30000");
    for (int i = 0; i < argv.length; i++) {
      if (argv[i].equals("-h") || argv[i].equals("--help")) {
        System.out.println(USAGE);
        return 0;
      }
      if (!options.containsKey(argv[i]) || i + 1 == argv.length) {
        return usageError("unknown option or missing value: " + argv[i]);
      }
      options.put(argv[i], argv[++i]);
    }
    for (String required : List.of("--address", "--token", "--other-token")) {
      String value = options.get(required);
      if (value == null || value.isEmpty()) {
        return usageError(required + " is required");
      }
    }
    String stub = options.get("--stub");
    if (!stub.equals("blocking") && !stub.equals("async")) {
      return usageError("--stub must be blocking or async");
    }
    long seconds;
    int sleepMs;
    try {
      seconds = Long.parseLong(options.get("--timeout"));
      sleepMs = Integer.parseInt(options.get("--cancel-sleep-ms"));
    } catch (NumberFormatException notANumber) {
      return usageError("--timeout and --cancel-sleep-ms take whole numbers");
    }
    if (seconds <= 0 || sleepMs < 0) {
      return usageError("--timeout must be positive and --cancel-sleep-ms at least 0");
    }
    String caFile = options.get("--ca-file");
    if (caFile != null && caFile.isEmpty()) {
      caFile = null;
    }

    ManagedChannel channel = Turnwire.channel(options.get("--address"), caFile);
    Map<String, Object> summary = new LinkedHashMap<>();
    summary.put("address", options.get("--address"));
    summary.put("tls", caFile != null);
    summary.put("stub", stub);
    int code;
    try {
      boolean blocking = stub.equals("blocking");
      Walkthrough walkthrough =
          new Walkthrough(
              api(blocking, channel, options.get("--token"), seconds),
              api(blocking, channel, null, seconds),
              api(blocking, channel, options.get("--other-token"), seconds),
              sleepMs);
      long started = System.nanoTime();
      Map<String, Object> submitted = walkthrough.submitAndWatch("hello from java " + stub);
      summary.put("submitted", submitted);
      summary.put("cancelled", walkthrough.cancelWhileRunning());
      summary.put("refusals", walkthrough.refusals(submitted));
      List<String> problems = problemsWith(summary);
      summary.put("problems", problems);
      summary.put("elapsed_ms", TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started));
      code = problems.isEmpty() ? 0 : 1;
    } catch (StatusRuntimeException failed) {
      Map<String, Object> failure = refusal(failed);
      failure.put("message", failed.getStatus().getDescription());
      summary.put("failed", failure);
      code = 1;
    } finally {
      channel.shutdownNow().awaitTermination(10, TimeUnit.SECONDS);
    }
    System.out.println(new GsonBuilder().setPrettyPrinting().create().toJson(summary));
    return code;
  }

  private static TurnApi api(boolean blocking, ManagedChannel channel, String token, long s) {
    io.grpc.CallCredentials credentials = token == null ? null : Turnwire.bearer(token);
    return blocking
        ? new BlockingTurnApi(channel, credentials, s)
        : new AsyncTurnApi(channel, credentials, s);
  }

  public static void main(String[] argv) throws Exception {
    System.exit(run(argv));
  }
}

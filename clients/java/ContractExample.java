// Turnwire's contract from Java, with the classes `buf generate --template
// proto/buf.gen.yaml` writes to gen/java (protoc 3.21.12's Java generator) and
// protobuf-java 3.21.12 or newer 3.x (Debian: libprotobuf-java). See
// docs/CLIENTS.md; dev/turnwire/examples/ is the full client, with grpc-java.
//
//   javac -cp /usr/share/java/protobuf.jar -sourcepath gen/java -d out clients/java/ContractExample.java
//   java -cp out:/usr/share/java/protobuf.jar ContractExample TRAILER_FILE
//
// TRAILER_FILE holds the bytes of a refused call's `grpc-status-details-bin`
// trailer. With grpc-java you get the same google.rpc.Status from
// io.grpc.protobuf.StatusProto.fromThrowable(e); this example decodes it by hand
// so it needs nothing but protobuf-java. uint64 fields are Java `long`s: read
// them with Long.toUnsignedString / Long.compareUnsigned (a sequence past 2^63
// would print negative with Long.toString).

import com.google.protobuf.Any;
import com.google.rpc.ErrorInfo;
import com.google.rpc.RetryInfo;
import com.google.rpc.Status;
import dev.turnwire.common.v1.InputItem;
import dev.turnwire.common.v1.TurnKind;
import dev.turnwire.coordinator.v1.SubmitTurnRequest;
import dev.turnwire.coordinator.v1.Turn;
import dev.turnwire.coordinator.v1.WatchOperationRequest;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.TreeMap;

public final class ContractExample {
  private ContractExample() {}

  /** The ErrorInfo in a grpc-status-details-bin trailer, or null when there is none. */
  static ErrorInfo errorInfo(Status status) throws Exception {
    for (Any detail : status.getDetailsList()) {
      if (detail.is(ErrorInfo.class)) {
        return detail.unpack(ErrorInfo.class);
      }
    }
    return null;
  }

  static RetryInfo retryInfo(Status status) throws Exception {
    for (Any detail : status.getDetailsList()) {
      if (detail.is(RetryInfo.class)) {
        return detail.unpack(RetryInfo.class);
      }
    }
    return null;
  }

  public static void main(String[] args) throws Exception {
    if (args.length != 1) {
      System.err.println("usage: java ContractExample TRAILER_FILE");
      System.exit(2);
    }
    // A request as a Java client builds it; it survives a round trip on the wire.
    SubmitTurnRequest request =
        SubmitTurnRequest.newBuilder()
            .setIdempotencyKey("java-example-1")
            .setTurn(
                Turn.newBuilder()
                    .setKind(TurnKind.TURN_KIND_WRITABLE)
                    .addInputItems(
                        InputItem.newBuilder()
                            .setItemId("1")
                            .setRole("user")
                            .setContentType("text/plain")
                            .setContent(com.google.protobuf.ByteString.copyFromUtf8("hi"))))
            .build();
    SubmitTurnRequest parsed = SubmitTurnRequest.parseFrom(request.toByteArray());
    // The largest uint64 cursor, as a Java long: -1, printed unsigned.
    WatchOperationRequest watch =
        WatchOperationRequest.parseFrom(
            WatchOperationRequest.newBuilder().setAfterSequence(-1L).build().toByteArray());

    Status status = Status.parseFrom(Files.readAllBytes(Path.of(args[0])));
    ErrorInfo info = errorInfo(status);
    RetryInfo retry = retryInfo(status);
    Map<String, String> metadata = new TreeMap<>(info == null ? Map.of() : info.getMetadataMap());
    System.out.println("turn_kind=" + parsed.getTurn().getKind());
    System.out.println("max_cursor=" + Long.toUnsignedString(watch.getAfterSequence()));
    System.out.println("status_code=" + status.getCode());
    System.out.println("reason=" + (info == null ? "" : info.getReason()));
    System.out.println("domain=" + (info == null ? "" : info.getDomain()));
    System.out.println("metadata=" + metadata);
    if (retry != null) {
      long millis =
          retry.getRetryDelay().getSeconds() * 1000 + retry.getRetryDelay().getNanos() / 1_000_000;
      System.out.println("retry_delay_ms=" + millis);
    }
  }
}

package dev.turnwire.examples;

import com.google.rpc.ErrorInfo;
import com.google.rpc.RetryInfo;
import dev.turnwire.coordinator.v1.OperationState;
import io.grpc.CallCredentials;
import io.grpc.ChannelCredentials;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.Status;
import io.grpc.TlsChannelCredentials;
import io.grpc.protobuf.StatusProto;
import java.io.File;
import java.io.IOException;
import java.util.EnumSet;
import java.util.Set;
import java.util.concurrent.Executor;

/**
 * Turnwire's public API from Java with grpc-java: the channel, the bearer token, and the
 * refusal's google.rpc.ErrorInfo. See docs/CLIENTS.md.
 *
 * <p>The three rules every client has to get right are kept here: every call carries {@code
 * authorization: Bearer <token>} ({@link #bearer}); a refusal's typed reason is a
 * google.rpc.ErrorInfo in the {@code grpc-status-details-bin} trailer, not the message text
 * ({@link #refusalOf}); uint64 fields (event sequences, cursors) arrive in a signed {@code long},
 * so print them with {@link Long#toUnsignedString} and compare them with {@link
 * Long#compareUnsigned}.
 */
public final class Turnwire {
  /** ErrorInfo.domain on every refusal Turnwire's handlers send. */
  public static final String DOMAIN = "turnwire.dev";

  private static final Metadata.Key<String> AUTHORIZATION =
      Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);

  private static final Set<OperationState> TERMINAL =
      EnumSet.of(
          OperationState.OPERATION_STATE_SUCCEEDED,
          OperationState.OPERATION_STATE_FAILED,
          OperationState.OPERATION_STATE_CANCELLED,
          OperationState.OPERATION_STATE_TIMED_OUT,
          OperationState.OPERATION_STATE_PROTOCOL_ERROR,
          OperationState.OPERATION_STATE_REJECTED);

  private Turnwire() {}

  /**
   * A channel to a coordinator: TLS trusting {@code caFile} (the CA of {@code turnwire certs} or
   * {@code turnwire up}), or plaintext when it is null, which coordinators serve on loopback only.
   */
  public static ManagedChannel channel(String address, String caFile) throws IOException {
    ChannelCredentials transport =
        caFile == null
            ? InsecureChannelCredentials.create()
            : TlsChannelCredentials.newBuilder().trustManager(new File(caFile)).build();
    return Grpc.newChannelBuilder(address, transport).build();
  }

  /** Per-call credentials: the bearer token (the principal comes from it, never the request). */
  public static CallCredentials bearer(String token) {
    return new CallCredentials() {
      @Override
      public void applyRequestMetadata(
          RequestInfo requestInfo, Executor appExecutor, MetadataApplier applier) {
        Metadata headers = new Metadata();
        headers.put(AUTHORIZATION, "Bearer " + token);
        applier.apply(headers);
      }

      @Override
      public void thisUsesUnstableApi() {}
    };
  }

  /** The typed part of a failed call. */
  public static final class Refusal {
    public final Status.Code code;
    /** The ErrorInfo, or null: then the failure did not come from Turnwire's handlers. */
    public final ErrorInfo errorInfo;
    /** The RetryInfo that RESOURCE_EXHAUSTED carries, or null. */
    public final RetryInfo retryInfo;

    Refusal(Status.Code code, ErrorInfo errorInfo, RetryInfo retryInfo) {
      this.code = code;
      this.errorInfo = errorInfo;
      this.retryInfo = retryInfo;
    }
  }

  /** Reads a failed call's status and its details (grpc-protobuf's StatusProto). */
  public static Refusal refusalOf(Throwable error) {
    Status.Code code = Status.fromThrowable(error).getCode();
    com.google.rpc.Status details = StatusProto.fromThrowable(error);
    ErrorInfo info = null;
    RetryInfo retry = null;
    if (details != null) {
      for (com.google.protobuf.Any any : details.getDetailsList()) {
        try {
          if (any.is(ErrorInfo.class)) {
            info = any.unpack(ErrorInfo.class);
          } else if (any.is(RetryInfo.class)) {
            retry = any.unpack(RetryInfo.class);
          }
        } catch (com.google.protobuf.InvalidProtocolBufferException malformed) {
          // A detail that does not decode is no detail: the code still stands.
        }
      }
    }
    return new Refusal(code, info, retry);
  }

  /** Whether an operation in this state has ended (PROTOCOL.md §2). */
  public static boolean isTerminal(OperationState state) {
    return TERMINAL.contains(state);
  }
}

package dev.turnwire.examples;

import dev.turnwire.coordinator.v1.CancelOperationRequest;
import dev.turnwire.coordinator.v1.CancelOperationResponse;
import dev.turnwire.coordinator.v1.GetOperationRequest;
import dev.turnwire.coordinator.v1.GetOperationResponse;
import dev.turnwire.coordinator.v1.OperationEvent;
import dev.turnwire.coordinator.v1.SubmitTurnRequest;
import dev.turnwire.coordinator.v1.SubmitTurnResponse;
import dev.turnwire.coordinator.v1.TurnServiceGrpc;
import dev.turnwire.coordinator.v1.WatchOperationRequest;
import dev.turnwire.coordinator.v1.WatchOperationResponse;
import io.grpc.CallCredentials;
import io.grpc.Channel;
import io.grpc.Context;
import java.util.Iterator;
import java.util.concurrent.TimeUnit;
import java.util.function.Predicate;

/** The walkthrough's calls with grpc-java's blocking stub (TurnServiceBlockingStub). */
final class BlockingTurnApi implements TurnApi {
  private final TurnServiceGrpc.TurnServiceBlockingStub stub;
  private final long seconds;

  /** {@code credentials} null: calls without a token. */
  BlockingTurnApi(Channel channel, CallCredentials credentials, long seconds) {
    TurnServiceGrpc.TurnServiceBlockingStub plain = TurnServiceGrpc.newBlockingStub(channel);
    this.stub = credentials == null ? plain : plain.withCallCredentials(credentials);
    this.seconds = seconds;
  }

  private TurnServiceGrpc.TurnServiceBlockingStub withDeadline() {
    return stub.withDeadlineAfter(seconds, TimeUnit.SECONDS);
  }

  @Override
  public SubmitTurnResponse submit(SubmitTurnRequest request) {
    return withDeadline().submitTurn(request);
  }

  @Override
  public GetOperationResponse get(GetOperationRequest request) {
    return withDeadline().getOperation(request);
  }

  @Override
  public CancelOperationResponse cancel(CancelOperationRequest request) {
    return withDeadline().cancelOperation(request);
  }

  @Override
  public Watched watch(String operationId, long after, Predicate<OperationEvent> until) {
    WatchOperationRequest request =
        WatchOperationRequest.newBuilder()
            .setOperationId(operationId)
            .setAfterSequence(after)
            .build();
    Watched watched = new Watched(after);
    // The blocking iterator's call lives in this context: cancelling it ends the call.
    Context.CancellableContext call = Context.current().withCancellation();
    Context previous = call.attach();
    try {
      Iterator<WatchOperationResponse> messages = withDeadline().watchOperation(request);
      while (messages.hasNext()) {
        WatchOperationResponse message = messages.next();
        if (!watched.add(message)) {
          throw watched.backwards(message);
        }
        if (until != null && until.test(message.getEvent())) {
          break;
        }
      }
      return watched;
    } finally {
      call.detach(previous);
      call.cancel(null);
    }
  }
}

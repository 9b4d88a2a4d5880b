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
import io.grpc.stub.ClientCallStreamObserver;
import io.grpc.stub.ClientResponseObserver;
import io.grpc.stub.StreamObserver;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.function.BiConsumer;
import java.util.function.Predicate;

/**
 * The walkthrough's calls with grpc-java's asynchronous stub (TurnServiceStub): each call
 * completes a CompletableFuture from its StreamObserver, which this example then waits for.
 */
final class AsyncTurnApi implements TurnApi {
  private final TurnServiceGrpc.TurnServiceStub stub;
  private final long seconds;

  /** {@code credentials} null: calls without a token. */
  AsyncTurnApi(Channel channel, CallCredentials credentials, long seconds) {
    TurnServiceGrpc.TurnServiceStub plain = TurnServiceGrpc.newStub(channel);
    this.stub = credentials == null ? plain : plain.withCallCredentials(credentials);
    this.seconds = seconds;
  }

  private TurnServiceGrpc.TurnServiceStub withDeadline() {
    return stub.withDeadlineAfter(seconds, TimeUnit.SECONDS);
  }

  /** A unary call's reply as a future. */
  private static <Q, R> CompletableFuture<R> unary(BiConsumer<Q, StreamObserver<R>> call, Q req) {
    CompletableFuture<R> reply = new CompletableFuture<>();
    call.accept(
        req,
        new StreamObserver<R>() {
          @Override
          public void onNext(R value) {
            reply.complete(value);
          }

          @Override
          public void onError(Throwable error) {
            reply.completeExceptionally(error);
          }

          @Override
          public void onCompleted() {}
        });
    return reply;
  }

  /** Waits for a future; a failed call rethrows its StatusRuntimeException as it came. */
  private static <R> R await(CompletableFuture<R> future) {
    try {
      return future.get();
    } catch (ExecutionException failed) {
      if (failed.getCause() instanceof RuntimeException) {
        throw (RuntimeException) failed.getCause();
      }
      throw new IllegalStateException(failed.getCause());
    } catch (InterruptedException interrupted) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException(interrupted);
    }
  }

  @Override
  public SubmitTurnResponse submit(SubmitTurnRequest request) {
    return await(unary(withDeadline()::submitTurn, request));
  }

  @Override
  public GetOperationResponse get(GetOperationRequest request) {
    return await(unary(withDeadline()::getOperation, request));
  }

  @Override
  public CancelOperationResponse cancel(CancelOperationRequest request) {
    return await(unary(withDeadline()::cancelOperation, request));
  }

  @Override
  public Watched watch(String operationId, long after, Predicate<OperationEvent> until) {
    WatchOperationRequest request =
        WatchOperationRequest.newBuilder()
            .setOperationId(operationId)
            .setAfterSequence(after)
            .build();
    CompletableFuture<Watched> done = new CompletableFuture<>();
    Watched watched = new Watched(after);
    withDeadline()
        .watchOperation(
            request,
            new ClientResponseObserver<WatchOperationRequest, WatchOperationResponse>() {
              private ClientCallStreamObserver<WatchOperationRequest> call;

              @Override
              public void beforeStart(ClientCallStreamObserver<WatchOperationRequest> call) {
                this.call = call;
              }

              @Override
              public void onNext(WatchOperationResponse message) {
                if (done.isDone()) {
                  return;
                }
                if (!watched.add(message)) {
                  done.completeExceptionally(watched.backwards(message));
                  call.cancel("sequence went backwards", null);
                } else if (until != null && until.test(message.getEvent())) {
                  done.complete(watched); // before the cancel, whose CANCELLED is ours
                  call.cancel("seen what was wanted", null);
                }
              }

              @Override
              public void onError(Throwable error) {
                done.completeExceptionally(error); // no effect once complete
              }

              @Override
              public void onCompleted() {
                done.complete(watched);
              }
            });
    return await(done);
  }
}

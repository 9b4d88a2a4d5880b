package dev.turnwire.examples;

import dev.turnwire.coordinator.v1.CancelOperationRequest;
import dev.turnwire.coordinator.v1.CancelOperationResponse;
import dev.turnwire.coordinator.v1.GetOperationRequest;
import dev.turnwire.coordinator.v1.GetOperationResponse;
import dev.turnwire.coordinator.v1.Operation;
import dev.turnwire.coordinator.v1.OperationEvent;
import dev.turnwire.coordinator.v1.SubmitTurnRequest;
import dev.turnwire.coordinator.v1.SubmitTurnResponse;
import dev.turnwire.coordinator.v1.WatchOperationResponse;
import java.util.ArrayList;
import java.util.List;
import java.util.function.Predicate;

/**
 * The calls the walkthrough makes, as one principal (or none). {@link BlockingTurnApi} makes them
 * with grpc-java's blocking stub, {@link AsyncTurnApi} with its asynchronous (StreamObserver)
 * stub; both throw {@link io.grpc.StatusRuntimeException} for a failed call.
 */
interface TurnApi {
  SubmitTurnResponse submit(SubmitTurnRequest request);

  GetOperationResponse get(GetOperationRequest request);

  CancelOperationResponse cancel(CancelOperationRequest request);

  /**
   * Streams the operation's events after the cursor {@code after} (0: from the start) until the
   * stream ends after the terminal event, or until {@code until} holds for an event: the call is
   * then cancelled, the turn is not (to stop it, call {@link #cancel}).
   */
  Watched watch(String operationId, long after, Predicate<OperationEvent> until);

  /** What one watch saw. */
  final class Watched {
    final List<OperationEvent> events = new ArrayList<>();
    /** The operation as of the last event (null if none came). */
    Operation operation;
    /** The last sequence seen (a uint64 in a long: compare it unsigned). */
    long cursor;

    Watched(long after) {
      this.cursor = after;
    }

    /** Records one message; false if its sequence does not follow the cursor. */
    boolean add(WatchOperationResponse message) {
      long sequence = message.getEvent().getSequence();
      if (Long.compareUnsigned(sequence, cursor) <= 0) {
        return false;
      }
      events.add(message.getEvent());
      operation = message.getOperation();
      cursor = sequence;
      return true;
    }

    IllegalStateException backwards(WatchOperationResponse message) {
      return new IllegalStateException(
          "sequence went backwards: "
              + Long.toUnsignedString(message.getEvent().getSequence())
              + " after "
              + Long.toUnsignedString(cursor));
    }
  }
}

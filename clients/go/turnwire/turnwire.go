// Package turnwire calls Turnwire's public API (turnwire.coordinator.v1.TurnService)
// from Go with the stubs generated into turnwire.dev/clients/go/gen. See
// docs/CLIENTS.md in the repository.
//
// The three rules every client has to get right are kept here:
//   - every call carries "authorization: Bearer <token>" (WithToken);
//   - a refusal's typed reason is a google.rpc.ErrorInfo in the status details
//     (the grpc-status-details-bin trailer), not the message text (Refusal);
//   - event sequences and watch cursors are uint64: hand a cursor back exactly
//     as it came (Watch).
package turnwire

import (
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	coordinatorv1 "turnwire.dev/clients/go/gen/turnwire/coordinator/v1"
)

// Domain is ErrorInfo.domain on every refusal Turnwire's handlers send.
const Domain = "turnwire.dev"

// Dial connects to a coordinator. With caFile (the CA of `turnwire certs` or
// `turnwire up`) it speaks TLS and checks the coordinator's certificate against
// that CA; with "" it speaks plaintext, which coordinators serve on loopback only.
func Dial(address, caFile string) (*grpc.ClientConn, error) {
	transport := grpc.WithInsecure()
	if caFile != "" {
		tls, err := credentials.NewClientTLSFromFile(caFile, "")
		if err != nil {
			return nil, fmt.Errorf("reading the CA %s: %w", caFile, err)
		}
		transport = grpc.WithTransportCredentials(tls)
	}
	return grpc.Dial(address, transport)
}

// WithToken returns ctx with the bearer token every call must carry: the
// principal comes from the token, never from the request.
func WithToken(ctx context.Context, token string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

// Refusal is the typed part of a failed call.
type Refusal struct {
	Code codes.Code
	// Info is the google.rpc.ErrorInfo of the status details, or nil when
	// there is none: then the failure did not come from Turnwire's handlers
	// (a transport error, a deadline, a proxy).
	Info *errdetails.ErrorInfo
	// Retry is the google.rpc.RetryInfo that RESOURCE_EXHAUSTED carries, or nil.
	Retry *errdetails.RetryInfo
}

// RefusalOf reads err's gRPC status and its details.
func RefusalOf(err error) Refusal {
	st := status.Convert(err)
	refusal := Refusal{Code: st.Code()}
	for _, detail := range st.Details() {
		switch typed := detail.(type) {
		case *errdetails.ErrorInfo:
			refusal.Info = typed
		case *errdetails.RetryInfo:
			refusal.Retry = typed
		}
	}
	return refusal
}

// Reason is ErrorInfo.reason ("IDEMPOTENCY_KEY_REUSED", ...), or "" when the
// refusal carries no ErrorInfo.
func (r Refusal) Reason() string {
	if r.Info == nil {
		return ""
	}
	return r.Info.GetReason()
}

// codeNames are the canonical gRPC code names (codes.Code.String() spells
// them in Go's CamelCase).
var codeNames = [...]string{
	"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
	"ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
	"ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
	"UNAUTHENTICATED",
}

// CodeName is the canonical name of a gRPC code ("NOT_FOUND").
func CodeName(code codes.Code) string {
	if int(code) < len(codeNames) {
		return codeNames[code]
	}
	return code.String()
}

// IsTerminal says whether an operation in this state has ended (§2 of PROTOCOL.md).
func IsTerminal(state coordinatorv1.OperationState) bool {
	switch state {
	case coordinatorv1.OperationState_OPERATION_STATE_SUCCEEDED,
		coordinatorv1.OperationState_OPERATION_STATE_FAILED,
		coordinatorv1.OperationState_OPERATION_STATE_CANCELLED,
		coordinatorv1.OperationState_OPERATION_STATE_TIMED_OUT,
		coordinatorv1.OperationState_OPERATION_STATE_PROTOCOL_ERROR,
		coordinatorv1.OperationState_OPERATION_STATE_REJECTED:
		return true
	}
	return false
}

// Watched is what one Watch saw.
type Watched struct {
	Events []*coordinatorv1.OperationEvent
	// Operation is the operation as of the last event (nil if none came).
	Operation *coordinatorv1.Operation
	// Cursor is the last sequence seen: resume a watch with it.
	Cursor uint64
}

// Watch streams an operation's events after the cursor `after` (0: from the
// start) until the stream ends after the terminal event, or until `until`
// returns true for an event (the call is then cancelled; the turn is not: to
// stop it, call CancelOperation).
func Watch(
	ctx context.Context,
	client coordinatorv1.TurnServiceClient,
	operationID string,
	after uint64,
	until func(*coordinatorv1.OperationEvent) bool,
) (Watched, error) {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	stream, err := client.WatchOperation(ctx, &coordinatorv1.WatchOperationRequest{
		OperationId:   operationID,
		AfterSequence: after,
	})
	watched := Watched{Cursor: after}
	if err != nil {
		return watched, err
	}
	for {
		message, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return watched, nil
		}
		if err != nil {
			return watched, err
		}
		event := message.GetEvent()
		if event.GetSequence() <= watched.Cursor {
			return watched, fmt.Errorf(
				"sequence went backwards: %d after %d", event.GetSequence(), watched.Cursor)
		}
		watched.Events = append(watched.Events, event)
		watched.Operation = message.GetOperation()
		watched.Cursor = event.GetSequence()
		if until != nil && until(event) {
			return watched, nil // the deferred stop() cancels the call
		}
	}
}

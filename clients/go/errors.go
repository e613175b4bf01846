package leasefence

import (
	"errors"
	"fmt"

	"github.com/jackc/pgconn"
)

// Sentinel errors, for errors.Is. The errors this package returns carry
// details: *FenceError (a write or COMMIT refused, by SQLSTATE),
// *LeaseError (a lease not granted or not renewed: a definite no),
// *LeaseUnknownError (the outcome is unknown) and *DataCorruptedError
// (SQLSTATE XX001).
var (
	// ErrStaleGeneration: SQLSTATE LF001, a newer holder's generation is stored.
	ErrStaleGeneration = errors.New("lease_fence: stale generation (LF001)")
	// ErrMissingGeneration: SQLSTATE LF002, a write to a strict table without a generation.
	ErrMissingGeneration = errors.New("lease_fence: missing generation (LF002)")
	// ErrConflictingGeneration: SQLSTATE LF003, two generations in one transaction.
	ErrConflictingGeneration = errors.New("lease_fence: conflicting generation (LF003)")
	// ErrUnissuedGeneration: SQLSTATE LF004, a generation never issued.
	ErrUnissuedGeneration = errors.New("lease_fence: unissued generation (LF004)")
	// ErrLeaseLostAtCommit: SQLSTATE LF010, the transaction's lease was lost.
	ErrLeaseLostAtCommit = errors.New("lease_fence: lease lost at commit (LF010)")
	// ErrTransactionRolledBack: PostgreSQL answered COMMIT with ROLLBACK. A
	// statement of the transaction failed and the work went on without
	// returning its error (it caught a refused write, say): nothing of the
	// transaction was committed, and a transaction-scoped lease was released
	// with it. Fenced, Job and TransactionLease return it (wrapped: match it
	// with errors.Is) instead of nil; never treat the work as done. The error
	// the work swallowed is not known to the library: it is the work's.
	ErrTransactionRolledBack = errors.New("lease_fence: the transaction was rolled back at COMMIT")

	// ErrLeaseDenied: a definite no (busy, unavailable, lost, stale,
	// insufficient_validity, unreplicated). Every *LeaseError is one.
	ErrLeaseDenied = errors.New("lease_fence: lease denied")
	// ErrLeaseBusy: another identity holds the lease (an ErrLeaseDenied).
	ErrLeaseBusy = errors.New("lease_fence: lease busy")
	// ErrLeaseUnavailable: nothing was sent, Redis is unreachable or
	// refusing (an ErrLeaseDenied); retrying is safe.
	ErrLeaseUnavailable = errors.New("lease_fence: lease unavailable")
	// ErrLeaseLost: renew found the lease gone (an ErrLeaseDenied).
	ErrLeaseLost = errors.New("lease_fence: lease lost")
	// ErrLeaseUnknown: the request may have been applied; deliberately not
	// an ErrLeaseDenied. Every *LeaseUnknownError is one.
	ErrLeaseUnknown = errors.New("lease_fence: lease outcome unknown")

	// ErrDataCorrupted: SQLSTATE XX001, data corrupted: a key in Redis holds
	// what lease_fence never writes there (a generation key that is not a
	// generation, one far above what the database issued, an oversized
	// value). Nothing was acquired; no retry helps: a person must look at
	// the key. Every *DataCorruptedError is one; the name is the other
	// libraries' DataCorrupted.
	ErrDataCorrupted = errors.New("lease_fence: data corrupted (XX001)")

	// ErrInvalidArgument: refused before anything was sent.
	ErrInvalidArgument = errors.New("lease_fence: invalid argument")
	// ErrInTransaction: the connection is inside a transaction the caller
	// opened (SQLSTATE 25001 in the other libraries); nothing was sent.
	ErrInTransaction = errors.New("lease_fence: the connection is in a transaction (commit or roll back first)")
)

var fenceSentinels = map[string]error{
	"LF001": ErrStaleGeneration,
	"LF002": ErrMissingGeneration,
	"LF003": ErrConflictingGeneration,
	"LF004": ErrUnissuedGeneration,
	"LF010": ErrLeaseLostAtCommit,
}

// FenceError is a write or COMMIT that lease_fence refused (SQLSTATE LF001,
// LF002, LF003, LF004, LF010), from the server's error fields, never from its
// message text. errors.Is(err, ErrStaleGeneration) (and the others) match by
// SQLSTATE; Unwrap gives pgx's *pgconn.PgError. Never retry one with the
// same generation.
type FenceError struct {
	SQLState string // LF001, ...
	Message  string // the server's primary message
	Detail   string // for humans and logs; never parse it
	Schema   string // a refused row's schema, or "lease_fence" for a resource
	Table    string // a refused row's table, or "resource_generation"
	Column   string // the refused row's fence column
	Resource string // a refused resource fence's resource (the error's constraint field)
	Err      *pgconn.PgError
}

func (e *FenceError) Error() string {
	if e.Detail != "" {
		return fmt.Sprintf("%s (SQLSTATE %s; %s)", e.Message, e.SQLState, e.Detail)
	}
	return fmt.Sprintf("%s (SQLSTATE %s)", e.Message, e.SQLState)
}

// Unwrap returns the driver's error.
func (e *FenceError) Unwrap() error { return e.Err }

// Is matches the sentinel of its SQLSTATE.
func (e *FenceError) Is(target error) bool {
	s, ok := fenceSentinels[e.SQLState]
	return ok && target == s
}

// Translate returns a *FenceError for an error whose chain holds a
// *pgconn.PgError with SQLSTATE LF001, LF002, LF003, LF004 or LF010, and err
// unchanged otherwise: for writes made outside Fenced, Job and TransactionLease.
func Translate(err error) error {
	if err == nil {
		return nil
	}
	var fe *FenceError
	if errors.As(err, &fe) {
		return err
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return err
	}
	if _, ok := fenceSentinels[pe.Code]; !ok {
		return err
	}
	return &FenceError{SQLState: pe.Code, Message: pe.Message, Detail: pe.Detail,
		Schema: pe.SchemaName, Table: pe.TableName, Column: pe.ColumnName,
		Resource: pe.ConstraintName, Err: pe}
}

// DataCorruptedError is a lease_fence call that the server refused with
// SQLSTATE XX001 (data corrupted). errors.Is(err, ErrDataCorrupted) is true;
// Unwrap gives pgx's *pgconn.PgError, as before the library named it.
type DataCorruptedError struct {
	Message string // the server's primary message
	Detail  string
	Err     *pgconn.PgError
}

func (e *DataCorruptedError) Error() string {
	if e.Detail != "" {
		return fmt.Sprintf("%s (SQLSTATE XX001; %s)", e.Message, e.Detail)
	}
	return fmt.Sprintf("%s (SQLSTATE XX001)", e.Message)
}

// Unwrap returns the driver's error.
func (e *DataCorruptedError) Unwrap() error { return e.Err }

// Is matches ErrDataCorrupted.
func (e *DataCorruptedError) Is(target error) bool { return target == ErrDataCorrupted }

// dataCorrupted: err as a *DataCorruptedError when its chain holds a
// *pgconn.PgError with SQLSTATE XX001, else unchanged.
func dataCorrupted(err error) error {
	var pe *pgconn.PgError
	if err == nil || !errors.As(err, &pe) || pe.Code != "XX001" {
		return err
	}
	var dc *DataCorruptedError
	if errors.As(err, &dc) {
		return err
	}
	return &DataCorruptedError{Message: pe.Message, Detail: pe.Detail, Err: pe}
}

// LeaseError is a lease that was not granted or not renewed: a definite no.
// errors.Is(err, ErrLeaseDenied) is true for every one; ErrLeaseBusy,
// ErrLeaseUnavailable and ErrLeaseLost match their status.
type LeaseError struct {
	Op     string // "acquire", "renew", "campaign" or "take_over"
	Status string // busy, unavailable, lost, stale, insufficient_validity, unreplicated; timeout (take_over)
	Reason string // why, for unavailable and unreplicated; else empty
	Lease  *Lease // acquire: the row it returned; renew: the lease passed
}

func (e *LeaseError) Error() string {
	return leaseMessage(e.Op, e.Lease, e.Status, e.Reason)
}

// Is matches ErrLeaseDenied, and the sentinel of its status.
func (e *LeaseError) Is(target error) bool {
	switch target {
	case ErrLeaseDenied:
		return true
	case ErrLeaseBusy:
		return e.Status == "busy"
	case ErrLeaseUnavailable:
		return e.Status == "unavailable"
	case ErrLeaseLost:
		return e.Status == "lost"
	case ErrTakeOverTimeout:
		return e.Status == "timeout"
	}
	return false
}

// LeaseUnknownError: the request may have been applied, in part or whole,
// and nobody can tell (acquired / renewed IS NULL). The lease may be held:
// do not work under it, and do not assume it free. Not an ErrLeaseDenied.
// Lease carries the identity and generation (release it with them).
type LeaseUnknownError struct {
	Op     string
	Status string
	Reason string
	Lease  *Lease
}

func (e *LeaseUnknownError) Error() string {
	return leaseMessage(e.Op, e.Lease, e.Status, e.Reason)
}

// Is matches ErrLeaseUnknown only.
func (e *LeaseUnknownError) Is(target error) bool { return target == ErrLeaseUnknown }

func leaseMessage(op string, l *Lease, status, reason string) string {
	res := ""
	if l != nil {
		res = l.Resource
	}
	m := fmt.Sprintf("lease_fence: %s of lease %q: %s", op, res, status)
	if reason != "" {
		m += " (" + reason + ")"
	}
	return m
}

func invalid(format string, args ...interface{}) error {
	return fmt.Errorf("%w: "+format, append([]interface{}{ErrInvalidArgument}, args...)...)
}

package leasefence

import "fmt"

// What the verbs make of one row of lease_fence.acquire / renew / release,
// without a connection: the unit tests check these against every "statuses"
// row of scripts/answers.json.

// acquireResult: the lease when granted; nil for busy when busyIsNil
// (TryAcquire); else the error for its status.
func acquireResult(row *Lease, busyIsNil bool) (*Lease, error) {
	if row.IsAcquired() {
		return row, nil
	}
	if busyIsNil && row.Acquired != nil && !*row.Acquired && row.Status == "busy" {
		return nil, nil
	}
	return nil, leaseError(row.Acquired, row.Status, row, "acquire", row.Reason)
}

// renewResult: the validity left when renewed; else the error for its status.
func renewResult(lease *Lease, renewed *bool, status string, validityMs *int64, reason string) (int64, error) {
	if renewed == nil || !*renewed {
		return 0, leaseError(renewed, status, lease, "renew", reason)
	}
	if validityMs == nil {
		return 0, nil
	}
	return *validityMs, nil
}

// releaseResult: every status release answers is returned, never an error;
// a status it never answers is an error.
func releaseResult(released *bool, status string) (ReleaseStatus, error) {
	switch s := ReleaseStatus(status); s {
	case Released, NotHeld, ReleaseUnavailable, ReleaseUnknown:
		return s, nil
	}
	return "", fmt.Errorf("lease_fence: release answered an unexpected status %q", status)
}

// leaseError: unknown (ok NULL) is a *LeaseUnknownError, whatever the status
// says; every other failure a *LeaseError.
func leaseError(ok *bool, status string, lease *Lease, op, reason string) error {
	if ok == nil || status == "unknown" {
		return &LeaseUnknownError{Op: op, Status: status, Reason: reason, Lease: lease}
	}
	return &LeaseError{Op: op, Status: status, Reason: reason, Lease: lease}
}

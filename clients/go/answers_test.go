package leasefence

// The shared answer table, scripts/answers.json, row by row, without a
// server: for every row of its "statuses", what Acquire, TryAcquire, Renew
// and Release do with a row of that status (acquireResult, renewResult,
// releaseResult: what the verbs apply to the row the SQL function returns).
// The table is $LF_ANSWERS, else scripts/answers.json at or above the
// working directory. The Go library has no client-side mode: the "replies"
// and "errors" rows are not its to decode.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/jackc/pgconn"
)

func answersPath(t *testing.T) string {
	if p := os.Getenv("LF_ANSWERS"); p != "" {
		return p
	}
	d, _ := os.Getwd()
	for {
		f := filepath.Join(d, "scripts", "answers.json")
		if _, err := os.Stat(f); err == nil {
			return f
		}
		up := filepath.Dir(d)
		if up == d {
			t.Fatal("scripts/answers.json not found (set LF_ANSWERS)")
		}
		d = up
	}
}

type statusRow map[string]interface{}

func statuses(t *testing.T) []statusRow {
	f := answersPath(t)
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	var root struct {
		Statuses []statusRow `json:"statuses"`
	}
	if err := json.Unmarshal(b, &root); err != nil {
		t.Fatalf("%s: %v", f, err)
	}
	if len(root.Statuses) == 0 {
		t.Fatalf("%s has no \"statuses\"", f)
	}
	return root.Statuses
}

// boolOrNil: the row's true / false / null.
func boolOrNil(t *testing.T, r statusRow, k string) *bool {
	v, ok := r[k]
	if !ok {
		t.Fatalf("row %v has no %q", r, k)
	}
	if v == nil {
		return nil
	}
	b := v.(bool)
	return &b
}

// outcomeName: what answers.json calls what the verb did: "return", "none",
// or the exception's name (LeaseBusy, LeaseUnavailable, LeaseLost,
// LeaseDenied, LeaseUnknown). It also checks the error's errors.Is family.
func outcomeName(t *testing.T, ret interface{}, isNil bool, err error) string {
	t.Helper()
	if err == nil {
		if isNil {
			return "none"
		}
		return "return"
	}
	var unk *LeaseUnknownError
	var le *LeaseError
	switch {
	case errors.As(err, &unk):
		if errors.Is(err, ErrLeaseDenied) {
			t.Errorf("LeaseUnknown must not be ErrLeaseDenied: %v", err)
		}
		if !errors.Is(err, ErrLeaseUnknown) {
			t.Errorf("LeaseUnknown must be ErrLeaseUnknown: %v", err)
		}
		return "LeaseUnknown"
	case errors.As(err, &le):
		if !errors.Is(err, ErrLeaseDenied) {
			t.Errorf("a *LeaseError must be ErrLeaseDenied: %v", err)
		}
		if errors.Is(err, ErrLeaseUnknown) {
			t.Errorf("a *LeaseError must not be ErrLeaseUnknown: %v", err)
		}
		n := 0
		name := "LeaseDenied"
		for s, e := range map[string]error{"LeaseBusy": ErrLeaseBusy, "LeaseUnavailable": ErrLeaseUnavailable, "LeaseLost": ErrLeaseLost} {
			if errors.Is(err, e) {
				n++
				name = s
			}
		}
		if n > 1 {
			t.Errorf("matches %d of busy/unavailable/lost: %v", n, err)
		}
		return name
	}
	return fmt.Sprintf("error %T: %v", err, err)
}

func TestAnswerTable(t *testing.T) {
	rows := statuses(t)
	for i, r := range rows {
		r := r
		op, _ := r["operation"].(string)
		status, _ := r["status"].(string)
		t.Run(fmt.Sprintf("%02d_%s_%s", i+1, op, status), func(t *testing.T) {
			switch op {
			case "acquire":
				acquired := boolOrNil(t, r, "acquired")
				row := &Lease{Resource: "r", Identity: "0123456789abcdef0123456789abcdef",
					Generation: 42, HasGeneration: true, ValidityMs: 1000,
					Acquired: acquired, Status: status, Reason: "why"}
				for _, verb := range []string{"acquire", "try_acquire"} {
					want, _ := r[verb].(string)
					l, err := acquireResult(row, verb == "try_acquire")
					got := outcomeName(t, l, l == nil, err)
					if got != want {
						t.Errorf("%s of a %q row: %s, answers.json says %s", verb, status, got, want)
					}
					if err == nil && l != nil && l != row {
						t.Errorf("%s returned another lease than the row", verb)
					}
					var unk *LeaseUnknownError
					if errors.As(err, &unk) && (unk.Lease == nil || unk.Lease.Identity != row.Identity || unk.Lease.Generation != 42) {
						t.Errorf("%s: *LeaseUnknownError does not carry the lease: %+v", verb, unk.Lease)
					}
					var le *LeaseError
					if errors.As(err, &le) && (le.Status != status || le.Reason != "why") {
						t.Errorf("%s: *LeaseError status %q reason %q", verb, le.Status, le.Reason)
					}
				}
			case "renew":
				renewed := boolOrNil(t, r, "renewed")
				want, _ := r["renew"].(string)
				v := int64(900)
				lease := NewLease("r", "0123456789abcdef0123456789abcdef", 42)
				ms, err := renewResult(lease, renewed, status, &v, "")
				got := outcomeName(t, ms, false, err)
				if got != want {
					t.Errorf("renew of a %q row: %s, answers.json says %s", status, got, want)
				}
				if err == nil && ms != 900 {
					t.Errorf("renew returned %d, not the validity 900", ms)
				}
			case "release":
				released := boolOrNil(t, r, "released")
				want, _ := r["release"].(string)
				s, err := releaseResult(released, status)
				got := outcomeName(t, s, false, err)
				if got != want {
					t.Errorf("release of a %q row: %s, answers.json says %s", status, got, want)
				}
				if err == nil && string(s) != status {
					t.Errorf("release returned %q for status %q", s, status)
				}
			default:
				t.Fatalf("answers.json: unknown operation %q", op)
			}
		})
	}
}

// A release status the extension never answers is an error, not a status.
func TestReleaseUnexpectedStatus(t *testing.T) {
	if _, err := releaseResult(nil, "maybe"); err == nil {
		t.Fatal("an unknown release status was accepted")
	}
}

// Translate maps by SQLSTATE, never by message text.
func TestTranslateBySQLState(t *testing.T) {
	var fe0 *FenceError
	for code, sentinel := range fenceSentinels {
		pe := &pgconnError{Code: code, Message: "anything", SchemaName: "public", TableName: "account", ColumnName: "fence", ConstraintName: "res"}
		err := Translate(fmt.Errorf("wrapped: %w", pe.pg()))
		var fe *FenceError
		if !errors.As(err, &fe) || !errors.Is(err, sentinel) {
			t.Errorf("%s: %v is not %v", code, err, sentinel)
			continue
		}
		if fe.SQLState != code || fe.Schema != "public" || fe.Table != "account" || fe.Column != "fence" || fe.Resource != "res" {
			t.Errorf("%s: fields %+v", code, fe)
		}
		for other, s := range fenceSentinels {
			if other != code && errors.Is(err, s) {
				t.Errorf("%s also matches %s", code, other)
			}
		}
	}
	// XX001 is ErrDataCorrupted, never a fence error; pgx's error stays underneath
	dc := dataCorrupted(fmt.Errorf("wrapped: %w", (&pgconnError{Code: "XX001", Message: "corrupt"}).pg()))
	var under *pgconn.PgError
	if !errors.Is(dc, ErrDataCorrupted) || !errors.As(dc, &under) || under.Code != "XX001" || errors.As(Translate(dc), &fe0) {
		t.Errorf("XX001: %v (%T)", dc, dc)
	}
	if other := (&pgconnError{Code: "XX000"}).pg(); dataCorrupted(other) != error(other) {
		t.Error("XX000 became DataCorrupted")
	}
	// the message of LF001 on another code is not a fence error
	pe := &pgconnError{Code: "23505", Message: "stale generation"}
	var fe *FenceError
	if errors.As(Translate(pe.pg()), &fe) {
		t.Error("23505 became a FenceError")
	}
}

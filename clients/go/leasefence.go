// Package leasefence is lease_fence from Go, on pgx v4: leases taken by the
// PostgreSQL extension (which talks to Redis from inside the server), and
// transactions whose writes carry the lease's generation, so that a stale
// holder's writes are refused.
//
// The verbs take a DB: a *pgx.Conn, a *pgxpool.Pool or a *pgxpool.Conn.
// Acquire, TryAcquire, Renew and Release are one statement each, outside a
// transaction. Fenced, Job and TransactionLease run a transaction on one
// connection (a pool checks one out from BEGIN to COMMIT) and hand the work
// that *pgx.Conn. The context is the query's: a cancelled or expired ctx
// cancels the statement running (pgx then closes that connection).
package leasefence

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/pgxpool"
)

// Version is the library's version.
const Version = "1.5.0"

// DB is what the verbs accept: *pgx.Conn, *pgxpool.Pool or *pgxpool.Conn
// (checked when called; anything else is ErrInvalidArgument).
type DB interface {
	Exec(ctx context.Context, sql string, args ...interface{}) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...interface{}) pgx.Row
}

// Lease is one row of lease_fence.acquire. For a granted lease Acquired
// points to true, Status is "acquired", and Identity, Generation and
// ValidityMs are set. In a *LeaseError / *LeaseUnknownError it may be any
// outcome: Acquired points to false for a definite no and is nil for unknown
// (then Identity and Generation are set). Keep Resource, Identity and
// Generation to use the lease elsewhere: NewLease rebuilds it.
type Lease struct {
	Resource      string
	Identity      string
	Generation    int64
	HasGeneration bool
	ValidityMs    int64
	Acquired      *bool
	Status        string
	Reason        string // why, for unavailable, unknown and unreplicated
}

// NewLease is a granted lease from its parts (kept by the application).
func NewLease(resource, identity string, generation int64) *Lease {
	t := true
	return &Lease{Resource: resource, Identity: identity, Generation: generation,
		HasGeneration: true, Acquired: &t, Status: "acquired"}
}

// IsAcquired: the lease was granted (acquired IS TRUE).
func (l *Lease) IsAcquired() bool { return l != nil && l.Acquired != nil && *l.Acquired }

// IsUnknown: the outcome is unknown (acquired IS NULL).
func (l *Lease) IsUnknown() bool { return l != nil && l.Acquired == nil }

// ReleaseStatus is what lease_fence.release answered.
type ReleaseStatus string

const (
	Released           ReleaseStatus = "released"    // deleted: the key held this identity
	NotHeld            ReleaseStatus = "not_held"    // expired or someone else's: left alone
	ReleaseUnavailable ReleaseStatus = "unavailable" // nothing sent: the lease expires by its TTL
	ReleaseUnknown     ReleaseStatus = "unknown"     // may have been applied: expires by its TTL
)

// Option tunes a verb.
type Option func(*options)

type options struct {
	minValidityMs int64
	waitMs        int64
	keepalive     bool
	fair          bool
	noStaleRetry  bool
	pollMs        int64
	timeoutMs     *int64 // TakeOver
	scope         string // TakeOver
}

// MinValidity: the validity the lease must have left when granted or
// renewed (and at COMMIT, for a transaction-scoped lease), in ms.
func MinValidity(ms int64) Option { return func(o *options) { o.minValidityMs = ms } }

// Wait: while someone else holds the lease, wait up to ms for it (woken by
// the holder's release or its TTL's end); 0 answers at once.
func Wait(ms int64) Option { return func(o *options) { o.waitMs = ms } }

// KeepAlive (TransactionLease): the server's keep-alive worker renews the
// lease while the transaction runs (needs shared_preload_libraries).
func KeepAlive() Option { return func(o *options) { o.keepalive = true } }

// Fair: wait in the resource's queue (lease_fence.acquire's fair): waiters
// are granted in the order they came; with no Wait, busy while anyone is
// queued too.
func Fair() Option { return func(o *options) { o.fair = true } }

// NoStaleRetry: report "stale" as a *LeaseError instead of trying once more
// (a stale acquire wrote nothing and moved the generation past the stored
// one: the retry is safe, and the default).
func NoStaleRetry() Option { return func(o *options) { o.noStaleRetry = true } }

func getOptions(ttlMs int64, opts []Option) (options, error) {
	var o options
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	if ttlMs <= 0 {
		return o, invalid("ttlMs must be positive, got %d", ttlMs)
	}
	if o.minValidityMs < 0 || o.minValidityMs > ttlMs {
		return o, invalid("MinValidity must be between 0 and ttlMs (%d), got %d", ttlMs, o.minValidityMs)
	}
	if o.waitMs < 0 {
		return o, invalid("Wait must not be negative, got %d", o.waitMs)
	}
	return o, nil
}

// ---------------------------------------------------------------------
// Connections

// conn returns the one connection to run on, and what gives it back.
func checkout(ctx context.Context, db DB) (*pgx.Conn, func(), error) {
	switch d := db.(type) {
	case *pgx.Conn:
		if d == nil {
			return nil, nil, invalid("a nil *pgx.Conn")
		}
		return d, func() {}, nil
	case *pgxpool.Conn:
		if d == nil {
			return nil, nil, invalid("a nil *pgxpool.Conn")
		}
		return d.Conn(), func() {}, nil
	case *pgxpool.Pool:
		if d == nil {
			return nil, nil, invalid("a nil *pgxpool.Pool")
		}
		c, err := d.Acquire(ctx)
		if err != nil {
			return nil, nil, err
		}
		return c.Conn(), c.Release, nil
	case nil:
		return nil, nil, invalid("no connection (nil DB)")
	}
	return nil, nil, invalid("DB must be a *pgx.Conn, *pgxpool.Pool or *pgxpool.Conn, got %T", db)
}

// idle: ErrInTransaction unless the connection is outside a transaction.
func idle(c *pgx.Conn) error {
	if s := c.PgConn().TxStatus(); s != 'I' {
		return fmt.Errorf("%w (transaction status %q)", ErrInTransaction, string(s))
	}
	return nil
}

// A statement of a batch: text parameters, typed by OID, text results.
type stmt struct {
	sql    string
	params [][]byte
	oids   []uint32
}

const (
	oidBool = 16
	oidInt8 = 20
	oidText = 25
)

func text(s string) []byte { return []byte(s) }
func i64(v int64) []byte   { return []byte(strconv.FormatInt(v, 10)) }
func boolean(v bool) []byte {
	if v {
		return []byte("t")
	}
	return []byte("f")
}

// batch sends the statements in one message, with one Sync: one round trip.
// It returns the results; the first error of a statement is returned too.
func batch(ctx context.Context, c *pgx.Conn, stmts ...stmt) ([]*pgconn.Result, error) {
	b := &pgconn.Batch{}
	for _, s := range stmts {
		b.ExecParams(s.sql, s.params, s.oids, nil, nil)
	}
	res, err := c.PgConn().ExecBatch(ctx, b).ReadAll()
	if err != nil {
		return res, dataCorrupted(err)
	}
	for _, r := range res {
		if r.Err != nil {
			return res, dataCorrupted(r.Err)
		}
	}
	return res, nil
}

// One row of a result, by column name (nil: NULL).
type row map[string][]byte

func oneRow(r *pgconn.Result, fn string) (row, error) {
	if r == nil || len(r.Rows) != 1 {
		return nil, fmt.Errorf("lease_fence: %s returned no row", fn)
	}
	m := row{}
	for i, f := range r.FieldDescriptions {
		m[string(f.Name)] = r.Rows[0][i]
	}
	return m, nil
}

func (r row) str(k string) string { return string(r[k]) }

func (r row) boolp(k string) *bool {
	v, ok := r[k]
	if !ok || v == nil {
		return nil
	}
	b := string(v) == "t"
	return &b
}

func (r row) int64p(k string) (*int64, error) {
	v, ok := r[k]
	if !ok || v == nil {
		return nil, nil
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("lease_fence: column %s: %w", k, err)
	}
	return &n, nil
}

func (r row) lease() (*Lease, error) {
	l := &Lease{Resource: r.str("resource"), Identity: r.str("identity"),
		Acquired: r.boolp("acquired"), Status: r.str("status"), Reason: r.str("reason")}
	g, err := r.int64p("generation")
	if err != nil {
		return nil, err
	}
	if g != nil {
		l.Generation, l.HasGeneration = *g, true
	}
	v, err := r.int64p("validity_ms")
	if err != nil {
		return nil, err
	}
	if v != nil {
		l.ValidityMs = *v
	}
	return l, nil
}

// ---------------------------------------------------------------------
// Leases

const acquireSQL = "SELECT acquired, status, resource, identity, generation, validity_ms, reason " +
	"FROM lease_fence.acquire($1::text, $2::bigint, $3::bigint, $4::text, $5::bigint, $6::boolean, $7::boolean)"

func acquireStmt(resource string, ttlMs int64, o options, scope string) stmt {
	return stmt{acquireSQL,
		[][]byte{text(resource), i64(ttlMs), i64(o.minValidityMs), text(scope), i64(o.waitMs), boolean(o.keepalive),
			boolean(o.fair)},
		[]uint32{oidText, oidInt8, oidInt8, oidText, oidInt8, oidBool, oidBool}}
}

// acquireRows: the acquire (after first, e.g. BEGIN, in the same round
// trip), once more on stale unless told not to; the row, translated.
func acquireChecked(ctx context.Context, c *pgx.Conn, first []stmt, resource string, ttlMs int64,
	o options, scope string, busyIsNil bool) (*Lease, error) {
	a := acquireStmt(resource, ttlMs, o, scope)
	res, err := batch(ctx, c, append(first, a)...)
	if err != nil {
		return nil, err
	}
	r, err := oneRow(res[len(res)-1], "lease_fence.acquire")
	if err != nil {
		return nil, err
	}
	l, err := r.lease()
	if err != nil {
		return nil, err
	}
	if l.Status == "stale" && l.Acquired != nil && !*l.Acquired && !o.noStaleRetry {
		// stale wrote nothing and moved next_generation() past the stored
		// one: one more try, with a fresh generation, is safe
		if res, err = batch(ctx, c, a); err != nil {
			return nil, err
		}
		if r, err = oneRow(res[0], "lease_fence.acquire"); err != nil {
			return nil, err
		}
		if l, err = r.lease(); err != nil {
			return nil, err
		}
	}
	return acquireResult(l, busyIsNil)
}

func checkResource(resource string) error {
	if resource == "" {
		return invalid("a resource name is needed")
	}
	return nil
}

// Acquire takes an explicit-scope lease, in one statement outside a
// transaction, and returns it. It outlives the statement: write under it
// with Fenced, extend it with Renew, end it with Release.
//
// Errors: *LeaseError matching ErrLeaseBusy (someone else holds it),
// ErrLeaseUnavailable (nothing sent: Redis down or refusing), or only
// ErrLeaseDenied (stale, insufficient_validity, unreplicated);
// *LeaseUnknownError (ErrLeaseUnknown: it may be held); ErrInvalidArgument and
// ErrInTransaction before anything is sent; the driver's errors otherwise.
func Acquire(ctx context.Context, db DB, resource string, ttlMs int64, opts ...Option) (*Lease, error) {
	return acquire(ctx, db, resource, ttlMs, opts, false)
}

// TryAcquire is Acquire, but busy is a nil lease and a nil error. Every
// other outcome that is not a grant is Acquire's error: unknown is never
// "not acquired", unavailable is not busy.
func TryAcquire(ctx context.Context, db DB, resource string, ttlMs int64, opts ...Option) (*Lease, error) {
	return acquire(ctx, db, resource, ttlMs, opts, true)
}

func acquire(ctx context.Context, db DB, resource string, ttlMs int64, opts []Option, busyIsNil bool) (*Lease, error) {
	o, err := getOptions(ttlMs, opts)
	if err != nil {
		return nil, err
	}
	if err := checkResource(resource); err != nil {
		return nil, err
	}
	c, done, err := checkout(ctx, db)
	if err != nil {
		return nil, err
	}
	defer done()
	if err := idle(c); err != nil {
		return nil, err
	}
	return acquireChecked(ctx, c, nil, resource, ttlMs, o, "explicit", busyIsNil)
}

func checkLease(lease *Lease) error {
	if lease == nil {
		return invalid("no lease (nil)")
	}
	if lease.Resource == "" || lease.Identity == "" {
		return invalid("the lease has no resource or no identity (status %q)", lease.Status)
	}
	return nil
}

// Renew extends an explicit lease to ttlMs if its key still holds the
// lease's identity, and returns the validity left, in ms.
//
// Errors: *LeaseError matching ErrLeaseLost (gone or someone else's: never
// recreated), ErrLeaseUnavailable, or only ErrLeaseDenied
// (insufficient_validity, unreplicated); *LeaseUnknownError.
func Renew(ctx context.Context, db DB, lease *Lease, ttlMs int64, opts ...Option) (int64, error) {
	o, err := getOptions(ttlMs, opts)
	if err != nil {
		return 0, err
	}
	if err := checkLease(lease); err != nil {
		return 0, err
	}
	c, done, err := checkout(ctx, db)
	if err != nil {
		return 0, err
	}
	defer done()
	if err := idle(c); err != nil {
		return 0, err
	}
	res, err := batch(ctx, c, stmt{
		"SELECT renewed, status, validity_ms, reason FROM lease_fence.renew($1::text, $2::text, $3::bigint, $4::bigint)",
		[][]byte{text(lease.Resource), text(lease.Identity), i64(ttlMs), i64(o.minValidityMs)},
		[]uint32{oidText, oidText, oidInt8, oidInt8}})
	if err != nil {
		return 0, err
	}
	r, err := oneRow(res[0], "lease_fence.renew")
	if err != nil {
		return 0, err
	}
	v, err := r.int64p("validity_ms")
	if err != nil {
		return 0, err
	}
	return renewResult(lease, r.boolp("renewed"), r.str("status"), v, r.str("reason"))
}

// Release releases an explicit lease if its key still holds the lease's
// identity: Released, NotHeld (expired or someone else's: left alone),
// ReleaseUnavailable or ReleaseUnknown (it then expires by its TTL; calling
// Release again is safe). Never an error for one of those.
func Release(ctx context.Context, db DB, lease *Lease) (ReleaseStatus, error) {
	if err := checkLease(lease); err != nil {
		return "", err
	}
	c, done, err := checkout(ctx, db)
	if err != nil {
		return "", err
	}
	defer done()
	if err := idle(c); err != nil {
		return "", err
	}
	res, err := batch(ctx, c, stmt{
		"SELECT released, status, reason FROM lease_fence.release($1::text, $2::text)",
		[][]byte{text(lease.Resource), text(lease.Identity)},
		[]uint32{oidText, oidText}})
	if err != nil {
		return "", err
	}
	r, err := oneRow(res[0], "lease_fence.release")
	if err != nil {
		return "", err
	}
	return releaseResult(r.boolp("released"), r.str("status"))
}

// ---------------------------------------------------------------------
// Transactions

// Work is what runs inside a fenced transaction, on its connection. It must
// not commit or roll back; return an error to roll back.
type Work func(ctx context.Context, conn *pgx.Conn) error

// LeaseWork is Work that is also given the transaction's lease.
type LeaseWork func(ctx context.Context, lease *Lease, conn *pgx.Conn) error

// inTransaction: first (BEGIN and what goes with it, one round trip, via
// start), then work, then COMMIT; ROLLBACK on any error; LF errors as
// *FenceError; a COMMIT answered ROLLBACK (work swallowed a failed
// statement's error) as ErrTransactionRolledBack.
func inTransaction(ctx context.Context, db DB, start func(c *pgx.Conn) error, work Work) (err error) {
	c, done, err := checkout(ctx, db)
	if err != nil {
		return err
	}
	defer done()
	if err := idle(c); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			rollback(c)
			err = Translate(err)
		}
	}()
	if err := start(c); err != nil {
		return err
	}
	if err := work(ctx, c); err != nil {
		return err
	}
	tag, err := c.Exec(ctx, "COMMIT")
	if err != nil {
		return err
	}
	if string(tag) == "ROLLBACK" {
		return fmt.Errorf("%w: a statement in it failed and the work did not return its error; nothing of it was committed", ErrTransactionRolledBack)
	}
	return nil
}

// rollback: ROLLBACK if a transaction is open on a live connection. A
// connection whose query was cancelled by its ctx is closed by pgx.
func rollback(c *pgx.Conn) {
	if c.IsClosed() || c.PgConn().TxStatus() == 'I' {
		return
	}
	_, _ = c.Exec(context.Background(), "ROLLBACK")
}

// Fenced runs work in one transaction whose writes carry the lease's
// generation and that fences its resource: BEGIN and
// SELECT lease_fence.set_generation($1, $2) go out in one message (one
// round trip), then work, then COMMIT. A newer holder's fence on the
// resource fails it with ErrStaleGeneration (*FenceError, Resource set)
// before work runs; a stale row write fails with ErrStaleGeneration naming
// the row (Schema, Table, Column). Any error rolls back and is returned,
// LF SQLSTATEs as *FenceError. When work swallows a failed statement's error
// and returns nil, PostgreSQL answers COMMIT with ROLLBACK: the error is
// ErrTransactionRolledBack, never nil.
func Fenced(ctx context.Context, db DB, lease *Lease, work Work) error {
	if lease == nil || !lease.HasGeneration {
		return invalid("the lease has no generation")
	}
	return FencedGeneration(ctx, db, lease.Generation, lease.Resource, work)
}

// FencedGeneration is Fenced for a bare generation; resource "" fences rows only.
func FencedGeneration(ctx context.Context, db DB, generation int64, resource string, work Work) error {
	if generation < 0 {
		return invalid("a generation is non-negative, got %d", generation)
	}
	if work == nil {
		return invalid("no work (nil)")
	}
	var res []byte
	if resource != "" {
		res = text(resource)
	}
	return inTransaction(ctx, db, func(c *pgx.Conn) error {
		_, err := batch(ctx, c, stmt{"BEGIN", nil, nil}, stmt{
			"SELECT lease_fence.set_generation($1::bigint, $2::text)",
			[][]byte{i64(generation), res}, []uint32{oidInt8, oidText}})
		return err
	}, work)
}

// Job runs work in one transaction that holds a transaction-scoped lease on
// resource, in the fewest round trips: BEGIN and
// lease_fence.acquire(..., scope => 'transaction') go out in one message.
// The lease's generation fences every write of work, and COMMIT verifies the
// lease (ErrLeaseLostAtCommit, *FenceError LF010, when it is no longer ours)
// and releases it. A failed acquire returns Acquire's errors before work
// runs, rolled back (stale is tried once more in the same transaction).
// Work that swallows a failed statement's error (a refused write) and
// returns nil gets ErrTransactionRolledBack: nothing was committed.
func Job(ctx context.Context, db DB, resource string, ttlMs int64, work LeaseWork, opts ...Option) error {
	return transactionLease(ctx, db, resource, ttlMs, work, opts)
}

// TransactionLease runs work in one transaction that holds a
// transaction-scoped lease, as Job; it also takes KeepAlive().
func TransactionLease(ctx context.Context, db DB, resource string, ttlMs int64, work LeaseWork, opts ...Option) error {
	return transactionLease(ctx, db, resource, ttlMs, work, opts)
}

func transactionLease(ctx context.Context, db DB, resource string, ttlMs int64, work LeaseWork, opts []Option) error {
	o, err := getOptions(ttlMs, opts)
	if err != nil {
		return err
	}
	if err := checkResource(resource); err != nil {
		return err
	}
	if work == nil {
		return invalid("no work (nil)")
	}
	var lease *Lease
	return inTransaction(ctx, db, func(c *pgx.Conn) error {
		var err error
		lease, err = acquireChecked(ctx, c, []stmt{{"BEGIN", nil, nil}}, resource, ttlMs, o, "transaction", false)
		return err
	}, func(ctx context.Context, c *pgx.Conn) error {
		return work(ctx, lease, c)
	})
}

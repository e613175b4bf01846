package leasefence

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"
)

// Leader election (lease_fence.campaign / renew / resign) and takeover
// (lease_fence.take_over), extension 1.5, C edition.

// ErrLeadershipLost: the leader lost its election (a renew answered lost or
// insufficient_validity, or no renew was confirmed before the lease's
// validity ran out), or resigned. Every *LeadershipLostError is one, and
// also an ErrLeaseLost.
var ErrLeadershipLost = errors.New("lease_fence: leadership lost")

// ErrTakeOverTimeout: TakeOver waited for a transaction that fenced the
// resource (SQLSTATE 55P03) longer than its timeout; nothing was taken. A
// *LeaseError with status "timeout" (so also an ErrLeaseDenied).
var ErrTakeOverTimeout = errors.New("lease_fence: take_over timed out; nothing was taken")

// LeadershipLostError says why a Leader is no longer one.
type LeadershipLostError struct {
	Election string
	Term     int64
	Status   string // "lost", "insufficient_validity", "expired" (no renew confirmed in time), "resigned"
	Reason   string
}

func (e *LeadershipLostError) Error() string {
	m := fmt.Sprintf("lease_fence: leadership of election %q (term %d) lost: %s", e.Election, e.Term, e.Status)
	if e.Reason != "" {
		m += " (" + e.Reason + ")"
	}
	return m
}

// Is matches ErrLeadershipLost and ErrLeaseLost.
func (e *LeadershipLostError) Is(target error) bool {
	return target == ErrLeadershipLost || target == ErrLeaseLost
}

// LeadershipOptions tunes Campaign and Leadership.
type LeadershipOptions struct {
	// TTLMs is the election lease's time to live, in ms (required, > 0).
	// The leader renews it every TTLMs/3; a leader that cannot renew (its
	// process frozen) loses it when the TTL runs out.
	TTLMs int64
	// Value is shown by lease_fence.leader() while this candidate leads
	// (at most 1024 bytes; "" sends none).
	Value string
	// WaitMs > 0 gives up after that long as a follower (a *LeaseError
	// matching ErrLeaseBusy); 0 waits until ctx is done.
	WaitMs int64
	// Scope is "session" (the default: released when conn's session ends)
	// or "explicit" (behind a transaction-pooling proxy: kept until Resign
	// or the TTL).
	Scope string
	// Fair waits in the election's queue (lease_fence.campaign's fair):
	// candidates win in the order they came.
	Fair bool
}

const maxLeaderValue = 1024

func (o *LeadershipOptions) check(election string) error {
	if err := checkResource(election); err != nil {
		return invalid("an election name is needed")
	}
	if o.TTLMs <= 0 {
		return invalid("TTLMs must be positive, got %d", o.TTLMs)
	}
	if o.WaitMs < 0 {
		return invalid("WaitMs must not be negative, got %d", o.WaitMs)
	}
	if len(o.Value) > maxLeaderValue {
		return invalid("Value is at most %d bytes, got %d", maxLeaderValue, len(o.Value))
	}
	switch o.Scope {
	case "":
		o.Scope = "session"
	case "session", "explicit":
	default:
		return invalid("Scope is \"session\" or \"explicit\", got %q", o.Scope)
	}
	return nil
}

// Leader is a won election: its term (the generation the election's
// resource fence was raised to), identity and value. A goroutine renews
// the election's lease on the campaign's connection every TTL/3 until
// Resign or the loss; Context() is cancelled on either.
type Leader struct {
	Election   string
	Identity   string
	Term       int64
	Value      string
	ValidityMs int64 // validity left when won
	TTLMs      int64

	conn   *pgx.Conn
	ctx    context.Context
	cancel context.CancelFunc
	stop   chan struct{}
	exited chan struct{}

	mu   sync.Mutex
	lost *LeadershipLostError
	once sync.Once
}

// Context is cancelled when the leadership is lost (or resigned): stop the
// leader's work on it. Derived from Campaign's ctx.
func (l *Leader) Context() context.Context { return l.ctx }

// Lost is nil while the leader holds the election; then why it does not.
func (l *Leader) Lost() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost == nil {
		return nil
	}
	return l.lost
}

func (l *Leader) setLost(status, reason string) {
	l.mu.Lock()
	if l.lost == nil {
		l.lost = &LeadershipLostError{Election: l.Election, Term: l.Term, Status: status, Reason: reason}
	}
	l.mu.Unlock()
	l.cancel()
}

// Fenced runs work in one transaction on db (another connection than the
// campaign's) whose writes carry the term and that checks the election's
// resource fence: FencedGeneration(ctx, db, l.Term, l.Election, work). A
// *LeadershipLostError first, with nothing sent, once the loss is known; a
// newer leader's term in the fence refuses it with ErrStaleGeneration.
func (l *Leader) Fenced(ctx context.Context, db DB, work Work) error {
	if err := l.Lost(); err != nil {
		return err
	}
	if c, ok := db.(*pgx.Conn); ok && c == l.conn {
		return invalid("the campaign's connection is the election's: write on another one")
	}
	return FencedGeneration(ctx, db, l.Term, l.Election, work)
}

// heartbeat: renew every TTL/3 on the campaign's connection; the loss when
// renew answers lost / insufficient_validity, or when no renew is confirmed
// before the validity of the last one (from its sending) runs out.
func (l *Leader) heartbeat(validUntil time.Time) {
	defer close(l.exited)
	every := time.Duration(l.TTLMs/3) * time.Millisecond
	if every <= 0 {
		every = time.Millisecond
	}
	lease := NewLease(l.Election, l.Identity, l.Term)
	for {
		wait := every
		if left := time.Until(validUntil); left < wait {
			wait = left
		}
		t := time.NewTimer(wait)
		select {
		case <-l.stop:
			t.Stop()
			return
		case <-t.C:
		}
		if !time.Now().Before(validUntil) {
			l.setLost("expired", "no renew was confirmed before the lease's validity ran out")
			return
		}
		// the renew may not outlive the validity: past it, the loss
		ctx, cancel := context.WithDeadline(context.Background(), validUntil)
		sent := time.Now()
		v, err := Renew(ctx, l.conn, lease, l.TTLMs)
		cancel()
		var le *LeaseError
		switch {
		case err == nil:
			validUntil = sent.Add(time.Duration(v) * time.Millisecond)
		case errors.As(err, &le) && (le.Status == "lost" || le.Status == "insufficient_validity"):
			l.setLost(le.Status, "renew answered "+le.Status)
			return
		case l.conn.IsClosed():
			l.setLost("expired", "the election's connection closed: "+err.Error())
			return
		}
		// unavailable, unknown, ...: not confirmed; try again until the validity ends
	}
}

// halt stops the heartbeat and waits for it.
func (l *Leader) halt() {
	l.once.Do(func() { close(l.stop) })
	<-l.exited
}

// Resign stops the heartbeat, marks the leadership ended (Context()
// cancelled, Fenced refused) and runs lease_fence.resign on the campaign's
// connection: a waiting campaign wins at once. Released, or NotHeld when it
// was lost already, ReleaseUnavailable / ReleaseUnknown (it then ends by
// its TTL). Calling it twice is safe.
func (l *Leader) Resign(ctx context.Context) (ReleaseStatus, error) {
	l.halt()
	l.setLost("resigned", "")
	if l.conn.IsClosed() {
		return "", fmt.Errorf("lease_fence: resign of election %q: the connection is closed (the lease ends by its TTL)", l.Election)
	}
	return resign(ctx, l.conn, l.Election, l.Identity)
}

func resign(ctx context.Context, c *pgx.Conn, election, identity string) (ReleaseStatus, error) {
	res, err := batch(ctx, c, stmt{
		"SELECT released, status, reason FROM lease_fence.resign($1::text, $2::text)",
		[][]byte{text(election), text(identity)}, []uint32{oidText, oidText}})
	if err != nil {
		return "", err
	}
	r, err := oneRow(res[0], "lease_fence.resign")
	if err != nil {
		return "", err
	}
	return releaseResult(r.boolp("released"), r.str("status"))
}

const campaignSQL = "SELECT status, identity, term, validity_ms, reason " +
	"FROM lease_fence.campaign($1::text, $2::bigint, $3::bigint, $4::text, $5::text, $6::boolean)"

// campaignResult: the granted row as a *Lease (Generation = term), or the
// error for its status (no connection: for the unit tests).
func campaignResult(election string, r row) (*Lease, error) {
	l := &Lease{Resource: election, Identity: r.str("identity"), Status: r.str("status"), Reason: r.str("reason")}
	term, err := r.int64p("term")
	if err != nil {
		return nil, err
	}
	if term != nil {
		l.Generation, l.HasGeneration = *term, true
	}
	v, err := r.int64p("validity_ms")
	if err != nil {
		return nil, err
	}
	if v != nil {
		l.ValidityMs = *v
	}
	var ok *bool
	switch l.Status {
	case "acquired":
		t := true
		ok = &t
		if !l.HasGeneration || l.Identity == "" {
			return nil, fmt.Errorf("lease_fence: campaign won without identity or term")
		}
	case "unknown":
	default:
		f := false
		ok = &f
	}
	l.Acquired = ok
	if l.IsAcquired() {
		return l, nil
	}
	return nil, leaseError(ok, l.Status, l, "campaign", l.Reason)
}

// Campaign waits, on conn, to become the leader of election
// (lease_fence.campaign: woken by the leader's resign or its lease's end,
// no polling) and returns the Leader, whose heartbeat then renews the
// lease on conn: conn is the election's until Resign (run the work on other
// connections). ctx ends the wait (pgx then closes conn).
//
// Errors: ErrInvalidArgument and ErrInTransaction before anything is sent;
// a *LeaseError matching ErrLeaseBusy when WaitMs ran out (still a
// follower), ErrLeaseUnavailable (Redis unreachable: never a silent
// follower), or only ErrLeaseDenied (unreplicated, stale twice); a
// *LeaseUnknownError (the server released what it may have won).
func Campaign(ctx context.Context, conn *pgx.Conn, election string, o LeadershipOptions) (*Leader, error) {
	if err := o.check(election); err != nil {
		return nil, err
	}
	if conn == nil {
		return nil, invalid("Campaign needs the connection the election runs on")
	}
	if err := idle(conn); err != nil {
		return nil, err
	}
	var wait, value []byte
	if o.WaitMs > 0 {
		wait = i64(o.WaitMs)
	}
	if o.Value != "" {
		value = text(o.Value)
	}
	s := stmt{campaignSQL, [][]byte{text(election), i64(o.TTLMs), wait, value, text(o.Scope), boolean(o.Fair)},
		[]uint32{oidText, oidInt8, oidInt8, oidText, oidText, oidBool}}
	var (
		lease *Lease
		sent  time.Time
		err   error
	)
	for try := 0; try < 2; try++ {
		sent = time.Now()
		var res []*pgconn.Result
		if res, err = batch(ctx, conn, s); err != nil {
			return nil, err
		}
		var r row
		if r, err = oneRow(res[0], "lease_fence.campaign"); err != nil {
			return nil, err
		}
		lease, err = campaignResult(election, r)
		var le *LeaseError
		if !(errors.As(err, &le) && le.Status == "stale") {
			break // stale wrote nothing: one more try is safe
		}
	}
	if err != nil {
		return nil, err
	}
	lctx, cancel := context.WithCancel(ctx)
	l := &Leader{Election: election, Identity: lease.Identity, Term: lease.Generation, Value: o.Value,
		ValidityMs: lease.ValidityMs, TTLMs: o.TTLMs, conn: conn, ctx: lctx, cancel: cancel,
		stop: make(chan struct{}), exited: make(chan struct{})}
	go l.heartbeat(sent.Add(time.Duration(lease.ValidityMs) * time.Millisecond))
	return l, nil
}

// Leadership campaigns on conn (Campaign), runs work(ctx', lead) as the
// leader, and resigns at the end. ctx' (lead.Context()) is cancelled when
// the leadership is lost; work writes with lead.Fenced on other
// connections, which refuses once the loss is known (and the database
// refuses a newer term's writes in any case).
//
// Returns Campaign's errors before work runs; a *LeadershipLostError when
// the leadership was lost while work ran; else work's error; else the
// resign's error, or nil.
func Leadership(ctx context.Context, conn *pgx.Conn, election string, o LeadershipOptions,
	work func(ctx context.Context, lead *Leader) error) error {
	if work == nil {
		return invalid("no work (nil)")
	}
	lead, err := Campaign(ctx, conn, election, o)
	if err != nil {
		return err
	}
	workErr := work(lead.ctx, lead)
	lead.halt()
	lost := lead.Lost()
	_, resignErr := lead.Resign(context.Background())
	if lost != nil {
		return lost
	}
	if workErr != nil {
		return workErr
	}
	return resignErr
}

// TakeOverTimeout (TakeOver): wait at most ms for a transaction that
// fenced the resource to end (default 5000).
func TakeOverTimeout(ms int64) Option { return func(o *options) { o.timeoutMs = &ms } }

// TakeOverScope (TakeOver): "explicit" (the default) or "session".
func TakeOverScope(scope string) Option { return func(o *options) { o.scope = scope } }

// TakeOver (lease_fence.take_over, for operators and supervisors: EXECUTE
// is not granted to PUBLIC) grants the caller the lease on resource
// whether or not someone holds it, with a generation above every one
// granted for it, and raises the resource's fence to it: the victim's
// renew answers lost and its fenced writes are refused.
//
// Errors, each taking nothing: a *LeaseError matching ErrTakeOverTimeout
// (SQLSTATE 55P03: a transaction that fenced the resource did not end
// within the timeout), ErrLeaseUnavailable (08006: Redis unavailable); a
// *LeaseUnknownError (08007: the outcome is unknown, the server released
// what it may have taken); ErrInvalidArgument before anything is sent; the
// driver's error for anything else (42501 without the grant).
func TakeOver(ctx context.Context, db DB, resource string, ttlMs int64, opts ...Option) (*Lease, error) {
	o, err := getOptions(ttlMs, opts)
	if err != nil {
		return nil, err
	}
	if err := checkResource(resource); err != nil {
		return nil, err
	}
	timeout := int64(5000)
	if o.timeoutMs != nil {
		timeout = *o.timeoutMs
	}
	if timeout < 0 {
		return nil, invalid("TakeOverTimeout must not be negative, got %d", timeout)
	}
	scope := o.scope
	switch scope {
	case "":
		scope = "explicit"
	case "explicit", "session":
	default:
		return nil, invalid("TakeOverScope is \"explicit\" or \"session\", got %q", scope)
	}
	c, done, err := checkout(ctx, db)
	if err != nil {
		return nil, err
	}
	defer done()
	if err := idle(c); err != nil {
		return nil, err
	}
	res, err := batch(ctx, c, stmt{
		"SELECT acquired, status, resource, identity, generation, validity_ms, reason " +
			"FROM lease_fence.take_over($1::text, $2::bigint, $3::bigint, $4::text)",
		[][]byte{text(resource), i64(ttlMs), i64(timeout), text(scope)},
		[]uint32{oidText, oidInt8, oidInt8, oidText}})
	if err != nil {
		return nil, takeOverError(resource, err)
	}
	r, err := oneRow(res[0], "lease_fence.take_over")
	if err != nil {
		return nil, err
	}
	l, err := r.lease()
	if err != nil {
		return nil, err
	}
	return acquireResult(l, false)
}

// takeOverError: take_over's SQLSTATEs as the library's errors.
func takeOverError(resource string, err error) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return err
	}
	f := false
	l := &Lease{Resource: resource, Acquired: &f}
	switch pe.Code {
	case "55P03":
		l.Status = "timeout"
		return &LeaseError{Op: "take_over", Status: "timeout", Reason: pe.Message, Lease: l}
	case "08006":
		l.Status = "unavailable"
		return &LeaseError{Op: "take_over", Status: "unavailable", Reason: pe.Message, Lease: l}
	case "08007":
		l.Status, l.Acquired = "unknown", nil
		return &LeaseUnknownError{Op: "take_over", Status: "unknown", Reason: pe.Message, Lease: l}
	}
	return err
}

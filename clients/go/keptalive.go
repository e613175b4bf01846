package leasefence

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/pgxpool"
)

// PollInterval (KeptAliveLease): how often the watch asks whether the lease
// is still kept alive, in ms (default: max(50, ttlMs / 3)).
func PollInterval(ms int64) Option { return func(o *options) { o.pollMs = ms } }

// KeepaliveState is lease_fence.keepalive_state(identity): "active", "lost",
// or "" (no kept-alive lease has it). Ask on another connection than the
// lease owner's: a query on the owner's makes its session look active.
func KeepaliveState(ctx context.Context, db DB, identity string) (string, error) {
	c, done, err := checkout(ctx, db)
	if err != nil {
		return "", err
	}
	defer done()
	res, err := batch(ctx, c, stmt{"SELECT lease_fence.keepalive_state($1::text) AS state",
		[][]byte{text(identity)}, []uint32{oidText}})
	if err != nil {
		return "", err
	}
	r, err := oneRow(res[0], "lease_fence.keepalive_state")
	if err != nil {
		return "", err
	}
	return r.str("state"), nil
}

// KeptAliveLease runs work holding a session-scoped lease that the server
// keeps alive while it runs, then releases the lease. It takes two
// connections of pool at once: one holds the lease and runs work, the other
// watches it (KeptAliveLeaseConns on two connections of your own).
func KeptAliveLease(ctx context.Context, pool *pgxpool.Pool, resource string, ttlMs int64, work LeaseWork, opts ...Option) error {
	if pool == nil {
		return invalid("KeptAliveLease needs a *pgxpool.Pool")
	}
	if _, err := keptAliveArgs(resource, ttlMs, work, opts); err != nil {
		return err
	}
	owner, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer owner.Release()
	watch, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer watch.Release()
	return KeptAliveLeaseConns(ctx, owner.Conn(), watch.Conn(), resource, ttlMs, work, opts...)
}

func keptAliveArgs(resource string, ttlMs int64, work LeaseWork, opts []Option) (options, error) {
	o, err := getOptions(ttlMs, opts)
	if err != nil {
		return o, err
	}
	if o.pollMs < 0 {
		return o, invalid("PollInterval must not be negative, got %d", o.pollMs)
	}
	if err := checkResource(resource); err != nil {
		return o, err
	}
	if work == nil {
		return o, invalid("no work (nil)")
	}
	return o, nil
}

// KeptAliveLeaseConns is KeptAliveLease on conn (holds the lease, runs work)
// and watch (another connection, used only by the watch while work runs).
//
// lease_fence.acquire(..., scope => 'session', keepalive => true) on conn
// (Acquire's errors, before work runs), then work(ctx', lease, conn), then
// Release. The lease outlives ttlMs while conn's session is active, up to
// lease_fence.keepalive_max_ms (needs shared_preload_libraries). While work
// runs, the watch asks keepalive_state on watch every PollInterval; when it
// answers "lost" or nothing, or the question fails, the work's context ctx'
// is cancelled (which cancels the statement running on conn; pgx then closes
// conn, and the lease is released on watch).
//
// Returns: the lease was lost while work ran (and the release did not find
// it held): a *LeaseError "lost" (ErrLeaseLost), or a *LeaseUnknownError
// when the watch failed; else work's error, unchanged (a transaction work
// left open is rolled back); else nil, but a release that answers not_held
// (lost before the end) is ErrLeaseLost.
func KeptAliveLeaseConns(ctx context.Context, conn, watch *pgx.Conn, resource string, ttlMs int64, work LeaseWork, opts ...Option) error {
	o, err := keptAliveArgs(resource, ttlMs, work, opts)
	if err != nil {
		return err
	}
	if conn == nil || watch == nil {
		return invalid("KeptAliveLease needs two connections: one holds the lease, the other watches it")
	}
	if conn == watch {
		return invalid("watch must be another connection than the lease owner's: queries on the owner's make it look active")
	}
	if err := idle(conn); err != nil {
		return err
	}
	if err := idle(watch); err != nil {
		return err
	}
	o.keepalive = true
	lease, err := acquireChecked(ctx, conn, nil, resource, ttlMs, o, "session", false)
	if err != nil {
		var unk *LeaseUnknownError
		if errors.As(err, &unk) && unk.Lease != nil && unk.Lease.Identity != "" {
			_, _ = Release(context.Background(), conn, unk.Lease) // it may be held: released, conditionally
		}
		return err
	}

	poll := o.pollMs
	if poll == 0 {
		poll = ttlMs / 3
		if poll < 50 {
			poll = 50
		}
	}
	workCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu      sync.Mutex
		stopped error
		done    = make(chan struct{})
		exited  = make(chan struct{})
	)
	go func() {
		defer close(exited)
		t := time.NewTicker(time.Duration(poll) * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			// a short question, not cancelled mid-way (that would close watch)
			state, err := KeepaliveState(context.Background(), watch, lease.Identity)
			var stop error
			switch {
			case err != nil:
				stop = &LeaseUnknownError{Op: "keep-alive", Status: "unknown", Reason: "cannot be watched: " + err.Error(), Lease: lease}
			case state != "active":
				why := state
				if why == "" {
					why = "no longer kept alive"
				}
				stop = &LeaseError{Op: "keep-alive", Status: "lost", Reason: why, Lease: lease}
			}
			if stop == nil {
				continue
			}
			select {
			case <-done:
				return
			default:
			}
			mu.Lock()
			stopped = stop
			mu.Unlock()
			cancel()
			return
		}
	}()

	workErr := work(workCtx, lease, conn)
	close(done)
	<-exited
	mu.Lock()
	stop := stopped
	mu.Unlock()

	if workErr != nil {
		rollback(conn)
	}
	releaser := conn
	if conn.IsClosed() {
		releaser = watch // the cancelled statement closed conn
	}
	released, relErr := Release(context.Background(), releaser, lease)
	if stop != nil && !(relErr == nil && released == Released) {
		return stop
	}
	if workErr != nil {
		return workErr
	}
	if relErr != nil {
		return relErr
	}
	if released == NotHeld {
		return &LeaseError{Op: "keep-alive", Status: "lost", Reason: "lost before the work ended (release: not_held)", Lease: lease}
	}
	return nil
}

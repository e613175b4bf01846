package leasefence

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/pgxpool"
)

func newPool(t *testing.T, max int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig("")
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = max
	pool, err := pgxpool.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// TTL 1 s: a statement of 2.5 s on the owner's connection keeps the lease
// alive (the key still holds the identity), a fenced write under it
// commits, and the end releases it.
func TestKeptAliveLeaseOutlivesItsTTL(t *testing.T) {
	needServers(t)
	ctx := context.Background()
	check := connect(t)
	id := newRow(t, check)
	res := resourceName(t)
	var held *Lease
	err := KeptAliveLease(ctx, newPool(t, 2), res, 1000, func(ctx context.Context, l *Lease, c *pgx.Conn) error {
		held = l
		if s, err := KeepaliveState(ctx, check, l.Identity); err != nil || s != "active" {
			t.Errorf("keepalive_state %q, %v", s, err)
		}
		if _, err := c.Exec(ctx, "SELECT pg_sleep(2.5)"); err != nil {
			return err
		}
		v, _ := redis.String(redisDo(t, "GET", leaseKey(res)), nil)
		if v != l.Identity {
			t.Errorf("the key holds %q after 2.5 TTLs, not the identity", v)
		}
		return Fenced(ctx, c, l, func(ctx context.Context, tx *pgx.Conn) error {
			return setOwner(ctx, tx, id, "kept alive")
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if row := readRow(t, check, id); row != (account{"kept alive", 100, held.Generation}) {
		t.Fatalf("row %+v", row)
	}
	if keyExists(t, res) {
		t.Fatal("not released at the end")
	}
	if s, _ := KeepaliveState(ctx, check, held.Identity); s != "" {
		t.Fatalf("keepalive_state %q after the end", s)
	}
}

// Someone overwrites the key while the work runs a long statement: the
// watch sees the lease lost and cancels the work's context (the statement
// is cancelled, never finishes); ErrLeaseLost; the other identity's key is
// untouched; the write before the loss is the only one.
func TestKeptAliveLeaseLostStopsTheWork(t *testing.T) {
	needServers(t)
	ctx := context.Background()
	check := connect(t)
	id := newRow(t, check)
	res := resourceName(t)
	thief := strings.Repeat("f", 32)
	finished := false
	var held *Lease
	err := KeptAliveLeaseConns(ctx, connect(t), connect(t), res, 3000, func(ctx context.Context, l *Lease, c *pgx.Conn) error {
		held = l
		if err := Fenced(ctx, c, l, func(ctx context.Context, tx *pgx.Conn) error {
			return setOwner(ctx, tx, id, "before the loss")
		}); err != nil {
			return err
		}
		redisDo(t, "SET", leaseKey(res), thief, "PX", 60000)
		if _, err := c.Exec(ctx, "SELECT pg_sleep(60)"); err != nil {
			if !errors.Is(err, context.Canceled) {
				t.Errorf("the sleep ended with %v, not a cancelled context", err)
			}
			return err
		}
		finished = true
		return Fenced(ctx, c, l, func(ctx context.Context, tx *pgx.Conn) error {
			return setOwner(ctx, tx, id, "after the loss")
		})
	}, PollInterval(100))
	var le *LeaseError
	if !errors.Is(err, ErrLeaseLost) || !errors.As(err, &le) || le.Lease == nil || le.Lease.Identity != held.Identity {
		t.Fatalf("lost kept-alive lease: %v", err)
	}
	if finished {
		t.Fatal("the work was not stopped")
	}
	if row := readRow(t, check, id); row != (account{"before the loss", 100, held.Generation}) {
		t.Fatalf("row %+v", row)
	}
	if v, _ := redis.String(redisDo(t, "GET", leaseKey(res)), nil); v != thief {
		t.Fatalf("the other identity's key holds %q", v)
	}
	redisDo(t, "DEL", leaseKey(res))
}

// Work's error is returned unchanged and the lease released; bad arguments
// and a busy lease are refused before the work runs.
func TestKeptAliveLeaseErrorsAndArguments(t *testing.T) {
	needServers(t)
	ctx := context.Background()
	pool := newPool(t, 3)
	res := resourceName(t)
	boom := errors.New("boom")
	if err := KeptAliveLease(ctx, pool, res, 10000, func(ctx context.Context, l *Lease, c *pgx.Conn) error {
		if _, err := c.Exec(ctx, "BEGIN"); err != nil { // left open: rolled back
			return err
		}
		return boom
	}); err != boom {
		t.Fatalf("work's error: %v", err)
	}
	if keyExists(t, res) {
		t.Fatal("not released after the work's error")
	}
	c := connect(t)
	ran := func(context.Context, *Lease, *pgx.Conn) error { t.Error("ran"); return nil }
	for name, err := range map[string]error{
		"same connection": KeptAliveLeaseConns(ctx, c, c, res, 10000, ran),
		"ttl 0":           KeptAliveLease(ctx, pool, res, 0, ran),
		"negative poll":   KeptAliveLease(ctx, pool, res, 10000, ran, PollInterval(-1)),
		"nil pool":        KeptAliveLease(ctx, nil, res, 10000, ran),
	} {
		if !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if keyExists(t, res) {
		t.Fatal("bad arguments acquired a lease")
	}
	other := mustAcquire(t, c, res)
	if err := KeptAliveLease(ctx, pool, res, 10000, ran); !errors.Is(err, ErrLeaseBusy) {
		t.Fatalf("busy: %v", err)
	}
	Release(ctx, c, other)
}

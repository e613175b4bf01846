package leasefence

// The fair option (lease_fence.acquire's and campaign's fair, 1.5) against
// the real servers: waiters are granted in the order they came.

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v4"
)

// queueOf: lease_fence.queue(resource) as "position:pid", position 1 first.
func queueOf(t *testing.T, c *pgx.Conn, resource string) []string {
	t.Helper()
	rows, err := c.Query(context.Background(),
		"SELECT position, pid FROM lease_fence.queue($1) ORDER BY position", resource)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var pos, pid int32
		if err := rows.Scan(&pos, &pid); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%d:%d", pos, pid))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// waitQueued: until n waiters are queued for resource, a logical condition
// waited for 30 s at most (then the test fails, never hangs).
func waitQueued(t *testing.T, c *pgx.Conn, resource string, n int) {
	t.Helper()
	end := time.Now().Add(30 * time.Second)
	for q := queueOf(t, c, resource); len(q) != n; q = queueOf(t, c, resource) {
		if time.Now().After(end) {
			t.Fatalf("never %d waiter(s) queued for %s: %v", n, resource, q)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func entry(pos int, c *pgx.Conn) string { return fmt.Sprintf("%d:%d", pos, c.PgConn().PID()) }

type leaseOrErr struct {
	lease *Lease
	err   error
}

// Fair: two waiters queued in a known order (the second starts only once
// the first is visibly queued); the holder's release grants the first, the
// second still waits, first in the queue now, and gets the lease (a higher
// generation) when the first releases.
func TestFairAcquireGrantsWaitersInArrivalOrder(t *testing.T) {
	needServers(t)
	ctx := context.Background()
	check := connect(t)
	res := resourceName(t)
	held, err := Acquire(ctx, check, res, 600000)
	if err != nil {
		t.Fatal(err)
	}
	firstConn, secondConn := connect(t), connect(t)
	wait := func(c *pgx.Conn, out chan<- leaseOrErr) {
		l, err := Acquire(ctx, c, res, 600000, Wait(600000), Fair())
		out <- leaseOrErr{l, err}
	}
	first, second := make(chan leaseOrErr, 1), make(chan leaseOrErr, 1)
	go wait(firstConn, first)
	waitQueued(t, check, res, 1)
	if got := queueOf(t, check, res); !reflect.DeepEqual(got, []string{entry(1, firstConn)}) {
		t.Fatalf("queue %v: the first waiter alone", got)
	}
	go wait(secondConn, second)
	waitQueued(t, check, res, 2)
	if got, want := queueOf(t, check, res), []string{entry(1, firstConn), entry(2, secondConn)}; !reflect.DeepEqual(got, want) {
		t.Fatalf("queue %v, want %v", got, want)
	}

	if s, err := Release(ctx, check, held); err != nil || s != Released {
		t.Fatalf("holder's release: %v %v", s, err)
	}
	a := <-first
	if a.err != nil || a.lease.Generation <= held.Generation {
		t.Fatalf("first waiter: %+v %v (holder's generation %d)", a.lease, a.err, held.Generation)
	}
	if got, want := queueOf(t, check, res), []string{entry(1, secondConn)}; !reflect.DeepEqual(got, want) {
		t.Fatalf("queue %v after the first grant, want %v: the second waiter is next", got, want)
	}
	select {
	case b := <-second:
		t.Fatalf("the second waiter was granted while the first holds the lease: %+v %v", b.lease, b.err)
	default:
	}

	if s, err := Release(ctx, firstConn, a.lease); err != nil || s != Released {
		t.Fatalf("first waiter's release: %v %v", s, err)
	}
	b := <-second
	if b.err != nil || b.lease.Generation <= a.lease.Generation {
		t.Fatalf("second waiter: %+v %v (first's generation %d)", b.lease, b.err, a.lease.Generation)
	}
	if got := queueOf(t, check, res); len(got) != 0 {
		t.Fatalf("queue %v at the end", got)
	}
	if s, err := Release(ctx, secondConn, b.lease); err != nil || s != Released {
		t.Fatalf("second waiter's release: %v %v", s, err)
	}
}

// Every other verb that acquires takes Fair() and sends it: each, waiting
// while another session holds the lease, is visibly queued, and is granted
// when the holder releases.
func TestEveryAcquiringVerbTakesFair(t *testing.T) {
	needServers(t)
	ctx := context.Background()
	check := connect(t)
	res := resourceName(t)
	watch := connect(t)
	generation := func(out *int64) LeaseWork {
		return func(_ context.Context, l *Lease, _ *pgx.Conn) error { *out = l.Generation; return nil }
	}
	verbs := []struct {
		name string
		call func(c *pgx.Conn) (int64, error)
	}{
		{"TryAcquire", func(c *pgx.Conn) (int64, error) {
			l, err := TryAcquire(ctx, c, res, 60000, Wait(600000), Fair())
			if err != nil || l == nil {
				return 0, fmt.Errorf("%+v %v", l, err)
			}
			_, err = Release(ctx, c, l)
			return l.Generation, err
		}},
		{"Job", func(c *pgx.Conn) (g int64, err error) {
			err = Job(ctx, c, res, 60000, generation(&g), Wait(600000), Fair())
			return
		}},
		{"TransactionLease", func(c *pgx.Conn) (g int64, err error) {
			err = TransactionLease(ctx, c, res, 60000, generation(&g), Wait(600000), Fair())
			return
		}},
		{"KeptAliveLeaseConns", func(c *pgx.Conn) (g int64, err error) {
			err = KeptAliveLeaseConns(ctx, c, watch, res, 60000, generation(&g), Wait(600000), Fair())
			return
		}},
	}
	for _, v := range verbs {
		held, err := Acquire(ctx, check, res, 600000)
		if err != nil {
			t.Fatal(err)
		}
		c := connect(t)
		type result struct {
			g   int64
			err error
		}
		done := make(chan result, 1)
		go func() { g, err := v.call(c); done <- result{g, err} }()
		waitQueued(t, check, res, 1)
		if got, want := queueOf(t, check, res), []string{entry(1, c)}; !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: queue %v, want %v", v.name, got, want)
		}
		if s, err := Release(ctx, check, held); err != nil || s != Released {
			t.Fatalf("holder's release: %v %v", s, err)
		}
		if r := <-done; r.err != nil || r.g <= held.Generation {
			t.Fatalf("%s: generation %d (holder's %d), %v", v.name, r.g, held.Generation, r.err)
		}
	}
}

// Fair campaigns: two candidates queued in a known order behind the leader;
// its resign makes the first one leader, the second is then first in the
// queue and still waits; it leads after the first resigns, with a higher term.
func TestFairCampaignElectsCandidatesInArrivalOrder(t *testing.T) {
	needServers(t)
	ctx := context.Background()
	election := resourceName(t)
	check := connect(t)
	a, err := Campaign(ctx, connect(t), election, LeadershipOptions{TTLMs: 600000})
	if err != nil {
		t.Fatal(err)
	}
	type won struct {
		lead *Leader
		err  error
	}
	campaign := func(c *pgx.Conn, out chan<- won) {
		l, err := Campaign(ctx, c, election, LeadershipOptions{TTLMs: 600000, Fair: true})
		out <- won{l, err}
	}
	bConn, cConn := connect(t), connect(t)
	bWon, cWon := make(chan won, 1), make(chan won, 1)
	go campaign(bConn, bWon)
	waitQueued(t, check, election, 1)
	go campaign(cConn, cWon)
	waitQueued(t, check, election, 2)
	if got, want := queueOf(t, check, election), []string{entry(1, bConn), entry(2, cConn)}; !reflect.DeepEqual(got, want) {
		t.Fatalf("queue %v, want %v", got, want)
	}

	if s, err := a.Resign(ctx); err != nil || s != Released {
		t.Fatalf("A's resign: %v %v", s, err)
	}
	b := <-bWon
	if b.err != nil || b.lead.Term <= a.Term {
		t.Fatalf("B: %+v %v (A's term %d)", b.lead, b.err, a.Term)
	}
	if got, want := queueOf(t, check, election), []string{entry(1, cConn)}; !reflect.DeepEqual(got, want) {
		t.Fatalf("queue %v after B won, want %v: C is next", got, want)
	}
	select {
	case c := <-cWon:
		t.Fatalf("C won while B leads: %+v %v", c.lead, c.err)
	default:
	}

	if s, err := b.lead.Resign(ctx); err != nil || s != Released {
		t.Fatalf("B's resign: %v %v", s, err)
	}
	c := <-cWon
	if c.err != nil || c.lead.Term <= b.lead.Term {
		t.Fatalf("C: %+v %v (B's term %d)", c.lead, c.err, b.lead.Term)
	}
	if s, err := c.lead.Resign(ctx); err != nil || s != Released {
		t.Fatalf("C's resign: %v %v", s, err)
	}
}

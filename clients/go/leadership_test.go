package leasefence

// Leader election and takeover against the real servers. The frozen-leader
// story runs the old leader in a child process (this test binary executed
// again with LF_LEADERSHIP_CHILD set: TestMain runs leadershipChild instead
// of the tests) and freezes it with a real SIGSTOP.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/jackc/pgx/v4"
)

func TestMain(m *testing.M) {
	if os.Getenv("LF_LEADERSHIP_CHILD") != "" {
		os.Exit(leadershipChild())
	}
	os.Exit(m.Run())
}

// errKind: which of the library's errors err is, for the child's report.
func errKind(err error) string {
	var fe *FenceError
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrLeadershipLost):
		return "LeadershipLost"
	case errors.Is(err, ErrStaleGeneration) && errors.As(err, &fe):
		return "StaleGeneration:" + fe.Resource
	}
	return "error:" + strings.ReplaceAll(err.Error(), "\n", " ")
}

// leadershipChild: the old leader. It campaigns (LF_LEADERSHIP_CHILD is the
// election, LF_LEADERSHIP_ROW the account row), prints "leader <term>",
// then waits for "write" on stdin (the parent freezes it meanwhile). Woken:
// "first <kind>" (its write through lead.Fenced at once), "lost <status>"
// (once the loss is known), "fenced <kind>" (lead.Fenced again), "raw
// <kind>" (the same write under its term without the library's check:
// FencedGeneration).
func leadershipChild() int {
	ctx := context.Background()
	election := os.Getenv("LF_LEADERSHIP_CHILD")
	id, _ := strconv.Atoi(os.Getenv("LF_LEADERSHIP_ROW"))
	ttl, _ := strconv.ParseInt(os.Getenv("LF_LEADERSHIP_TTL"), 10, 64)
	conn, err := pgx.Connect(ctx, "")
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	work, err := pgx.Connect(ctx, "")
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	lead, err := Campaign(ctx, conn, election, LeadershipOptions{TTLMs: ttl, Value: "child"})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	write := func(ctx context.Context, c *pgx.Conn) error {
		return setOwner(ctx, c, id, "old leader")
	}
	fmt.Println("leader", lead.Term)
	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() || in.Text() != "write" {
		return 1
	}
	fmt.Println("first", errKind(lead.Fenced(ctx, work, write)))
	<-lead.Context().Done()
	var lost *LeadershipLostError
	if !errors.As(lead.Lost(), &lost) {
		fmt.Println("lost none")
		return 1
	}
	fmt.Println("lost", lost.Status)
	fmt.Println("fenced", errKind(lead.Fenced(ctx, work, write)))
	fmt.Println("raw", errKind(FencedGeneration(ctx, work, lead.Term, election, write)))
	return 0
}

// The story: A leads (a child process) and is frozen by SIGSTOP; B, waiting
// in Campaign, wins once A's lease runs out (A cannot renew), with a higher
// term, and writes. A is woken: its write through lead.Fenced is refused —
// LeadershipLost when its heartbeat saw the loss first, else StaleGeneration
// against the election's fence (B's win raised it) — once the loss is known
// lead.Fenced refuses with LeadershipLost before sending anything, and the
// same write under A's term without the library (FencedGeneration) is
// refused by the database with LF001 on the election's resource fence. B's
// write stands.
func TestLeadershipFrozenLeaderIsFencedOut(t *testing.T) {
	needServers(t)
	ctx := context.Background()
	check := connect(t)
	election := resourceName(t)
	id := newRow(t, check)

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), "LF_LEADERSHIP_CHILD="+election,
		"LF_LEADERSHIP_ROW="+strconv.Itoa(id), "LF_LEADERSHIP_TTL=1500")
	child.Stderr = os.Stderr
	stdin, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = child.Process.Signal(syscall.SIGCONT)
		_ = child.Process.Kill()
		_ = child.Wait()
	})
	out := bufio.NewScanner(stdout)
	line := func(want string) string {
		t.Helper()
		if !out.Scan() {
			t.Fatalf("the child ended before %q", want)
		}
		f := strings.SplitN(out.Text(), " ", 2)
		if f[0] != want || len(f) != 2 {
			t.Fatalf("the child said %q, expected %q ...", out.Text(), want)
		}
		return f[1]
	}
	aTerm, err := strconv.ParseInt(line("leader"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}

	type won struct {
		lead *Leader
		err  error
	}
	bWon := make(chan won, 1)
	bConn := connect(t)
	go func() {
		l, err := Campaign(ctx, bConn, election, LeadershipOptions{TTLMs: 60000, Value: "B"})
		bWon <- won{l, err}
	}()
	if err := child.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	b := <-bWon
	if b.err != nil {
		t.Fatalf("B's campaign: %v", b.err)
	}
	defer b.lead.Resign(ctx)
	if b.lead.Term <= aTerm {
		t.Fatalf("B's term %d is not above A's %d", b.lead.Term, aTerm)
	}
	if err := b.lead.Fenced(ctx, connect(t), func(ctx context.Context, c *pgx.Conn) error {
		return setOwner(ctx, c, id, "new leader")
	}); err != nil {
		t.Fatalf("B's write: %v", err)
	}

	if err := child.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(stdin, "write\n"); err != nil {
		t.Fatal(err)
	}
	first := line("first")
	if first != "LeadershipLost" && first != "StaleGeneration:"+election {
		t.Fatalf("A's write when woken: %s, want LeadershipLost or StaleGeneration on the election", first)
	}
	t.Logf("A's write when woken: %s", first)
	if s := line("lost"); s != "expired" && s != "lost" {
		t.Fatalf("A's loss: %s", s)
	}
	if s := line("fenced"); s != "LeadershipLost" {
		t.Fatalf("A's lead.Fenced after the loss: %s, want LeadershipLost", s)
	}
	if s := line("raw"); s != "StaleGeneration:"+election {
		t.Fatalf("A's write under its term without the library: %s, want StaleGeneration on the election", s)
	}
	if err := child.Wait(); err != nil {
		t.Fatalf("the child: %v", err)
	}
	if got := readRow(t, check, id); got != (account{"new leader", 100, b.lead.Term}) {
		t.Fatalf("row %+v: the new leader's write must stand", got)
	}
}

// waitCampaigning: until the backend pid runs lease_fence.campaign.
func waitCampaigning(t *testing.T, check *pgx.Conn, pid uint32) {
	t.Helper()
	for {
		var n int
		if err := check.QueryRow(context.Background(),
			"SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND state = 'active' AND query LIKE '%lease_fence.campaign%'",
			int32(pid)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A resigns while B waits in Campaign: B wins. A renews its lease (TTL 10
// minutes) until it resigns, so only the resign can have handed it over.
func TestLeadershipResignHandsOver(t *testing.T) {
	needServers(t)
	ctx := context.Background()
	election := resourceName(t)
	check := connect(t)
	a, err := Campaign(ctx, connect(t), election, LeadershipOptions{TTLMs: 600000})
	if err != nil {
		t.Fatal(err)
	}
	bConn := connect(t)
	bWon := make(chan *Leader, 1)
	go func() {
		l, err := Campaign(ctx, bConn, election, LeadershipOptions{TTLMs: 600000})
		if err != nil {
			t.Errorf("B's campaign: %v", err)
		}
		bWon <- l
	}()
	waitCampaigning(t, check, bConn.PgConn().PID())
	if s, err := a.Resign(ctx); err != nil || s != Released {
		t.Fatalf("A's resign: %v %v", s, err)
	}
	if !errors.Is(a.Lost(), ErrLeadershipLost) || a.Context().Err() == nil {
		t.Fatalf("after its resign A is still a leader: %v", a.Lost())
	}
	b := <-bWon
	if b == nil {
		t.FailNow()
	}
	if b.Term <= a.Term {
		t.Fatalf("B's term %d is not above A's %d", b.Term, a.Term)
	}
	if s, err := b.Resign(ctx); err != nil || s != Released {
		t.Fatalf("B's resign: %v %v", s, err)
	}
}

// Leadership (the callback form): its value, term and identity are what
// lease_fence.leader() shows while it leads (a value with a newline,
// quotes and multibyte text); its fenced write commits; at the end it
// resigned (leader() shows nobody, the last term).
func TestLeadershipValueVisibleInLeader(t *testing.T) {
	needServers(t)
	ctx := context.Background()
	election := resourceName(t)
	check := connect(t)
	id := newRow(t, check)
	value := "host-1:8080\n'quoted' \"twice\" — é"
	var term int64
	err := Leadership(ctx, connect(t), election, LeadershipOptions{TTLMs: 60000, Value: value},
		func(ctx context.Context, lead *Leader) error {
			term = lead.Term
			var held bool
			var got *string
			var gotTerm *int64
			var identity *string
			if err := check.QueryRow(ctx, "SELECT held, term, value, identity FROM lease_fence.leader($1)", election).
				Scan(&held, &gotTerm, &got, &identity); err != nil {
				return err
			}
			if !held || gotTerm == nil || *gotTerm != lead.Term || got == nil || *got != value || lead.Value != value {
				t.Errorf("leader(): held %v term %v value %q; the leader's term %d", held, gotTerm, deref(got), lead.Term)
			}
			if identity != nil && *identity != lead.Identity {
				t.Errorf("leader() identity %q, the leader's %q", *identity, lead.Identity)
			}
			return lead.Fenced(ctx, connect(t), func(ctx context.Context, c *pgx.Conn) error {
				return setOwner(ctx, c, id, "leader")
			})
		})
	if err != nil {
		t.Fatal(err)
	}
	if got := readRow(t, check, id); got != (account{"leader", 100, term}) {
		t.Fatalf("row %+v", got)
	}
	var held bool
	var last *int64
	var value2 *string
	if err := check.QueryRow(ctx, "SELECT held, term, value FROM lease_fence.leader($1)", election).Scan(&held, &last, &value2); err != nil {
		t.Fatal(err)
	}
	if held || last == nil || *last != term || value2 != nil {
		t.Fatalf("after Leadership: held %v term %v value %q", held, last, deref(value2))
	}
}

func deref(s *string) string {
	if s == nil {
		return "<NULL>"
	}
	return *s
}

// Another identity overwrites the election's key: the next renew of the
// heartbeat answers lost, the leader's context is cancelled, Lost() says
// why, and lead.Fenced refuses with ErrLeadershipLost (an ErrLeaseLost
// too) before sending anything; Leadership returns the loss.
func TestLeadershipLostCancelsTheContext(t *testing.T) {
	needServers(t)
	ctx := context.Background()
	election := resourceName(t)
	thief := strings.Repeat("f", 32)
	var writes int64
	work := connectAs(t, "", &writes)
	err := Leadership(ctx, connect(t), election, LeadershipOptions{TTLMs: 900},
		func(ctx context.Context, lead *Leader) error {
			redisDo(t, "SET", leaseKey(election), thief, "PX", 60000)
			<-ctx.Done()
			var lost *LeadershipLostError
			if !errors.As(lead.Lost(), &lost) || lost.Status != "lost" || lost.Term != lead.Term {
				t.Errorf("Lost(): %v", lead.Lost())
			}
			before := writes
			err := lead.Fenced(context.Background(), work, func(context.Context, *pgx.Conn) error {
				t.Error("the work ran after the loss")
				return nil
			})
			if !errors.Is(err, ErrLeadershipLost) || !errors.Is(err, ErrLeaseLost) || writes != before {
				t.Errorf("Fenced after the loss: %v (%d writes)", err, writes-before)
			}
			return ctx.Err()
		})
	if !errors.Is(err, ErrLeadershipLost) {
		t.Fatalf("Leadership: %v, want ErrLeadershipLost", err)
	}
	if v, _ := redis.String(redisDo(t, "GET", leaseKey(election)), nil); v != thief {
		t.Fatalf("the other identity's key holds %q", v)
	}
	redisDo(t, "DEL", leaseKey(election))
}

// TakeOver takes a held lease: a generation above the holder's, the
// holder's renew answers lost, its fenced write is refused by the
// resource fence, the new holder's write stands.
func TestTakeOver(t *testing.T) {
	needServers(t)
	ctx := context.Background()
	res := resourceName(t)
	check := connect(t)
	id := newRow(t, check)
	victimConn := connect(t)
	victim := mustAcquire(t, victimConn, res)
	l, err := TakeOver(ctx, connect(t), res, 60000)
	if err != nil {
		t.Fatal(err)
	}
	if !l.IsAcquired() || l.Generation <= victim.Generation || l.Identity == victim.Identity {
		t.Fatalf("take_over: %+v (victim's generation %d)", l, victim.Generation)
	}
	if _, err := Renew(ctx, victimConn, victim, 60000); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("the victim's renew: %v, want ErrLeaseLost", err)
	}
	if err := Fenced(ctx, victimConn, victim, func(ctx context.Context, c *pgx.Conn) error {
		return setOwner(ctx, c, id, "victim")
	}); !errors.Is(err, ErrStaleGeneration) {
		t.Fatalf("the victim's write: %v, want ErrStaleGeneration", err)
	}
	if err := Fenced(ctx, check, l, func(ctx context.Context, c *pgx.Conn) error {
		return setOwner(ctx, c, id, "taker")
	}); err != nil {
		t.Fatal(err)
	}
	if got := readRow(t, check, id); got != (account{"taker", 100, l.Generation}) {
		t.Fatalf("row %+v", got)
	}
	if s, err := Release(ctx, check, l); err != nil || s != Released {
		t.Fatalf("release: %v %v", s, err)
	}
}

// A job's transaction holds the resource (a transaction-scoped lease
// fences it) and does not end: TakeOver with a 100 ms timeout fails with
// ErrTakeOverTimeout (SQLSTATE 55P03) and takes nothing: the key still
// holds the job's identity, and the job commits.
func TestTakeOverTimeout(t *testing.T) {
	needServers(t)
	ctx := context.Background()
	res := resourceName(t)
	check := connect(t)
	id := newRow(t, check)
	inside := make(chan *Lease, 1)
	finish := make(chan struct{})
	jobDone := make(chan error, 1)
	go func() {
		jobDone <- Job(ctx, connect(t), res, 60000, func(ctx context.Context, l *Lease, c *pgx.Conn) error {
			if err := setOwner(ctx, c, id, "job"); err != nil {
				return err
			}
			inside <- l
			<-finish
			return nil
		})
	}()
	job := <-inside
	_, err := TakeOver(ctx, connect(t), res, 60000, TakeOverTimeout(100))
	var le *LeaseError
	if !errors.Is(err, ErrTakeOverTimeout) || !errors.Is(err, ErrLeaseDenied) || !errors.As(err, &le) || le.Status != "timeout" {
		t.Fatalf("take_over while a job holds the resource: %v, want ErrTakeOverTimeout", err)
	}
	if v, _ := redis.String(redisDo(t, "GET", leaseKey(res)), nil); v != job.Identity {
		t.Fatalf("after the timeout the key holds %q, not the job's identity", v)
	}
	close(finish)
	if err := <-jobDone; err != nil {
		t.Fatalf("the job: %v", err)
	}
	if got := readRow(t, check, id); got != (account{"job", 100, job.Generation}) {
		t.Fatalf("row %+v", got)
	}
}

// Bad arguments are ErrInvalidArgument, with nothing sent on the connection.
func TestLeadershipAndTakeOverBadArguments(t *testing.T) {
	needServers(t)
	ctx := context.Background()
	var writes int64
	c := connectAs(t, "", &writes)
	before := writes
	long := strings.Repeat("x", 1025)
	work := func(context.Context, *Leader) error { t.Error("ran"); return nil }
	for name, err := range map[string]error{
		"campaign ttl 0":         errOf(Campaign(ctx, c, "e", LeadershipOptions{})),
		"campaign negative wait": errOf(Campaign(ctx, c, "e", LeadershipOptions{TTLMs: 1000, WaitMs: -1})),
		"campaign no election":   errOf(Campaign(ctx, c, "", LeadershipOptions{TTLMs: 1000})),
		"campaign value 1025 B":  errOf(Campaign(ctx, c, "e", LeadershipOptions{TTLMs: 1000, Value: long})),
		"campaign scope":         errOf(Campaign(ctx, c, "e", LeadershipOptions{TTLMs: 1000, Scope: "transaction"})),
		"campaign nil conn":      errOf(Campaign(ctx, nil, "e", LeadershipOptions{TTLMs: 1000})),
		"leadership nil work":    Leadership(ctx, c, "e", LeadershipOptions{TTLMs: 1000}, nil),
		"leadership ttl 0":       Leadership(ctx, c, "e", LeadershipOptions{}, work),
		"take_over ttl 0":        errOf(TakeOver(ctx, c, "r", 0)),
		"take_over no resource":  errOf(TakeOver(ctx, c, "", 1000)),
		"take_over timeout -1":   errOf(TakeOver(ctx, c, "r", 1000, TakeOverTimeout(-1))),
		"take_over scope":        errOf(TakeOver(ctx, c, "r", 1000, TakeOverScope("transaction"))),
	} {
		if !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
	if writes != before {
		t.Fatalf("%d writes on the connection for bad arguments", writes-before)
	}
	// 1024 bytes is the limit, not over it
	l, err := Campaign(ctx, c, resourceName(t), LeadershipOptions{TTLMs: 60000, Value: long[:1024], WaitMs: 1})
	if err != nil {
		t.Fatalf("a 1024-byte value: %v", err)
	}
	if s, err := l.Resign(ctx); err != nil || s != Released {
		t.Fatalf("resign: %v %v", s, err)
	}
}

func errOf(_ interface{}, err error) error { return err }

// A healthy idle leader keeps the election: TTL 600 ms, and after three
// TTLs the key still holds its identity (its heartbeat renewed it), it is
// not lost, and its fenced write commits.
func TestLeadershipHeartbeatKeepsAnIdleLeader(t *testing.T) {
	needServers(t)
	ctx := context.Background()
	election := resourceName(t)
	check := connect(t)
	id := newRow(t, check)
	lead, err := Campaign(ctx, connect(t), election, LeadershipOptions{TTLMs: 600})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1800 * time.Millisecond) // three TTLs, idle
	if v, _ := redis.String(redisDo(t, "GET", leaseKey(election)), nil); v != lead.Identity || lead.Lost() != nil {
		t.Fatalf("after three TTLs the key holds %q (identity %q), lost: %v", v, lead.Identity, lead.Lost())
	}
	if err := lead.Fenced(ctx, check, func(ctx context.Context, c *pgx.Conn) error {
		return setOwner(ctx, c, id, "idle leader")
	}); err != nil {
		t.Fatal(err)
	}
	if s, err := lead.Resign(ctx); err != nil || s != Released {
		t.Fatalf("resign: %v %v", s, err)
	}
	if got := readRow(t, check, id); got != (account{"idle leader", 100, lead.Term}) {
		t.Fatalf("row %+v", got)
	}
}

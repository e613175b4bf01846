package leasefence

// The library against real servers: PostgreSQL with lease_fence, and the
// Redis it takes its leases in, as test/clients/run.sh starts them. Told by
// the environment: PGHOST, PGPORT, PGDATABASE, PGUSER (role app, which owns
// none of the fenced tables), LF_NOREDIS_USER (a role whose Redis socket
// does not exist), LF_REDIS_SOCK (the tests' own connection to Redis, to
// expire or delete a lease's key). Without LF_REDIS_SOCK they are skipped
// (go test -run for the server-less ones: unit.sh).

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/pgxpool"
)

const keyPrefix = "lease_fence:"

func needServers(t *testing.T) {
	t.Helper()
	if os.Getenv("LF_REDIS_SOCK") == "" || os.Getenv("PGHOST") == "" {
		t.Skip("no servers: LF_REDIS_SOCK and PGHOST are not set (test/clients/run.sh sets them)")
	}
}

func resourceName(t *testing.T) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "go:" + t.Name() + ":" + hex.EncodeToString(b)
}

// countingConn counts the writes on a connection's socket: each round trip
// is at least one write, so "one write, then the reply read" is one round trip.
type countingConn struct {
	net.Conn
	writes *int64
}

func (c *countingConn) Write(b []byte) (int, error) {
	atomic.AddInt64(c.writes, 1)
	return c.Conn.Write(b)
}

func connConfig(t *testing.T, user string, writes *int64) *pgx.ConnConfig {
	t.Helper()
	cfg, err := pgx.ParseConfig("")
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		cfg.User = user
	}
	if writes != nil {
		d := &net.Dialer{}
		cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &countingConn{Conn: c, writes: writes}, nil
		}
	}
	return cfg
}

func connect(t *testing.T) *pgx.Conn { return connectAs(t, "", nil) }

func connectAs(t *testing.T, user string, writes *int64) *pgx.Conn {
	t.Helper()
	c, err := pgx.ConnectConfig(context.Background(), connConfig(t, user, writes))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func redisDo(t *testing.T, cmd string, args ...interface{}) interface{} {
	t.Helper()
	c, err := redis.Dial("unix", os.Getenv("LF_REDIS_SOCK"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	v, err := c.Do(cmd, args...)
	if err != nil {
		t.Fatalf("redis %s: %v", cmd, err)
	}
	return v
}

func leaseKey(res string) string { return keyPrefix + "{" + res + "}" }

func keyExists(t *testing.T, res string) bool {
	t.Helper()
	n, err := redis.Int(redisDo(t, "EXISTS", leaseKey(res)), nil)
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// expire: the lease's key expires now (PEXPIRE 1), and the test waits
// until it is gone.
func expire(t *testing.T, res string) {
	t.Helper()
	if n, _ := redis.Int(redisDo(t, "PEXPIRE", leaseKey(res), 1), nil); n != 1 {
		t.Fatalf("no key %s to expire", leaseKey(res))
	}
	for i := 0; keyExists(t, res); i++ {
		if i > 2000 {
			t.Fatalf("key %s did not expire", leaseKey(res))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func newRow(t *testing.T, c *pgx.Conn) int {
	t.Helper()
	var id int
	if err := c.QueryRow(context.Background(), "INSERT INTO account (owner, balance) VALUES ('nobody', 100) RETURNING id").Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

type account struct {
	owner   string
	balance int
	fence   int64
}

func readRow(t *testing.T, c *pgx.Conn, id int) account {
	t.Helper()
	var a account
	if err := c.QueryRow(context.Background(), "SELECT owner, balance, fence FROM account WHERE id = $1", id).Scan(&a.owner, &a.balance, &a.fence); err != nil {
		t.Fatal(err)
	}
	return a
}

func setOwner(ctx context.Context, c *pgx.Conn, id int, owner string) error {
	_, err := c.Exec(ctx, "UPDATE account SET owner = $1 WHERE id = $2", owner, id)
	return err
}

func mustAcquire(t *testing.T, db DB, res string) *Lease {
	t.Helper()
	l, err := Acquire(context.Background(), db, res, 60000)
	if err != nil {
		t.Fatalf("acquire %s: %v", res, err)
	}
	if !l.IsAcquired() || !l.HasGeneration || l.Identity == "" || l.Status != "acquired" {
		t.Fatalf("acquire %s: %+v", res, l)
	}
	return l
}

// The story: A holds the lease and stalls; its key expires; B takes the
// lease with a higher generation and writes. A's late fenced writes are
// refused (StaleGeneration, nothing written), B's write stands.
func TestTwoHolders(t *testing.T) {
	needServers(t)
	ctx := context.Background()
	aConn, bConn, check := connect(t), connect(t), connect(t)
	res := resourceName(t)
	id := newRow(t, check)

	a := mustAcquire(t, aConn, res)
	if err := Fenced(ctx, aConn, a, func(ctx context.Context, c *pgx.Conn) error {
		return setOwner(ctx, c, id, "A")
	}); err != nil {
		t.Fatalf("A's write while it holds the lease: %v", err)
	}
	expire(t, res) // A stalls past its TTL
	b := mustAcquire(t, bConn, res)
	if b.Generation <= a.Generation {
		t.Fatalf("B's generation %d is not above A's %d", b.Generation, a.Generation)
	}
	if err := Fenced(ctx, bConn, b, func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, "UPDATE account SET owner = 'B', balance = balance + 1 WHERE id = $1", id)
		return err
	}); err != nil {
		t.Fatalf("B's write: %v", err)
	}

	// A again, with its lease: the resource fence refuses it before its work runs
	ran := false
	err := Fenced(ctx, aConn, a, func(ctx context.Context, c *pgx.Conn) error {
		ran = true
		return setOwner(ctx, c, id, "A late")
	})
	var fe *FenceError
	if !errors.Is(err, ErrStaleGeneration) || !errors.As(err, &fe) {
		t.Fatalf("A's late write: %v, want ErrStaleGeneration", err)
	}
	if ran || fe.SQLState != "LF001" || fe.Resource != res || fe.Schema != "lease_fence" || fe.Table != "resource_generation" {
		t.Fatalf("A's late write: ran %v, %+v", ran, fe)
	}
	// rows only (a bare generation): the row fence refuses it, naming the row
	err = FencedGeneration(ctx, aConn, a.Generation, "", func(ctx context.Context, c *pgx.Conn) error {
		return setOwner(ctx, c, id, "A late")
	})
	fe = nil
	if !errors.Is(err, ErrStaleGeneration) || !errors.As(err, &fe) ||
		fe.Schema != "public" || fe.Table != "account" || fe.Column != "fence" {
		t.Fatalf("A's late row write: %v (%+v)", err, fe)
	}
	if got := readRow(t, check, id); got != (account{"B", 101, b.Generation}) {
		t.Fatalf("row %+v: B's write must stand", got)
	}
	if _, err := Renew(ctx, aConn, a, 60000); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("A's renew: %v, want ErrLeaseLost", err)
	}
	if s, err := Release(ctx, aConn, a); err != nil || s != NotHeld {
		t.Fatalf("A's release: %v %v", s, err)
	}
	if s, err := Release(ctx, bConn, b); err != nil || s != Released {
		t.Fatalf("B's release: %v %v", s, err)
	}
}

func TestTryAcquireBusyIsNil(t *testing.T) {
	needServers(t)
	ctx := context.Background()
	c1, c2 := connect(t), connect(t)
	res := resourceName(t)
	holder := mustAcquire(t, c1, res)
	l, err := TryAcquire(ctx, c2, res, 60000)
	if l != nil || err != nil {
		t.Fatalf("busy: %+v, %v; want nil, nil", l, err)
	}
	if s, _ := Release(ctx, c1, holder); s != Released {
		t.Fatalf("release: %s", s)
	}
	l, err = TryAcquire(ctx, c2, res, 60000)
	if err != nil || !l.IsAcquired() || l.Generation <= holder.Generation {
		t.Fatalf("free: %+v, %v", l, err)
	}
	Release(ctx, c2, l)
}

func TestAcquireBusyIsLeaseBusy(t *testing.T) {
	needServers(t)
	ctx := context.Background()
	c1, c2 := connect(t), connect(t)
	res := resourceName(t)
	holder := mustAcquire(t, c1, res)
	defer Release(ctx, c1, holder)
	l, err := Acquire(ctx, c2, res, 60000)
	var le *LeaseError
	if l != nil || !errors.Is(err, ErrLeaseBusy) || !errors.Is(err, ErrLeaseDenied) || errors.Is(err, ErrLeaseUnknown) ||
		!errors.As(err, &le) || le.Status != "busy" || le.Lease == nil || le.Lease.Resource != res {
		t.Fatalf("busy acquire: %+v, %v", l, err)
	}
}

// A generation key that holds no generation: the server's XX001 is
// ErrDataCorrupted, for Acquire, TryAcquire and Job alike; neither a
// denial nor unknown, and still pgx's *pgconn.PgError underneath.
//
// The value is longer than any generation: the script compares generations
// by length first, so a shorter one ("abc") is below a generation of 4
// digits and would be overwritten, once an earlier test has healed a stale
// answer and moved the generations past 999.
const corruptGeneration = "xxxxxxxxxxxxxxxxxxxx"

func TestCorruptGenerationKeyIsDataCorrupted(t *testing.T) {
	needServers(t)
	ctx := context.Background()
	c := connect(t)
	res := resourceName(t)
	redisDo(t, "SET", leaseKey(res)+":gen", corruptGeneration)
	defer redisDo(t, "DEL", leaseKey(res)+":gen")
	calls := map[string]func() error{
		"Acquire":    func() error { _, err := Acquire(ctx, c, res, 10000); return err },
		"TryAcquire": func() error { _, err := TryAcquire(ctx, c, res, 10000); return err },
		"Job": func() error {
			return Job(ctx, c, res, 10000, func(context.Context, *Lease, *pgx.Conn) error {
				t.Error("Job ran its work under a corrupt generation key")
				return nil
			})
		},
	}
	for name, call := range calls {
		err := call()
		var dc *DataCorruptedError
		var pe *pgconn.PgError
		if !errors.Is(err, ErrDataCorrupted) || !errors.As(err, &dc) || !errors.As(err, &pe) ||
			pe.Code != "XX001" || errors.Is(err, ErrLeaseDenied) || errors.Is(err, ErrLeaseUnknown) {
			t.Errorf("%s: %v (%T)", name, err, err)
		}
	}
	if keyExists(t, res) {
		t.Error("a lease key was set")
	}
}

// Redis unreachable (the role whose Redis socket does not exist): a
// definite no, for Acquire and TryAcquire alike; Release reports it.
func TestRedisDownIsUnavailable(t *testing.T) {
	needServers(t)
	user := os.Getenv("LF_NOREDIS_USER")
	if user == "" {
		t.Fatal("LF_NOREDIS_USER is not set")
	}
	ctx := context.Background()
	c := connectAs(t, user, nil)
	res := resourceName(t)
	_, err := Acquire(ctx, c, res, 60000)
	var le *LeaseError
	if !errors.Is(err, ErrLeaseUnavailable) || !errors.Is(err, ErrLeaseDenied) || !errors.As(err, &le) || le.Reason == "" {
		t.Fatalf("acquire without Redis: %v", err)
	}
	if l, err := TryAcquire(ctx, c, res, 60000); l != nil || !errors.Is(err, ErrLeaseUnavailable) {
		t.Fatalf("try_acquire without Redis: %+v, %v (unavailable is not busy)", l, err)
	}
	if err := Job(ctx, c, res, 60000, func(context.Context, *Lease, *pgx.Conn) error {
		t.Error("the job ran without a lease")
		return nil
	}); !errors.Is(err, ErrLeaseUnavailable) {
		t.Fatalf("job without Redis: %v", err)
	}
	s, err := Release(ctx, c, NewLease(res, "0123456789abcdef0123456789abcdef", 1))
	if err != nil || s != ReleaseUnavailable {
		t.Fatalf("release without Redis: %v, %v", s, err)
	}
}

func TestRenewAndRelease(t *testing.T) {
	needServers(t)
	ctx := context.Background()
	c := connect(t)
	res := resourceName(t)
	l := mustAcquire(t, c, res)
	v, err := Renew(ctx, c, l, 30000, MinValidity(1000))
	if err != nil || v < 1000 || v > 30000 {
		t.Fatalf("renew: %d, %v", v, err)
	}
	pttl, _ := redis.Int64(redisDo(t, "PTTL", leaseKey(res)), nil)
	if pttl > 30000 || pttl <= 0 {
		t.Fatalf("PTTL %d after renew to 30000", pttl)
	}
	if s, err := Release(ctx, c, l); err != nil || s != Released || keyExists(t, res) {
		t.Fatalf("release: %v, %v", s, err)
	}
	if _, err := Renew(ctx, c, l, 30000); !errors.Is(err, ErrLeaseLost) || !errors.Is(err, ErrLeaseDenied) {
		t.Fatalf("renew of a released lease: %v", err)
	}
	if keyExists(t, res) {
		t.Fatal("renew recreated the key")
	}
	if s, err := Release(ctx, c, l); err != nil || s != NotHeld {
		t.Fatalf("second release: %v, %v", s, err)
	}
}

func TestJobCommitsUnderItsGeneration(t *testing.T) {
	needServers(t)
	ctx := context.Background()
	c, check := connect(t), connect(t)
	res := resourceName(t)
	id := newRow(t, check)
	var got *Lease
	err := Job(ctx, c, res, 60000, func(ctx context.Context, l *Lease, tx *pgx.Conn) error {
		got = l
		var cur int64
		if err := tx.QueryRow(ctx, "SELECT lease_fence.current_generation()").Scan(&cur); err != nil {
			return err
		}
		if cur != l.Generation {
			t.Errorf("current_generation %d, lease %d", cur, l.Generation)
		}
		if !keyExists(t, res) {
			t.Error("no key while the job runs")
		}
		return setOwner(ctx, tx, id, "job")
	}, MinValidity(500))
	if err != nil || got == nil || got.ValidityMs < 500 {
		t.Fatalf("job: %v, %+v", err, got)
	}
	if row := readRow(t, check, id); row != (account{"job", 100, got.Generation}) {
		t.Fatalf("row %+v", row)
	}
	if keyExists(t, res) {
		t.Fatal("COMMIT did not release the lease")
	}
	if s := c.PgConn().TxStatus(); s != 'I' {
		t.Fatalf("connection left in transaction status %q", s)
	}
}

// The lease's key is deleted while the job runs: COMMIT fails with LF010
// (commit_check = always: COMMIT asks Redis whatever the TTL left) and
// nothing is committed.
func TestJobLostAtCommit(t *testing.T) {
	needServers(t)
	ctx := context.Background()
	c, check := connect(t), connect(t)
	res := resourceName(t)
	id := newRow(t, check)
	err := Job(ctx, c, res, 60000, func(ctx context.Context, l *Lease, tx *pgx.Conn) error {
		if _, err := tx.Exec(ctx, "SET LOCAL lease_fence.commit_check = 'always'"); err != nil {
			return err
		}
		if err := setOwner(ctx, tx, id, "lost"); err != nil {
			return err
		}
		if n, _ := redis.Int(redisDo(t, "DEL", leaseKey(res)), nil); n != 1 {
			t.Error("no key to delete")
		}
		return nil
	})
	var fe *FenceError
	if !errors.Is(err, ErrLeaseLostAtCommit) || !errors.As(err, &fe) || fe.SQLState != "LF010" {
		t.Fatalf("job whose lease was lost: %v", err)
	}
	if row := readRow(t, check, id); row.owner != "nobody" || row.fence != 0 {
		t.Fatalf("row %+v: a lost job's write was committed", row)
	}
	if s := c.PgConn().TxStatus(); s != 'I' {
		t.Fatalf("connection left in transaction status %q", s)
	}
}

func TestJobBusyDoesNotRun(t *testing.T) {
	needServers(t)
	ctx := context.Background()
	c1, c2 := connect(t), connect(t)
	res := resourceName(t)
	holder := mustAcquire(t, c1, res)
	defer Release(ctx, c1, holder)
	err := Job(ctx, c2, res, 60000, func(context.Context, *Lease, *pgx.Conn) error {
		t.Error("the job ran without its lease")
		return nil
	})
	if !errors.Is(err, ErrLeaseBusy) {
		t.Fatalf("job on a held lease: %v", err)
	}
	if s := c2.PgConn().TxStatus(); s != 'I' {
		t.Fatalf("connection left in transaction status %q", s)
	}
}

func TestTransactionLeaseCommitsAndLostAtCommit(t *testing.T) {
	needServers(t)
	ctx := context.Background()
	c, check := connect(t), connect(t)
	res := resourceName(t)
	id := newRow(t, check)
	var gen int64
	if err := TransactionLease(ctx, c, res, 60000, func(ctx context.Context, l *Lease, tx *pgx.Conn) error {
		gen = l.Generation
		return setOwner(ctx, tx, id, "tx")
	}); err != nil {
		t.Fatal(err)
	}
	if row := readRow(t, check, id); row != (account{"tx", 100, gen}) || keyExists(t, res) {
		t.Fatalf("row %+v, key left %v", row, keyExists(t, res))
	}
	err := TransactionLease(ctx, c, res, 60000, func(ctx context.Context, l *Lease, tx *pgx.Conn) error {
		if _, err := tx.Exec(ctx, "SET LOCAL lease_fence.commit_check = 'always'"); err != nil {
			return err
		}
		redisDo(t, "DEL", leaseKey(res))
		return setOwner(ctx, tx, id, "lost")
	})
	if !errors.Is(err, ErrLeaseLostAtCommit) {
		t.Fatalf("lost at commit: %v", err)
	}
	if row := readRow(t, check, id); row.owner != "tx" {
		t.Fatalf("row %+v", row)
	}
}

// Fenced: BEGIN and set_generation in one write, the work runs after its
// reply: one round trip before the work, counted on the socket.
func TestFencedOneRoundTrip(t *testing.T) {
	needServers(t)
	ctx := context.Background()
	var writes int64
	c := connectAs(t, "", &writes)
	check := connect(t)
	res := resourceName(t)
	id := newRow(t, check)
	l := mustAcquire(t, check, res)
	defer Release(ctx, check, l)
	for i := 0; i < 2; i++ { // the first use of a connection too
		atomic.StoreInt64(&writes, 0)
		var before int64 = -1
		err := Fenced(ctx, c, l, func(ctx context.Context, tx *pgx.Conn) error {
			before = atomic.LoadInt64(&writes)
			return setOwner(ctx, tx, id, "fenced")
		})
		if err != nil {
			t.Fatal(err)
		}
		if before != 1 {
			t.Fatalf("run %d: %d writes before the work, want 1 (BEGIN + set_generation in one)", i, before)
		}
	}
	if row := readRow(t, check, id); row.fence != l.Generation {
		t.Fatalf("row %+v", row)
	}
}

// Job: BEGIN and the acquire in one round trip too.
func TestJobOneRoundTrip(t *testing.T) {
	needServers(t)
	ctx := context.Background()
	var writes int64
	c := connectAs(t, "", &writes)
	res := resourceName(t)
	atomic.StoreInt64(&writes, 0)
	var before int64 = -1
	if err := Job(ctx, c, res, 60000, func(context.Context, *Lease, *pgx.Conn) error {
		before = atomic.LoadInt64(&writes)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if before != 1 {
		t.Fatalf("%d writes before the work, want 1 (BEGIN + acquire in one)", before)
	}
}

// A cancelled context cancels the statement running in the server; the
// transaction is rolled back, its write never committed.
func TestContextCancelCancelsQuery(t *testing.T) {
	needServers(t)
	c, check := connect(t), connect(t)
	res := resourceName(t)
	id := newRow(t, check)
	l := mustAcquire(t, check, res)
	defer Release(context.Background(), check, l)
	marker := "go-cancel-" + res
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		// cancel once the server runs the sleep
		for i := 0; i < 6000; i++ {
			var n int
			_ = check.QueryRow(context.Background(),
				"SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE '%' || $1 || '%' AND pid <> pg_backend_pid()",
				marker).Scan(&n)
			if n > 0 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
	}()
	err := Fenced(ctx, c, l, func(ctx context.Context, tx *pgx.Conn) error {
		if err := setOwner(ctx, tx, id, "cancelled"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "SELECT pg_sleep(60) /* "+marker+" */")
		return err
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v (%T), want context.Canceled", err, err)
	}
	for i := 0; ; i++ { // the server stopped it (or the session ended)
		var n int
		if err := check.QueryRow(context.Background(),
			"SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE '%' || $1 || '%' AND pid <> pg_backend_pid()",
			marker).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if i > 3000 {
			t.Fatal("the sleep still runs in the server")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if row := readRow(t, check, id); row.owner != "nobody" {
		t.Fatalf("row %+v: the cancelled transaction's write was committed", row)
	}
}

// A context already done: nothing is sent, nothing acquired.
func TestContextDoneBeforeAcquire(t *testing.T) {
	needServers(t)
	c := connect(t)
	res := resourceName(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Acquire(ctx, c, res, 60000); !errors.Is(err, context.Canceled) {
		t.Fatalf("acquire with a done ctx: %v", err)
	}
	if keyExists(t, res) {
		t.Fatal("acquired with a cancelled ctx")
	}
}

// A pool: each verb works on it, and a fenced transaction runs on one
// checked-out connection from BEGIN to COMMIT.
func TestPool(t *testing.T) {
	needServers(t)
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig("")
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 3
	pool, err := pgxpool.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	check := connect(t)
	res := resourceName(t)
	id := newRow(t, check)
	a := mustAcquire(t, pool, res)
	for i := 0; i < 5; i++ {
		if err := Fenced(ctx, pool, a, func(ctx context.Context, tx *pgx.Conn) error {
			var cur int64
			if err := tx.QueryRow(ctx, "SELECT lease_fence.current_generation()").Scan(&cur); err != nil {
				return err
			}
			if cur != a.Generation {
				t.Errorf("current_generation %d on the work's connection, lease %d", cur, a.Generation)
			}
			return setOwner(ctx, tx, id, "pool")
		}); err != nil {
			t.Fatal(err)
		}
	}
	expire(t, res)
	b := mustAcquire(t, pool, res)
	if err := Fenced(ctx, pool, b, func(ctx context.Context, tx *pgx.Conn) error {
		return setOwner(ctx, tx, id, "pool B")
	}); err != nil {
		t.Fatal(err)
	}
	if err := Fenced(ctx, pool, a, func(ctx context.Context, tx *pgx.Conn) error {
		return setOwner(ctx, tx, id, "pool A late")
	}); !errors.Is(err, ErrStaleGeneration) {
		t.Fatalf("stale holder through the pool: %v", err)
	}
	if row := readRow(t, check, id); row != (account{"pool B", 100, b.Generation}) {
		t.Fatalf("row %+v", row)
	}
	if err := Job(ctx, pool, resourceName(t), 60000, func(ctx context.Context, l *Lease, tx *pgx.Conn) error {
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if s, err := Release(ctx, pool, b); err != nil || s != Released {
		t.Fatalf("release through the pool: %v %v", s, err)
	}
	if st := pool.Stat(); st.AcquiredConns() != 0 {
		t.Fatalf("%d connections still checked out", st.AcquiredConns())
	}
}

// Bad input: a clear error before anything is sent.
func TestBadInputBeforeAnySideEffect(t *testing.T) {
	needServers(t)
	ctx := context.Background()
	c := connect(t)
	res := resourceName(t)
	for name, err := range map[string]error{
		"ttl 0":               func() error { _, err := Acquire(ctx, c, res, 0); return err }(),
		"min validity > ttl":  func() error { _, err := TryAcquire(ctx, c, res, 1000, MinValidity(2000)); return err }(),
		"negative wait":       func() error { _, err := Acquire(ctx, c, res, 1000, Wait(-1)); return err }(),
		"empty resource":      func() error { _, err := Acquire(ctx, c, "", 1000); return err }(),
		"job ttl 0":           Job(ctx, c, res, 0, func(context.Context, *Lease, *pgx.Conn) error { return nil }),
		"job nil work":        Job(ctx, c, res, 1000, nil),
		"fenced nil lease":    Fenced(ctx, c, nil, func(context.Context, *pgx.Conn) error { return nil }),
		"negative generation": FencedGeneration(ctx, c, -1, "", func(context.Context, *pgx.Conn) error { return nil }),
		"renew nil lease":     func() error { _, err := Renew(ctx, c, nil, 1000); return err }(),
		"release no identity": func() error { _, err := Release(ctx, c, &Lease{Resource: res}); return err }(),
		"nil DB":              func() error { _, err := Acquire(ctx, nil, res, 1000); return err }(),
	} {
		if !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
	if keyExists(t, res) {
		t.Fatal("bad input acquired a lease")
	}
}

// Inside a transaction the caller opened: refused, nothing sent.
func TestInTransactionRefused(t *testing.T) {
	needServers(t)
	ctx := context.Background()
	c := connect(t)
	res := resourceName(t)
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := Acquire(ctx, c, res, 60000); !errors.Is(err, ErrInTransaction) {
		t.Fatalf("acquire in a transaction: %v", err)
	}
	if err := Fenced(ctx, c, NewLease(res, "x", 1), func(context.Context, *pgx.Conn) error { return nil }); !errors.Is(err, ErrInTransaction) {
		t.Fatalf("fenced in a transaction: %v", err)
	}
	if keyExists(t, res) {
		t.Fatal("acquired inside the caller's transaction")
	}
}

// Work's error rolls back and is returned as is; a strict table's write
// without a generation is ErrMissingGeneration through Translate; a failed
// statement whose error the work swallowed makes COMMIT an error, not a
// silent rollback.
func TestErrorsRollBack(t *testing.T) {
	needServers(t)
	ctx := context.Background()
	c, check := connect(t), connect(t)
	res := resourceName(t)
	id := newRow(t, check)
	l := mustAcquire(t, check, res)
	defer Release(ctx, check, l)
	mine := errors.New("mine")
	if err := Fenced(ctx, c, l, func(ctx context.Context, tx *pgx.Conn) error {
		if err := setOwner(ctx, tx, id, "rolled back"); err != nil {
			return err
		}
		return mine
	}); err != mine {
		t.Fatalf("work's error: %v", err)
	}
	if row := readRow(t, check, id); row.owner != "nobody" {
		t.Fatalf("row %+v", row)
	}
	_, err := c.Exec(ctx, "INSERT INTO ledger (note) VALUES ('no generation')")
	if err2 := Translate(err); !errors.Is(err2, ErrMissingGeneration) {
		t.Fatalf("strict table without a generation: %v", err)
	}
	if err := Fenced(ctx, c, l, func(ctx context.Context, tx *pgx.Conn) error {
		_, err := tx.Exec(ctx, "INSERT INTO ledger (note) VALUES ('fenced')")
		return err
	}); err != nil {
		t.Fatalf("strict table, fenced: %v", err)
	}
	err = Fenced(ctx, c, l, func(ctx context.Context, tx *pgx.Conn) error {
		_, _ = tx.Exec(ctx, "SELECT 1/0")
		return nil
	})
	if !errors.Is(err, ErrTransactionRolledBack) || !strings.Contains(err.Error(), "rolled back") {
		t.Fatalf("swallowed error: %v", err)
	}
}

// Work that catches a refused write (StaleGeneration: a newer generation
// wrote the row meanwhile) and returns nil: its transaction is failed, and
// PostgreSQL answers COMMIT with ROLLBACK. Job and TransactionLease return
// ErrTransactionRolledBack, never nil; nothing of the transaction is
// committed; the lease went with it; the connection is idle.
func TestCaughtRefusedWriteIsTransactionRolledBack(t *testing.T) {
	needServers(t)
	ctx := context.Background()
	for _, verb := range []string{"Job", "TransactionLease"} {
		c, check := connect(t), connect(t)
		res := resourceName(t) + verb
		id, mine := newRow(t, check), newRow(t, check)
		run := Job
		if verb == "TransactionLease" {
			run = TransactionLease
		}
		var caught error
		err := run(ctx, c, res, 60000, func(ctx context.Context, l *Lease, tx *pgx.Conn) error {
			if err := setOwner(ctx, tx, mine, "job"); err != nil {
				return err
			}
			var newer int64
			if err := check.QueryRow(ctx, "SELECT lease_fence.next_generation()").Scan(&newer); err != nil {
				return err
			}
			if err := FencedGeneration(ctx, check, newer, "", func(ctx context.Context, o *pgx.Conn) error {
				return setOwner(ctx, o, id, "newer")
			}); err != nil {
				return err
			}
			caught = Translate(setOwner(ctx, tx, id, "stale"))
			return nil // the work goes on as if nothing happened
		})
		if !errors.Is(caught, ErrStaleGeneration) {
			t.Fatalf("%s: the work did not catch a refused write: %v", verb, caught)
		}
		if !errors.Is(err, ErrTransactionRolledBack) {
			t.Fatalf("%s: a COMMIT answered ROLLBACK returned %v", verb, err)
		}
		var fe *FenceError
		if errors.As(err, &fe) {
			t.Fatalf("%s: not a fence error: %v", verb, err)
		}
		if row := readRow(t, check, mine); row != (account{"nobody", 100, 0}) {
			t.Fatalf("%s: row %+v: the rolled-back transaction's write was committed", verb, row)
		}
		if keyExists(t, res) {
			t.Fatalf("%s: the lease outlived its transaction", verb)
		}
		if s := c.PgConn().TxStatus(); s != 'I' {
			t.Fatalf("%s: connection left in transaction status %q", verb, s)
		}
	}
}

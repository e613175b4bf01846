// two_holders — two workers, one resource: the stale one is fenced off.
//
// Worker A acquires the lease "account:<id>" with a short TTL, then stalls
// past it (a GC pause, a slow disk). Worker B tries for the lease until it
// is free, gets a newer generation, and writes the row. A wakes up and
// tries its write: lease_fence refuses it (errors.Is(err,
// leasefence.ErrStaleGeneration)), and B's row stands.
//
//	go run .    (from a checkout, offline on Debian: bash ../../../clients/go/vendor.sh . first)
//
// Connection: the usual libpq environment (PGHOST, PGPORT, PGDATABASE,
// PGUSER, PGPASSWORD). Needs the table "account" (id, owner, balance) with
// lease_fence.protect('account'), as in test/clients/run.sh. Exit status 0
// when A was fenced off and B's row stands, 1 otherwise.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/pgxpool"
	leasefence "github.com/leasefence/lease_fence/clients/go"
)

func setOwner(owner string, id int) leasefence.Work {
	return func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "UPDATE account SET owner = $1 WHERE id = $2", owner, id)
		return err
	}
}

func run(ctx context.Context) error {
	pool, err := pgxpool.Connect(ctx, "") // PG* environment variables
	if err != nil {
		return err
	}
	defer pool.Close()

	var id int
	if err := pool.QueryRow(ctx, "INSERT INTO account (owner) VALUES ('nobody') RETURNING id").Scan(&id); err != nil {
		return err
	}
	resource := fmt.Sprintf("account:%d", id)

	// A: a lease of 300 ms, then A stalls
	leaseA, err := leasefence.Acquire(ctx, pool, resource, 300)
	if err != nil {
		return err
	}
	fmt.Printf("A acquired %s at generation %d\n", resource, leaseA.Generation)

	// B: busy (nil) while A's lease lives; then a newer generation
	var leaseB *leasefence.Lease
	for deadline := time.Now().Add(30 * time.Second); leaseB == nil; {
		if leaseB, err = leasefence.TryAcquire(ctx, pool, resource, 10000); err != nil {
			return err
		}
		if leaseB == nil {
			if time.Now().After(deadline) {
				return errors.New("A's lease did not expire")
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	fmt.Printf("B acquired %s at generation %d\n", resource, leaseB.Generation)
	if err := leasefence.Fenced(ctx, pool, leaseB, setOwner("B", id)); err != nil {
		return err
	}
	fmt.Println("B wrote owner = B")

	// A wakes up and writes under its old generation
	fencedOff := false
	err = leasefence.Fenced(ctx, pool, leaseA, setOwner("A", id))
	var fe *leasefence.FenceError
	switch {
	case errors.Is(err, leasefence.ErrStaleGeneration) && errors.As(err, &fe):
		fencedOff = true
		fmt.Printf("A's write refused: %s (resource %s, table %s)\n", fe.SQLState, fe.Resource, fe.Table)
	case err != nil:
		return err
	default:
		fmt.Println("A's write went through: NOT fenced")
	}
	releasedA, err := leasefence.Release(ctx, pool, leaseA)
	if err != nil {
		return err
	}
	fmt.Println("A's release:", releasedA)

	var owner string
	var fence int64
	if err := pool.QueryRow(ctx, "SELECT owner, fence FROM account WHERE id = $1", id).Scan(&owner, &fence); err != nil {
		return err
	}
	fmt.Printf("row %d: owner = %s, fence = %d\n", id, owner, fence)
	releasedB, err := leasefence.Release(ctx, pool, leaseB)
	if err != nil {
		return err
	}
	fmt.Println("B's release:", releasedB)

	if !fencedOff || owner != "B" || fence != leaseB.Generation ||
		releasedA != leasefence.NotHeld || releasedB != leasefence.Released {
		return errors.New("FAILED")
	}
	return nil
}

func main() {
	if err := run(context.Background()); err != nil {
		fmt.Println("two_holders:", err)
		os.Exit(1)
	}
	fmt.Println("two_holders: ok")
}

package leasefence

import "github.com/jackc/pgconn"

type pgconnError pgconn.PgError

func (e *pgconnError) pg() *pgconn.PgError { p := pgconn.PgError(*e); return &p }

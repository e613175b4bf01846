module github.com/leasefence/lease_fence/clients/go

go 1.19

require (
	github.com/gomodule/redigo v1.8.3
	github.com/jackc/pgconn v1.11.0
	github.com/jackc/pgx/v4 v4.15.0
)

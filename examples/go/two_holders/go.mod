module example.com/two_holders

go 1.19

require github.com/leasefence/lease_fence/clients/go v1.5.0

require (
	github.com/gomodule/redigo v1.8.3 // indirect
	github.com/jackc/chunkreader/v2 v2.0.1 // indirect
	github.com/jackc/pgconn v1.11.0 // indirect
	github.com/jackc/pgio v1.0.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgproto3/v2 v2.2.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20200714003250-2b9c44734f2b // indirect
	github.com/jackc/pgtype v1.10.0 // indirect
	github.com/jackc/pgx/v4 v4.15.0 // indirect
	github.com/jackc/puddle v1.2.1 // indirect
	golang.org/x/crypto v0.0.0-20211215165025-cf75a172585e // indirect
	golang.org/x/text v0.7.0 // indirect
)

// the library from this checkout (remove this line to use the published one)
replace github.com/leasefence/lease_fence/clients/go => ../../../clients/go

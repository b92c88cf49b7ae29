// A clickhouse-go v2 client over HTTP, as Grafana's ClickHouse plugin opens
// one: it connects to the address given, runs the queries the integration
// test names and prints one JSON line per result, or the server's exception.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: chgo HOST:PORT DATABASE [USER PASSWORD]")
		os.Exit(2)
	}
	auth := clickhouse.Auth{Database: os.Args[2]}
	if len(os.Args) >= 5 {
		auth.Username, auth.Password = os.Args[3], os.Args[4]
	}
	conn, err := clickhouse.Open(&clickhouse.Options{
		Addr: []string{os.Args[1]}, Auth: auth, Protocol: clickhouse.HTTP,
		Compression: &clickhouse.Compression{Method: clickhouse.CompressionLZ4},
	})
	check("open", err)
	ctx := context.Background()
	check("ping", conn.Ping(ctx))
	out := json.NewEncoder(os.Stdout)

	var version string
	check("version", conn.QueryRow(ctx, "SELECT version()").Scan(&version))
	emit(out, "version", version)

	var n uint64
	var model string
	pctx := clickhouse.Context(ctx, clickhouse.WithParameters(clickhouse.Parameters{"m": "it's a model"}))
	check("params", conn.QueryRow(pctx, "SELECT count() AS n, {m:String} AS model FROM numbers(3)").Scan(&n, &model))
	emit(out, "params", map[string]any{"n": n, "model": model})

	rows, err := conn.Query(ctx, "SELECT model, count() AS n FROM generations GROUP BY model ORDER BY model")
	check("generations", err)
	counts := map[string]uint64{}
	for rows.Next() {
		var m string
		var c uint64
		check("scan", rows.Scan(&m, &c))
		counts[m] = c
	}
	check("rows", rows.Err())
	emit(out, "generations", counts)

	err = conn.Exec(ctx, "INSERT INTO generations (model) VALUES ('x')")
	var ex *clickhouse.Exception
	if errors.As(err, &ex) {
		emit(out, "refused", map[string]any{"code": ex.Code, "name": ex.Name})
	} else {
		emit(out, "refused", map[string]any{"error": fmt.Sprint(err)})
	}
}

func emit(out *json.Encoder, what string, value any) {
	check("encode", out.Encode(map[string]any{"what": what, "value": value}))
}

func check(what string, err error) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %s\n", what, strings.TrimSpace(err.Error()))
		os.Exit(1)
	}
}

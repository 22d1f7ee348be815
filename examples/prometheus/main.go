// Command prometheus shows redlease's metrics in Prometheus: it runs an
// engine whose MeterProvider is the OpenTelemetry SDK with the Prometheus
// exporter, serves them on /metrics, and keeps a small workload going
// (workers acquiring, holding and releasing a few resources, and one
// auto-extended lease) so that every instrument has something to show.
//
//	go run . -nodes 127.0.0.1:6379            # then: curl 127.0.0.1:9464/metrics
//
// It is a module of its own so that users of redlease do not download the
// exporter and the Prometheus client.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/redlease/redlease/engine"
)

func main() {
	nodes := flag.String("nodes", "127.0.0.1:6379", "comma-separated host:port of the Redis nodes")
	listen := flag.String("listen", "127.0.0.1:9464", "address to serve /metrics on")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	err := run(ctx, strings.Split(*nodes, ","), *listen, func(addr string) {
		log.Printf("serving http://%s/metrics; Ctrl-C stops", addr)
	})
	if err != nil {
		log.Fatal(err)
	}
}

// The workload: workers contend for a few resources, each holding its
// lease for a moment.
const (
	workers   = 4
	resources = 8
	hold      = 10 * time.Millisecond
)

// run serves the engine's metrics on listen until ctx ends, calling ready
// with the address once it listens.
func run(ctx context.Context, nodes []string, listen string, ready func(addr string)) error {
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		return err
	}
	meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer meters.Shutdown(context.Background())

	e, err := engine.New(engine.Config{Nodes: nodes, MeterProvider: meters})
	if err != nil {
		return err
	}
	defer e.Close()

	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer srv.Shutdown(context.Background())
	ready(ln.Addr().String())

	// One lease kept alive by automatic extension, for the extension
	// instruments.
	if _, err := e.Acquire(ctx, "example:kept", engine.WithTTL(time.Second), engine.WithAutoExtend(time.Hour)); err != nil {
		return err
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; ctx.Err() == nil; i++ {
				l, err := e.Acquire(ctx, fmt.Sprintf("example:%d", i%resources))
				if err != nil {
					continue // counted in redlease.acquire.duration with its outcome
				}
				select {
				case <-time.After(hold):
				case <-ctx.Done():
				}
				_ = l.Release(context.Background())
			}
		})
	}
	select {
	case <-ctx.Done():
	case err = <-served:
	}
	wg.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

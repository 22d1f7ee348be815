package main

import (
	"errors"
	"fmt"
	"html"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

// The plot: one row per added RTT, workload and node count, each with two panels
// side by side, cycles/s and acquire p99 against workers, one line per
// client.
const (
	plotW     = 1100.0
	rowH      = 400.0
	footH     = 28.0
	marginL   = 78.0 // room for the y tick labels and axis title
	marginR   = 24.0
	marginTop = 86.0 // row title, legend, then panel title
	marginBot = 54.0 // x tick labels and axis title
)

// style gives each client a colour, a dash pattern and a marker shape, so
// the lines stay apart in grey print too.
type style struct {
	color, dash, marker string
}

var styles = map[string]style{
	"redlease":              {"#d62728", "", "circle"},
	"redsync":               {"#1f77b4", "", "square"},
	"redsync-rueidis":       {"#17becf", "6 4", "square"},
	"redsync-rueidis-tuned": {"#9467bd", "", "square"},
	"raw":                   {"#555555", "6 4", "diamond"},
	"raw-tuned":             {"#2ca02c", "", "diamond"},
	"rueidislock":           {"#ff7f0e", "", "triangle"},
	"redislock":             {"#8c564b", "2 3", "triangle"},
}

// writePlot writes the SVG for results to path. Held runs are left out:
// they have one point, and their numbers are of another kind.
func writePlot(path string, results []Result, clients []string, perPoint time.Duration) error {
	results = slices.DeleteFunc(slices.Clone(results), func(r Result) bool { return r.Workload == heldWorkload })
	if len(results) == 0 {
		return errors.New("nothing to plot: held runs are not plotted")
	}
	type rowKey struct {
		workload string
		nodes    int
		rtt      float64
	}
	var keys []rowKey
	for _, r := range results {
		if k := (rowKey{r.Workload, r.Nodes, r.AddedRTTUS}); !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	height := rowH*float64(len(keys)) + footH + 20
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="Helvetica, Arial, sans-serif" font-size="12">`+"\n",
		plotW, height, plotW, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	for i, k := range keys {
		var rows []Result
		var here []string // the row's clients, in -clients order
		for _, r := range results {
			if r.Workload == k.workload && r.Nodes == k.nodes && r.AddedRTTUS == k.rtt {
				rows = append(rows, r)
			}
		}
		for _, c := range clients {
			if slices.ContainsFunc(rows, func(r Result) bool { return r.Client == c }) {
				here = append(here, c)
			}
		}
		plotRow(&b, float64(i)*rowH+20, k.workload, rows, here, perPoint)
	}
	text(&b, plotW/2, height-10, "middle", "#666", 11, fmt.Sprintf("go run ./bench · %s · %s/%s · GOMAXPROCS=%d · %s",
		time.Now().Format("2006-01-02 15:04"), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), runtime.Version()))
	b.WriteString("</svg>\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// plotRow draws one workload: its title, legend and two panels.
func plotRow(b *strings.Builder, top float64, workload string, rows []Result, clients []string, perPoint time.Duration) {
	r0 := rows[0]
	nodes := fmt.Sprintf("%d nodes", r0.Nodes)
	if r0.DeadNodes > 0 {
		nodes = fmt.Sprintf("%d of %d nodes dead", r0.DeadNodes, r0.Nodes)
	}
	if r0.AddedRTTUS > 0 {
		nodes += fmt.Sprintf(" at %s added RTT", fmtRTT(r0.AddedRTTUS))
	}
	title := fmt.Sprintf("%s: %s, %d resources, %v per point, %v TTL", workload, nodes, r0.Resources, perPoint, lockTTL)
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="16" font-weight="bold">%s</text>`+"\n", 16.0, top+26, html.EscapeString(title))

	// Legend, on the line below the title.
	x := 16.0
	for _, c := range clients {
		st := styles[c]
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2.5" stroke-dasharray="%s"/>`+"\n",
			x, top+47, x+28, top+47, st.color, st.dash)
		marker(b, st, x+14, top+47)
		text(b, x+34, top+52, "start", "#222", 13, c)
		x += 34 + float64(7*len(c)) + 22
	}

	var workers []int
	for _, r := range rows {
		if !slices.Contains(workers, r.Workers) {
			workers = append(workers, r.Workers)
		}
	}
	slices.Sort(workers)

	left := panel{x0: marginL, y0: top + marginTop, w: plotW/2 - marginL - marginR, h: rowH - marginTop - marginBot}
	left.xAxis(workers)
	left.yLinear(maxOf(rows, func(r Result) float64 { return r.CyclesPerS }))
	left.draw(b, "Throughput", "cycles/s (acquire + release)", rows, clients, workers, func(r Result) float64 { return r.CyclesPerS })

	right := panel{x0: left.x0 + plotW/2, y0: left.y0, w: left.w, h: left.h}
	right.xAxis(workers)
	right.yLog(rows)
	right.draw(b, "Acquire latency, p99", "acquire p99 (log scale)", rows, clients, workers, func(r Result) float64 { return r.AcquireP99 })
}

// panel maps data to pixels: x is log2(workers), y linear or log10(µs).
type panel struct {
	x0, y0, w, h float64 // plot area, px
	xmin, xmax   float64 // log2 workers
	ymin, ymax   float64 // value, or log10 of it when logY
	logY         bool
	yticks       []tick
}

type tick struct {
	v     float64 // in the axis' own units (log10 for a log axis)
	label string  // empty for a minor tick
}

func (p *panel) xAxis(workers []int) {
	lo, hi := math.Log2(float64(workers[0])), math.Log2(float64(workers[len(workers)-1]))
	pad := max(0.4, (hi-lo)*0.06) // keeps end markers off the frame
	p.xmin, p.xmax = lo-pad, hi+pad
}

func (p *panel) px(workers int) float64 {
	return p.x0 + (math.Log2(float64(workers))-p.xmin)/(p.xmax-p.xmin)*p.w
}

func (p *panel) py(v float64) float64 {
	if p.logY {
		v = math.Log10(v)
	}
	return p.y0 + p.h - (v-p.ymin)/(p.ymax-p.ymin)*p.h
}

// yLinear: from 0 to a round number at or above top, in about 5 steps.
func (p *panel) yLinear(top float64) {
	if top <= 0 {
		top = 1
	}
	step := math.Pow(10, math.Floor(math.Log10(top/5)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if top/(step*m) <= 6 {
			step *= m
			break
		}
	}
	p.ymin, p.ymax = 0, math.Ceil(top/step)*step
	for v := 0.0; v <= p.ymax+step/2; v += step {
		p.yticks = append(p.yticks, tick{v, fmtCount(v)})
	}
}

// yLog: whole decades of µs around the data, with 2 and 5 in between
// (labelled too when the range is short).
func (p *panel) yLog(rows []Result) {
	p.logY = true
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, r := range rows {
		if r.AcquireP99 > 0 {
			lo, hi = min(lo, r.AcquireP99), max(hi, r.AcquireP99)
		}
	}
	if math.IsInf(lo, 1) {
		lo, hi = 1, 10
	}
	p.ymin, p.ymax = math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if p.ymax == p.ymin {
		p.ymax++
	}
	short := p.ymax-p.ymin <= 2
	for d := p.ymin; d <= p.ymax; d++ {
		p.yticks = append(p.yticks, tick{d, fmtMicros(math.Pow(10, d))})
		if d == p.ymax {
			break
		}
		for _, m := range []float64{2, 5} {
			t := tick{v: d + math.Log10(m)}
			if short {
				t.label = fmtMicros(m * math.Pow(10, d))
			}
			p.yticks = append(p.yticks, t)
		}
	}
}

// draw renders the frame, grid, ticks, titles and one line per client.
func (p *panel) draw(b *strings.Builder, title, ylabel string, rows []Result, clients []string, workers []int, value func(Result) float64) {
	text(b, p.x0+p.w/2, p.y0-10, "middle", "#222", 14, title)
	for _, t := range p.yticks {
		y := p.y0 + p.h - (t.v-p.ymin)/(p.ymax-p.ymin)*p.h
		grid := "#e6e6e6"
		if t.label == "" {
			grid = "#f3f3f3"
		}
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", p.x0, y, p.x0+p.w, y, grid)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#444"/>`+"\n", p.x0-4, y, p.x0, y)
		if t.label != "" {
			text(b, p.x0-7, y+4, "end", "#333", 11, t.label)
		}
	}
	for _, w := range workers {
		x := p.px(w)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eeeeee"/>`+"\n", x, p.y0, x, p.y0+p.h)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#444"/>`+"\n", x, p.y0+p.h, x, p.y0+p.h+4)
		text(b, x, p.y0+p.h+17, "middle", "#333", 11, fmt.Sprint(w))
	}
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#444"/>`+"\n", p.x0, p.y0, p.w, p.h)
	text(b, p.x0+p.w/2, p.y0+p.h+40, "middle", "#222", 12, "workers (log₂ scale)")
	cy := p.y0 + p.h/2
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#222" font-size="12" transform="rotate(-90 %.1f %.1f)">%s</text>`+"\n",
		p.x0-58, cy, p.x0-58, cy, html.EscapeString(ylabel))

	for _, c := range clients {
		st, ok := styles[c]
		if !ok {
			continue
		}
		var pts []string
		var xy [][2]float64
		for _, w := range workers {
			for _, r := range rows {
				if r.Client == c && r.Workers == w && value(r) > 0 {
					x, y := p.px(w), p.py(value(r))
					pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
					xy = append(xy, [2]float64{x, y})
				}
			}
		}
		if len(pts) > 1 {
			fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2.5" stroke-dasharray="%s" stroke-linejoin="round"/>`+"\n",
				strings.Join(pts, " "), st.color, st.dash)
		}
		for _, pt := range xy {
			marker(b, st, pt[0], pt[1])
		}
	}
}

// marker draws st's point shape centred on x, y.
func marker(b *strings.Builder, st style, x, y float64) {
	switch st.marker {
	case "square":
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="9" height="9" fill="%s" stroke="white" stroke-width="1"/>`+"\n", x-4.5, y-4.5, st.color)
	case "diamond":
		fmt.Fprintf(b, `<polygon points="%.1f,%.1f %.1f,%.1f %.1f,%.1f %.1f,%.1f" fill="%s" stroke="white" stroke-width="1"/>`+"\n",
			x, y-6, x+6, y, x, y+6, x-6, y, st.color)
	case "triangle":
		fmt.Fprintf(b, `<polygon points="%.1f,%.1f %.1f,%.1f %.1f,%.1f" fill="%s" stroke="white" stroke-width="1"/>`+"\n",
			x, y-6, x+6, y+5, x-6, y+5, st.color)
	default:
		fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="5" fill="%s" stroke="white" stroke-width="1"/>`+"\n", x, y, st.color)
	}
}

func text(b *strings.Builder, x, y float64, anchor, color string, size int, s string) {
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="%s" fill="%s" font-size="%d">%s</text>`+"\n",
		x, y, anchor, color, size, html.EscapeString(s))
}

func maxOf(rows []Result, value func(Result) float64) float64 {
	m := 0.0
	for _, r := range rows {
		m = max(m, value(r))
	}
	return m
}

// fmtCount shows a tick value of cycles/s: 0, 500, 2k, 12.5k, 1.2M.
func fmtCount(v float64) string {
	switch {
	case v >= 1e6:
		return trimZero(fmt.Sprintf("%.2f", v/1e6)) + "M"
	case v >= 1e3:
		return trimZero(fmt.Sprintf("%.2f", v/1e3)) + "k"
	}
	return trimZero(fmt.Sprintf("%.2f", v))
}

func trimZero(s string) string {
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

package main

import "testing"

// TestRowsStrongest checks the grouping of results into rows and the
// choice of the strongest peer of each, which the ratios rest on.
func TestRowsStrongest(t *testing.T) {
	results := []Result{
		{Client: "redlease", Workload: uncontended, Nodes: 1, Workers: 128, CyclesPerS: 100},
		{Client: "raw", Workload: uncontended, Nodes: 1, Workers: 128, CyclesPerS: 80},
		{Client: "rueidislock", Workload: uncontended, Nodes: 1, Workers: 128, CyclesPerS: 120},
		{Client: "raw-tuned", Workload: uncontended, Nodes: 1, Workers: 128, CyclesPerS: 120},
		{Client: "redlease", Workload: uncontended, Nodes: 5, Workers: 128, CyclesPerS: 30},
		{Client: "raw", Workload: uncontended, Nodes: 5, Workers: 128, CyclesPerS: 10},
		{Client: "raw", Workload: uncontended, Nodes: 5, Workers: 512, CyclesPerS: 12},
		{Client: "redlease", Workload: uncontended, Nodes: 1, Workers: 128, AddedRTTUS: 1000, CyclesPerS: 40},
		{Client: "raw", Workload: uncontended, Nodes: 1, Workers: 128, AddedRTTUS: 1000, CyclesPerS: 50},
	}
	got := rows(results)
	if len(got) != 4 {
		t.Fatalf("rows: got %d, want 4 (1 node/128, 5 nodes/128, 5 nodes/512, 1 node/128 at 1ms added RTT)", len(got))
	}
	rl, peers := got[0].split()
	if rl == nil || rl.CyclesPerS != 100 || len(peers) != 3 {
		t.Fatalf("split of the 1-node row: redlease %v, %d peers; want redlease at 100 and 3 peers", rl, len(peers))
	}
	if best := strongest(peers); best.Client != "rueidislock" {
		t.Errorf("strongest: got %s, want rueidislock (the first of the two at 120)", best.Client)
	}
	if best := strongest(got[1].results[1:]); best.Client != "raw" {
		t.Errorf("strongest of a lone peer: got %s, want raw", best.Client)
	}
	if rl, _ := got[2].split(); rl != nil {
		t.Errorf("split of a row without redlease: got %v, want nil", rl)
	}
	if rl, peers := got[3].split(); rl == nil || rl.CyclesPerS != 40 || len(peers) != 1 || peers[0].CyclesPerS != 50 {
		t.Errorf("split of the row with added RTT: redlease %v, peers %v; want redlease at 40 and raw at 50, apart from the row without", rl, peers)
	}
}

package node

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestDeadlineRearmsUntilItFires(t *testing.T) {
	d := (*deadline)(nil).arm(time.Now().Add(time.Hour))
	if !d.disarm() {
		t.Fatal("an hour's deadline fired at once")
	}
	at := time.Now().Add(20 * time.Millisecond)
	if again := d.arm(at); again != d {
		t.Fatal("a deadline that did not fire was not reused")
	}
	if got, ok := d.Deadline(); !ok || !got.Equal(at) {
		t.Fatalf("Deadline = %v, %v; want %v, true", got, ok, at)
	}
	if d.Err() != nil {
		t.Fatalf("Err before the deadline = %v", d.Err())
	}
	select {
	case <-d.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done did not close at the re-armed deadline")
	}
	if !errors.Is(d.Err(), context.DeadlineExceeded) {
		t.Fatalf("Err after the deadline = %v", d.Err())
	}
	if d.disarm() {
		t.Fatal("disarm of a deadline that fired said it may be armed again")
	}
	next := (*deadline)(nil).arm(time.Now().Add(time.Hour))
	defer next.disarm()
	if next.Err() != nil || isClosed(next.Done()) {
		t.Fatal("a new deadline after one fired starts ended")
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

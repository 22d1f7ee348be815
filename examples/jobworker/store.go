package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/rueidis"

	"github.com/redlease/redlease/engine"
)

// The store: a Redis of its own (not one of the lock nodes) that keeps
// each job's result and fence. Its keys:
//
//	jobworker:job:<id>  hash: fence (the highest token seen), token, result
//	                    and worker of the accepted result, writes (results
//	                    accepted), rejected (claims and writes refused)
//	jobworker:done      set of the ids of the jobs done
//	jobworker:handoff:<id>  the job's lease's engine.Handle, as JSON, from a
//	                    worker that stopped during the job (-handoff); it
//	                    lives as long as the lease's TTL
//
// Both scripts compare the caller's token with the fence in the same
// step as they write, which is what makes the fence hold.
const (
	jobKeyPrefix     = "jobworker:job:"
	doneKey          = "jobworker:done"
	handOffKeyPrefix = "jobworker:handoff:"
)

var (
	//go:embed claim.lua
	claimLua    string
	claimScript = rueidis.NewLuaScript(claimLua)
	//go:embed write.lua
	writeLua    string
	writeScript = rueidis.NewLuaScript(writeLua)
)

// errStale: the store refused a token lower than one it has seen for the
// job: a later holder took the job over.
var errStale = errors.New("jobworker: stale fencing token: the job has a later holder")

type store struct{ client rueidis.Client }

func dialStore(addr string) (*store, error) {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		return nil, err
	}
	return &store{c}, nil
}

func (s *store) Close() { s.client.Close() }

// Done reports whether the job's result is stored. It is a hint for
// skipping the job without taking its lease; Claim decides.
func (s *store) Done(ctx context.Context, job string) (bool, error) {
	return s.client.Do(ctx, s.client.B().Sismember().Key(doneKey).Member(job).Build()).AsBool()
}

// Left returns how many of jobs 1 to n are not done.
func (s *store) Left(ctx context.Context, n int) (int, error) {
	done, err := s.client.Do(ctx, s.client.B().Scard().Key(doneKey).Build()).AsInt64()
	return n - int(done), err
}

// HandOff leaves the handle of the job's lease for another worker, for
// the lease's TTL.
func (s *store) HandOff(ctx context.Context, job string, h engine.Handle) error {
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	return s.client.Do(ctx, s.client.B().Set().Key(handOffKeyPrefix+job).Value(string(b)).Px(h.TTL).Build()).Error()
}

// TakeHandOff takes the handle a stopping worker left for the job, if
// any: one worker gets it.
func (s *store) TakeHandOff(ctx context.Context, job string) (h engine.Handle, ok bool, err error) {
	b, err := s.client.Do(ctx, s.client.B().Getdel().Key(handOffKeyPrefix+job).Build()).AsBytes()
	switch {
	case rueidis.IsRedisNil(err):
		return h, false, nil
	case err != nil:
		return h, false, err
	}
	if err := json.Unmarshal(b, &h); err != nil {
		return h, false, fmt.Errorf("jobworker: the handle left for job %s: %w", job, err)
	}
	return h, true, nil
}

// Claim raises the job's fence to token and reports whether the job is
// done; errStale when the fence is above token already.
func (s *store) Claim(ctx context.Context, job string, token uint64) (done bool, err error) {
	n, err := claimScript.Exec(ctx, s.client, []string{jobKeyPrefix + job}, []string{strconv.FormatUint(token, 10)}).AsInt64()
	switch {
	case err != nil:
		return false, err
	case n < 0:
		return false, errStale
	}
	return n > 0, nil
}

// Write stores the job's result, written under the lease with token;
// errStale when the job's fence is above token.
func (s *store) Write(ctx context.Context, job string, token uint64, result, worker string) error {
	ok, err := writeScript.Exec(ctx, s.client, []string{jobKeyPrefix + job, doneKey},
		[]string{strconv.FormatUint(token, 10), result, worker, job}).AsInt64()
	switch {
	case err != nil:
		return err
	case ok == 0:
		return errStale
	}
	return nil
}

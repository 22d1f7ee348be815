package main

import (
	"context"
	_ "embed"
	"errors"
	"strconv"

	"github.com/redis/rueidis"
)

// The store: a Redis of its own (not one of the lock nodes) that keeps
// the leader's heartbeats. Its keys, for an election e:
//
//	leader:<e>      hash: fence (the highest token seen), leader (the name
//	                of the last accepted heartbeat's writer), beats
//	                (heartbeats accepted), rejected (heartbeats refused)
//	leader:<e>:log  list of the accepted heartbeats, "<token> <name>",
//	                oldest first, the last logSize of them
//
// The script compares the leader's token with the fence in the same step
// as it writes, which is what makes the fence hold.
const logSize = 10000

var (
	//go:embed beat.lua
	beatLua    string
	beatScript = rueidis.NewLuaScript(beatLua)
)

// errStale: the store refused a token lower than one it has seen: a later
// leader has written.
var errStale = errors.New("leader: stale fencing token: a later leader has written")

type store struct {
	client    rueidis.Client
	hash, log string
}

func dialStore(addr, election string) (*store, error) {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		return nil, err
	}
	return &store{client: c, hash: "leader:" + election, log: "leader:" + election + ":log"}, nil
}

func (s *store) Close() { s.client.Close() }

// Beat records a heartbeat of the leader with token; errStale when a
// later leader has written.
func (s *store) Beat(ctx context.Context, token uint64, name string) error {
	ok, err := beatScript.Exec(ctx, s.client, []string{s.hash, s.log},
		[]string{strconv.FormatUint(token, 10), name, strconv.Itoa(logSize)}).AsInt64()
	switch {
	case err != nil:
		return err
	case ok == 0:
		return errStale
	}
	return nil
}

//go:build !race

package engine

// raceSlowdown: 1 without the race detector (see race.go).
const raceSlowdown = 1

//go:build race

package engine

// raceSlowdown: under the race detector, the engine's own work costs some
// ten times its CPU (see refusalCost).
const raceSlowdown = 10

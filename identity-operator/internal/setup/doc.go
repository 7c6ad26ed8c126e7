// Package setup describes the identity-operator process for manager.Main
// (Operator): its flags and settings, scheme, cache options, handler and
// controller. It lets tests and the benchmark start the same wiring.
package setup

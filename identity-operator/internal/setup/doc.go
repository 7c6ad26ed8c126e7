// Package setup builds the identity-operator process from its flags and
// environment: settings, scheme, manager, handler and controller. It keeps
// cmd/main.go thin and lets tests and the benchmark start the same wiring.
package setup

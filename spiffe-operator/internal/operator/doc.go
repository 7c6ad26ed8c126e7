// Package operator assembles a spiffe-operator process: its flags and
// settings (read with viper next to the framework's), the SPIRE connection,
// the entry syncer, and the manager with both controllers. cmd/main.go, the
// integration tests and the benchmark all start the operator through New.
package operator

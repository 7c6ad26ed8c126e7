// Package nodes keeps of Node objects what per-node parent IDs are rendered
// from (name and UID) and looks them up.
package nodes

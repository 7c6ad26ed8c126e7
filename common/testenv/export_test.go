package testenv

// SimulateCrash ends the node's own processes at once and releases the
// machine lock without undoing anything, as when the test process dies:
// the shims and containers live on, and Stop does nothing afterwards.
func (n *Node) SimulateCrash() {
	for _, name := range []string{"kubelet", "kube-scheduler", "kube-controller-manager", "containerd"} {
		_ = n.process(name).Kill()
	}
	n.lock.release()
	n.stopOnce.Do(func() {})
}

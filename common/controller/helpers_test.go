package controller_test

import (
	"context"
	"sync"

	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

type syncMap struct {
	mu sync.Mutex
	m  map[client.ObjectKey]int64
}

func (s *syncMap) inc(k client.ObjectKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[client.ObjectKey]int64{}
	}
	s.m[k]++
}

func (s *syncMap) get(k client.ObjectKey) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[k]
}

type eventsList struct{ items []eventsv1.Event }

func (l *eventsList) load(ctx context.Context, ns string) error {
	list := &eventsv1.EventList{}
	if err := cp.Client.List(ctx, list, client.InNamespace(ns)); err != nil {
		return err
	}
	l.items = list.Items
	return nil
}

func (l *eventsList) count(reason string) int {
	n := 0
	for _, e := range l.items {
		if e.Reason == reason {
			n++
		}
	}
	return n
}

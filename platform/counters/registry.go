package counters

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// RefreshEvery is how often a Registry reads the namespaces again: a change made through another
// collector reaches this one within it.
const RefreshEvery = time.Second

// missRefresh bounds how often a lookup of a namespace the Registry does not hold reads the
// store at once: a namespace created through another collector a moment ago is found, and
// requests for unknown namespaces cost at most one query per interval.
const missRefresh = 200 * time.Millisecond

// Registry holds every namespace in memory, for the routes: changes go to the store and take
// effect here at once, and Run reads the store again every RefreshEvery for the changes made
// elsewhere.
type Registry struct {
	store  Store
	now    func() time.Time
	logger *slog.Logger

	mu        sync.RWMutex
	byName    map[string]Namespace
	deleted   map[string]uint64 // namespaces deleted here, by the tombstone's version, until a read holds it
	refreshed time.Time
	version   uint64 // the highest version seen or written
}

// NewRegistry returns an empty Registry over store; call Refresh before serving.
func NewRegistry(store Store, now func() time.Time, logger *slog.Logger) *Registry {
	return &Registry{store: store, now: now, logger: logger, byName: map[string]Namespace{}, deleted: map[string]uint64{}}
}

// Refresh reads every namespace from the store. A change made here while the store was being
// read (a Put or Delete racing the read) is kept, not undone by the older read.
func (r *Registry) Refresh(ctx context.Context) error {
	r.mu.RLock()
	since := r.version
	r.mu.RUnlock()
	all, err := r.store.All(ctx)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.install(all, since)
	return nil
}

// install makes all, read from the store when the highest version known was since, the
// namespaces held, keeping the changes made here after since that all does not have yet: every
// local change has a version above every one seen before it. Caller holds mu.
func (r *Registry) install(all map[string]Namespace, since uint64) {
	for name, ns := range r.byName {
		if cur, ok := all[name]; ns.Version > since && (!ok || cur.Version < ns.Version) {
			all[name] = ns
		}
	}
	for name, v := range r.deleted {
		if cur, ok := all[name]; ok && v > since && cur.Version < v {
			delete(all, name)
		}
		if v <= since {
			delete(r.deleted, name) // the read began after the tombstone was written
		}
	}
	r.byName, r.refreshed = all, r.now()
	for _, ns := range all {
		r.version = max(r.version, ns.Version)
	}
}

// Run refreshes the Registry every RefreshEvery until ctx ends; a failed read keeps what it
// holds and is logged.
func (r *Registry) Run(ctx context.Context) {
	t := time.NewTicker(RefreshEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := r.Refresh(ctx); err != nil && ctx.Err() == nil {
				r.logger.Warn("refresh counter namespaces; serving the ones held", "err", err)
			}
		}
	}
}

// Lookup returns namespace name. One it does not hold is read from the store first, at most
// every missRefresh.
func (r *Registry) Lookup(ctx context.Context, name string) (Namespace, bool, error) {
	r.mu.RLock()
	ns, ok := r.byName[name]
	stale := r.now().Sub(r.refreshed) >= missRefresh
	r.mu.RUnlock()
	if ok || !stale {
		return ns, ok, nil
	}
	if err := r.Refresh(ctx); err != nil {
		return Namespace{}, false, err
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	ns, ok = r.byName[name]
	return ns, ok, nil
}

// Put creates or changes namespace ns (its settings as ParseSpec made them) and returns it as
// stored, and whether it was created. A namespace that exists keeps its generation, so its
// counters keep their counts.
func (r *Registry) Put(ctx context.Context, ns Namespace) (Namespace, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	old, exists := r.byName[ns.Name]
	ns.ChangedAt = r.now().UTC()
	ns.Version = r.nextVersion(ns.ChangedAt)
	ns.Generation = ns.Version
	if exists {
		ns.Generation = old.Generation
	}
	if err := r.store.put(ctx, ns, false); err != nil {
		return Namespace{}, false, err
	}
	r.byName[ns.Name] = ns
	return ns, !exists, nil
}

// Delete deletes namespace name: writes stop at once here (within RefreshEvery elsewhere), and its
// counters' data is removed by its retention. It reports whether the namespace existed.
func (r *Registry) Delete(ctx context.Context, name string) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ns, ok := r.byName[name]
	if !ok {
		return false, nil
	}
	ns.ChangedAt = r.now().UTC()
	ns.Version = r.nextVersion(ns.ChangedAt)
	if err := r.store.put(ctx, ns, true); err != nil {
		return false, err
	}
	delete(r.byName, name)
	r.deleted[name] = ns.Version
	return true, nil
}

// nextVersion is a version above every one seen: the change's time in nanoseconds, or one more
// than the last when the clock is behind it.
func (r *Registry) nextVersion(at time.Time) uint64 {
	r.version = max(r.version+1, uint64(at.UnixNano()))
	return r.version
}

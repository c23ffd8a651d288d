package body

import (
	"context"
	"fmt"
	"sync"

	"github.com/idem-go/idem/storekit"
)

// Memory is a Store held in process memory. The zero value is not usable;
// call NewMemory. It is safe for concurrent use.
type Memory struct {
	mu      sync.RWMutex
	objects map[string]Object
}

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory { return &Memory{objects: make(map[string]Object)} }

// Put implements Store.
func (m *Memory) Put(ctx context.Context, key string, content []byte, contentType string) (string, error) {
	if err := m.check(); err != nil {
		return "", err
	}
	if err := CheckKey(key); err != nil {
		return "", err
	}
	if err := CheckContentType(contentType); err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	etag := ETag(content)
	m.mu.Lock()
	m.objects[key] = Object{Content: clone(content), ContentType: contentType, ETag: etag}
	m.mu.Unlock()
	return etag, nil
}

// Get implements Store. The returned content is a copy.
func (m *Memory) Get(ctx context.Context, key string) (*Object, error) {
	if err := m.check(); err != nil {
		return nil, err
	}
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.RLock()
	o, ok := m.objects[key]
	m.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, key)
	}
	o.Content = clone(o.Content)
	return &o, nil
}

// Delete implements Store.
func (m *Memory) Delete(ctx context.Context, key string) error {
	if err := m.check(); err != nil {
		return err
	}
	if err := CheckKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	delete(m.objects, key)
	m.mu.Unlock()
	return nil
}

// check refuses a Memory that NewMemory did not make.
func (m *Memory) check() error {
	if m == nil || m.objects == nil {
		return &storekit.OptionError{Option: "body.Memory", Reason: "nil or zero Memory: use NewMemory"}
	}
	return nil
}

// Len returns the number of stored objects (0 for a nil or zero Memory).
func (m *Memory) Len() int {
	if m.check() != nil {
		return 0
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.objects)
}

package memstore

// expiryHeap is a binary min-heap of entries by expiry. Each item carries
// its entry's ExpiresAt, so ordering reads the heap's own array and never
// follows a pointer to a record: removing from a heap of a million
// entries costs a few cache misses per level instead of several. Each
// entry knows its position (entry.index).
type expiryHeap []heapItem

type heapItem struct {
	exp int64 // the entry's rec.ExpiresAt
	e   *entry
}

func (h expiryHeap) set(i int, it heapItem) {
	h[i] = it
	it.e.index = i
}

// push adds e.
func (h *expiryHeap) push(e *entry) {
	*h = append(*h, heapItem{})
	h.up(len(*h)-1, heapItem{e.rec.ExpiresAt, e})
}

// fix restores the order after the record of the entry at i changed.
func (h expiryHeap) fix(i int) {
	it := h[i]
	it.exp = it.e.rec.ExpiresAt
	if i > 0 && it.exp < h[(i-1)/2].exp {
		h.up(i, it)
	} else {
		h.down(i, it)
	}
}

// remove takes out the entry at i.
func (h *expiryHeap) remove(i int) {
	old := *h
	last := old[len(old)-1]
	old[len(old)-1] = heapItem{}
	*h = old[:len(old)-1]
	if i == len(old)-1 {
		return
	}
	(*h)[i] = last
	h.fix(i)
}

// up places it at i or above, moving larger parents down.
func (h expiryHeap) up(i int, it heapItem) {
	for i > 0 {
		p := (i - 1) / 2
		if h[p].exp <= it.exp {
			break
		}
		h.set(i, h[p])
		i = p
	}
	h.set(i, it)
}

// down places it at i or below, moving smaller children up.
func (h expiryHeap) down(i int, it heapItem) {
	n := len(h)
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && h[r].exp < h[c].exp {
			c = r
		}
		if it.exp <= h[c].exp {
			break
		}
		h.set(i, h[c])
		i = c
	}
	h.set(i, it)
}

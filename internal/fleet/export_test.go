package fleet

// InternedNames is how many class names the index holds interned.
func InternedNames(ix *Index) int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return len(ix.nameList)
}

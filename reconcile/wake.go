package reconcile

// Poke wakes a loop through its one-slot channel without blocking: a burst of
// pokes while the loop is busy coalesces into one pass.
func Poke(wake chan<- struct{}) {
	select {
	case wake <- struct{}{}:
	default:
	}
}

// Forward turns every value received from ch into a Poke of wake. It returns
// when ch closes, which for a store watch happens when its context ends.
func Forward[T any](ch <-chan T, wake chan<- struct{}) {
	for range ch {
		Poke(wake)
	}
}

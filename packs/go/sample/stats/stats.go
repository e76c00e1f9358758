// Package stats uses what Go 1.19 lacks: the slices package and range over a function.
package stats

import (
	"iter"
	"slices"
)

// Evens yields the even numbers of xs, in order.
func Evens(xs []int) iter.Seq[int] {
	return func(yield func(int) bool) {
		for _, x := range xs {
			if x%2 == 0 && !yield(x) {
				return
			}
		}
	}
}

// Largest is the largest of xs.
func Largest(xs []int) int {
	return slices.Max(xs)
}

package main

import (
	"fmt"

	"example.com/sample/stats"
)

func main() {
	xs := []int{3, 8, 5, 4}
	total := 0
	for x := range stats.Evens(xs) {
		total += x
	}
	fmt.Println("largest", stats.Largest(xs), "evens", total)
}

package config

import (
	"fmt"
	"strconv"
)

// parseFloat and parseInt read values strictly, so that a typo in an
// environment variable is an error rather than a silent zero.
func parseFloat(s string) (float64, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	return f, nil
}

func parseInt(s string) (int, error) {
	i, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not an integer", s)
	}
	return i, nil
}

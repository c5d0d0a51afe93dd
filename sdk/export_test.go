package sdk

import "time"

// CloseIdleValidators closes the validators of c's runtime that no apply
// holds, as the janitor does after validatorIdle, and returns how many
// stay loaded.
func CloseIdleValidators(c *Client) int {
	c.runtime.closeIdle(time.Now().Add(time.Hour))
	c.runtime.mu.Lock()
	defer c.runtime.mu.Unlock()
	return len(c.runtime.loaded)
}

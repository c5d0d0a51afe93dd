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

// TrialOver returns a channel closed when the canary of config now on
// trial on c is no longer watched (promoted, stopped, replaced, or
// reported), or nil when none is on trial.
func TrialOver(c *Client, config string) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t := c.trials[config]; t != nil {
		return t.over
	}
	return nil
}

// WithSessionStart sets how long a session's hello may go unanswered
// before the client uses the server's unary calls (DefaultSessionStart).
func WithSessionStart(d time.Duration) Option { return func(c *config) { c.sessionStart = d } }

// WithSessionRetry sets how long the client follows a server without a
// session by its unary calls before it asks it again (DefaultSessionRetry).
func WithSessionRetry(d time.Duration) Option { return func(c *config) { c.sessionRetry = d } }
